"""The agent as an Agent Lightning rollout (Agent Lightning 1.0.2): its controller starts one process per rollout
with the gateway's addresses in the environment; the agent runs its turn with every model request sent to the
gateway (which forwards it to vLLM, asks for the token ids and log-probabilities, and records them), then posts
the turn's CRAG-MM score as the rollout's reward.

    # a rollout's input and config (POST /api/rollouts): the turn as GLASSES_RAG_ROW, how to run it as GLASSES_RAG_SETUP
    {"input": {"row": {...EngineRow...}, "setup": {...TurnSetup...}},
     "config": {"local": {"agent_class": "glasses_rag.training.engines.agent_lightning:GlassesRagRollout",
                          "env_map": {"GLASSES_RAG_ROW": "input.row", "GLASSES_RAG_SETUP": "input.setup"}}}}
    python -m glasses_rag.training.engines.agent_lightning     # what a Kubernetes job's container runs

Read from the 1.0.2 wheel: the controller sets AGL_OPENAI_BASE_URL
(`<gateway>/proxy/rollout/<rollout id>/attempt/<attempt id>/mode/<train|val>/openai/v1`), AGL_EVENT_URL
(`<gateway>/api/rollouts/<rollout id>/attempt/<attempt id>/events`) and AGL_KEY (a Bearer key, may be empty), plus
the `env_map` entries from the rollout's input; the gateway refuses `stream: true` (400), answers 429 with
Retry-After while training pauses it, and takes events as `{"event_type": "reward", "data": {"value": <float>,
...}}` (schemas.EventCreate, RewardData). The runner never streams, waits out 429s (the model client retries them
with back-off), and exits non-zero on failure (the controller then marks the rollout failed). The local
controller runs `agent_class().run()` in its own Python (>= 3.12): `GlassesRagRollout.run` starts this module
under GLASSES_RAG_PYTHON (the project's interpreter) when that is set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any

from pydantic import BaseModel

GATEWAY_PATH = re.compile(r"/proxy/rollout/(?P<rollout>[^/]+)/attempt/(?P<attempt>[^/]+)/mode/(?P<mode>train|val)/")


class AglRollout(BaseModel):
    """What the controller gave this process: where the gateway is, which rollout and attempt, the key."""

    openai_base_url: str
    event_url: str
    key: str | None
    rollout_id: str
    attempt_id: str
    mode: str


def rollout_from_env(env: dict[str, str] | None = None) -> AglRollout:
    """The rollout of this process, from AGL_OPENAI_BASE_URL, AGL_EVENT_URL and AGL_KEY; SystemExit saying what is
    missing."""
    env = dict(os.environ if env is None else env)
    missing = [k for k in ("AGL_OPENAI_BASE_URL", "AGL_EVENT_URL") if not env.get(k)]
    if missing:
        raise SystemExit(f"not started by Agent Lightning's controller: {', '.join(missing)} not set")
    url = env["AGL_OPENAI_BASE_URL"]
    m = GATEWAY_PATH.search(url + "/")
    if m is None:
        raise SystemExit(f"AGL_OPENAI_BASE_URL names no rollout (.../proxy/rollout/<id>/attempt/<id>/mode/...): {url}")
    return AglRollout(
        openai_base_url=url,
        event_url=env["AGL_EVENT_URL"],
        key=env.get("AGL_KEY") or None,
        rollout_id=m["rollout"],
        attempt_id=m["attempt"],
        mode=m["mode"],
    )


def gateway_policy(rollout: AglRollout, setup: Any, max_retries: int = 30) -> Any:
    """The model policy every decision of the turn goes through: the gateway's OpenAI route, unstreamed, 429s
    retried with back-off (up to ~12 minutes: a gateway paused for a weight update). The gateway names the model
    and sets the temperature itself; the name sent here is only a placeholder it replaces."""
    from glasses_rag.models.vlm import ModelConfig
    from glasses_rag.policies.model.policy import make_model_policy

    cfg = ModelConfig(
        backend="openai",
        base_url=rollout.openai_base_url,
        model="agent-lightning",
        api_key=rollout.key,
        stream=False,
        max_retries=max_retries,
        max_tokens=setup.max_tokens,
        temperature=setup.temperature,
        native_tools=False,
    )
    return make_model_policy(cfg)


def post_reward(rollout: AglRollout, value: float, message: str, attempts: int = 8) -> None:
    """POST the reward event; transport errors, 429 and 5xx are tried again with back-off."""
    import httpx

    body = {"event_type": "reward", "data": {"value": value, "source": "agent", "message": message}}
    headers = {"Authorization": f"Bearer {rollout.key}"} if rollout.key else {}
    for attempt in range(attempts):
        try:
            r = httpx.post(rollout.event_url, json=body, headers=headers, timeout=30.0)
            if r.status_code < 400:
                return
            if r.status_code != 429 and r.status_code < 500:
                raise SystemExit(f"the gateway refused the reward ({r.status_code}): {r.text[:300]}")
        except httpx.HTTPError:
            if attempt == attempts - 1:
                raise
        time.sleep(min(30.0, 0.5 * 2**attempt))
    raise SystemExit(f"the gateway did not take the reward after {attempts} attempts")


def main(argv: list[str] | None = None, search: Any = None) -> int:
    """Run the rollout this process was started for (GLASSES_RAG_ROW, GLASSES_RAG_SETUP) and post its reward."""
    from glasses_rag.training.engines.turns import EngineRow, TurnSetup, run_turn

    rollout = rollout_from_env()
    row_text = os.environ.get("GLASSES_RAG_ROW")
    if not row_text:
        raise SystemExit("GLASSES_RAG_ROW is not set: map the rollout's input row to it (config.local.env_map)")
    row = EngineRow.model_validate_json(row_text)
    setup = TurnSetup.model_validate_json(os.environ.get("GLASSES_RAG_SETUP") or "{}")
    trace, reward = run_turn(gateway_policy(rollout, setup), row, setup, search)
    post_reward(rollout, reward, f"{trace.score}: {str(trace.answer)[:200]}")
    print(json.dumps({"rollout": rollout.rollout_id, "score": trace.score, "reward": reward}))
    return 0


class GlassesRagRollout:
    """The agent class Agent Lightning's local controller runs (`agent_class().run()` in a fresh process): the
    rollout in this interpreter, or under GLASSES_RAG_PYTHON (the project's Python, when the controller's is
    another)."""

    def run(self) -> None:
        python = os.environ.get("GLASSES_RAG_PYTHON")
        if python and os.path.realpath(python) != os.path.realpath(sys.executable):
            code = subprocess.call([python, "-m", "glasses_rag.training.engines.agent_lightning"], env=dict(os.environ))
        else:
            code = main()
        if code:
            raise SystemExit(code)


if __name__ == "__main__":
    sys.exit(main())
