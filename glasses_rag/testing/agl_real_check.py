"""The Agent Lightning runner against the real Agent Lightning gateway: `run_real_gateway_check(agl_python, ...)`
starts the gateway of the installed `agentlightning` (its own `create_app`, under `agl_python`, a Python >= 3.12
where it imports) in front of a vLLM stand-in that returns token ids as vLLM does (`return_token_ids`), registers
the model, creates a rollout, runs the runner as the controller would start it, and reads back what a trainer
reads: the rollout's events as triplets (prompt ids, response ids) and its reward.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from glasses_rag.testing.fake_agl_gateway import token_reply
from glasses_rag.testing.fake_model_server import FakeOpenAIServer

SERVED = "served-policy"
KEY = "agl-check-key"
GATEWAY = """
import sys, uvicorn
from agentlightning.server.app import create_app
config = {{"host": "127.0.0.1", "port": {port}, "key": "{key}", "default_proxy": {{"model_name": "{model}",
    "include_log_probs": True, "include_routed_experts": False, "train": {{"temperature": 1.0}},
    "val": {{"temperature": 0.7}}}}}}
uvicorn.run(create_app(config), host="127.0.0.1", port={port}, log_level="warning")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, proc: subprocess.Popen, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the Agent Lightning gateway exited ({proc.returncode})")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the Agent Lightning gateway did not come up")


def _rollout_env(url: str, rollout: str, row: dict, setup: dict) -> dict[str, str]:
    """The environment Agent Lightning 1.0.2's LocalReconciler gives a rollout's process."""
    return {
        "AGL_KEY": KEY,
        "AGL_OPENAI_BASE_URL": f"{url}/proxy/rollout/{rollout}/attempt/0/mode/train/openai/v1",
        "AGL_EVENT_URL": f"{url}/api/rollouts/{rollout}/attempt/0/events",
        "GLASSES_RAG_ROW": json.dumps(row),
        "GLASSES_RAG_SETUP": json.dumps(setup),
    }


def run_real_gateway_check(agl_python: str, tmp: Path, replies: list[str], search: Any) -> dict[str, Any]:
    """The triplets and reward the real gateway recorded for one rollout of the runner (see the module doc)."""
    from glasses_rag.training.engines import agent_lightning

    script = list(replies)
    row = {"task": 1, "session_id": "s0", "interaction_id": "s0-t0", "question": "who makes this rocket?"}
    row["ground_truth"] = "SpaceX"
    setup = {"tools": ["image_search"], "budget_s": 120, "max_steps": 2}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with FakeOpenAIServer(
        (SERVED,), responder=lambda body: token_reply(script.pop(0), json.dumps(body.get("messages")))
    ) as vllm:
        code = GATEWAY.format(port=port, key=KEY, model=SERVED)
        log = open(tmp / "gateway.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen([agl_python, "-c", code], stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_up(url, proc)
            auth = {"Authorization": f"Bearer {KEY}"}
            httpx.post(f"{url}/api/models", json=[{"model": SERVED, "endpoint": vllm.base_url}], headers=auth)
            httpx.post(f"{url}/api/rollouts", json=[{"rollout_id": "r1", "input": {"row": row}}], headers=auth)
            saved = dict(os.environ)
            os.environ.update(_rollout_env(url, "r1", row, setup))
            try:
                agent_lightning.main(search=search)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            events = httpx.get(f"{url}/api/rollouts/r1/events", params={"format": "triplet"}, headers=auth).json()
            forwarded = [r for r in vllm.requests if "messages" in r]
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()
    triplets = [e["data"] for e in events if e["event_type"] == "model_request"]
    rewards = [e["data"]["value"] for e in events if e["event_type"] == "reward"]
    return {
        "reward": rewards[-1] if rewards else None,
        "model_requests": len(triplets),
        "triplets": triplets,
        "forwarded": forwarded,
    }


__all__ = ["run_real_gateway_check"]
