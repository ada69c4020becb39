"""glasses_rag.training.export: each decision step of a turn as a training example whose prompt is the request the model policy
sent (TRL's conversational prompt-completion format), labelled from the run's scores."""

from __future__ import annotations

import json
import re

import pytest
from PIL import Image
from support import KGSearch, make_agent

from glasses_rag.core.types import ImageInfo
from glasses_rag.policies.model.policy import make_model_policy
from glasses_rag.superglasses.logs import SGHop, SGLog
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from glasses_rag.training.export import Example, main
from graph.agent import TurnInput
from traces.store import TraceStore

F = FakeOpenAIServer
CALL = {"action": "call_tool", "tool": "image_search", "arguments": {"k": 3}, "rationale": "find it"}


def _answer(text: str) -> dict:
    return {"action": "answer", "answer": text, "confidence": 0.9, "entity": "Falcon 9", "rationale": "the KG"}


def _run(tmp_path, answers: list[str], scores: list[str | None]):
    """Turns of a text-only model policy over the fake server (one image search, then the answer inside the
    decision), scored as given; returns the run folder and the decide requests the server received."""
    store = TraceStore(tmp_path / "runs", "r1")
    with FakeOpenAIServer() as srv:
        for a in answers:
            srv.push(F.text_reply(json.dumps(CALL)), F.text_reply(json.dumps(_answer(a))))
        policy = make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=0, text_only=True)
        agent = make_agent(policy, KGSearch(), budget_s=600, self_check="off")
        for i, score in enumerate(scores):
            trace = agent.run_turn(TurnInput(task=1, session_id=f"s{i}", interaction_id=f"i{i}",
                                             question="who makes this rocket?", image=Image.new("RGB", (64, 48)),
                                             image_info=ImageInfo(size=(64, 48))))
            store.write(trace.model_copy(update={"score": score}))
        requests = [r for r in srv.requests if "Decide the next step" in json.dumps(r.get("messages"))]
    return store.dir, requests


def _examples(path) -> list[Example]:
    return [Example.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _budget_free(messages: list[dict]) -> str:
    """The messages with the seconds left taken out (they tick between the run and the export)."""
    return re.sub(r"about \d+ s", "about N s", json.dumps(messages))


def test_each_example_is_the_request_the_policy_sent(tmp_path):
    run, requests = _run(tmp_path, ["SpaceX"], ["correct"])
    out = tmp_path / "sft.jsonl"
    assert main(["--run", str(run), "--out", str(out), "--budget", "600"]) == 0
    first, second = _examples(out)
    assert len(requests) == 2
    for example, request in zip((first, second), requests):
        assert _budget_free(example.prompt) == _budget_free(request["messages"])
    text = out.read_text(encoding="utf-8")
    assert "$tools" not in text and "$reply_format" not in text and "image_search(" in first.prompt[0]["content"]
    # the call's result as the model saw it: the evidence text, not the trace's one-line summary
    assert "Falcon 9" in second.prompt[-1]["content"] and "[1]" in second.prompt[-1]["content"]
    # completions: what the decision grammar lets the model write (compact JSON, keys in schema order)
    assert first.completion == [{"role": "assistant", "content":
                                 '{"action": "call_tool", "tool": "image_search", "arguments": {"k": 3}, "rationale": ""}'}]
    # ... exactly what the grammar of the decision schema accepts (xgrammar, as in-process generation uses it)
    xgr = pytest.importorskip("xgrammar")
    from glasses_rag.policies.model.replies import decision_schema
    from graph.state import tool_spec
    from tools import default_registry

    schema = decision_schema([tool_spec(t) for t in default_registry().for_task(1)])["schema"]
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)
    for example in (first, second):
        assert xgr.testing._is_grammar_accept_string(grammar, example.completion[0]["content"])
    assert json.loads(second.completion[0]["content"]) == {"action": "answer", "answer": "SpaceX", "confidence": 0.9,
                                                           "entity": "Falcon 9", "rationale": ""}
    assert [e.meta["step"] for e in (first, second)] == [0, 1] and first.meta["label"] == "correct"


def test_wrong_turns_become_abstentions_and_abstentions_stay(tmp_path):
    run, _ = _run(tmp_path, ["SpaceX", "Boeing", "I don't know"], ["correct", "incorrect", "missing"])
    out = tmp_path / "sft.jsonl"

    def answers(*extra: str) -> list[tuple[str, str]]:
        assert main(["--run", str(run), "--out", str(out), *extra]) == 0
        finals = [e for e in _examples(out) if '"action": "answer"' in e.completion[0]["content"]]
        return [(json.loads(e.completion[0]["content"])["answer"], e.meta["label"]) for e in finals]

    assert answers() == [("SpaceX", "correct"), ("I don't know", "wrong-as-idk"), ("I don't know", "teacher-idk")]
    assert answers("--wrong", "drop", "--no-abstentions") == [("SpaceX", "correct")]
    assert answers("--wrong", "keep")[1] == ("Boeing", "wrong-kept")
    idk = next(e for e in _examples(out) if e.meta["label"] == "teacher-idk" and e.meta["step"] == 1)
    assert json.loads(idk.completion[0]["content"])["entity"] is None


def test_an_unscored_run_needs_keep_all(tmp_path, capsys):
    run, _ = _run(tmp_path, ["SpaceX"], [None])
    out = tmp_path / "x.jsonl"
    assert main(["--run", str(run), "--out", str(out)]) == 2
    assert "--keep all" in capsys.readouterr().err
    assert main(["--run", str(run), "--out", str(out), "--keep", "all"]) == 0 and len(_examples(out)) == 2


def test_native_mode_writes_tool_calls_with_the_tools(tmp_path):
    run, _ = _run(tmp_path, ["SpaceX"], ["correct"])
    out = tmp_path / "native.jsonl"
    assert main(["--run", str(run), "--out", str(out), "--mode", "native"]) == 0
    first, second = _examples(out)
    call = first.completion[0]["tool_calls"][0]["function"]
    assert call["name"] == "image_search" and json.loads(call["arguments"]) == {"k": 3}
    assert second.completion[0]["tool_calls"][0]["function"]["name"] == "final_answer"
    assert {t["function"]["name"] for t in first.tools or []} >= {"image_search", "final_answer"}


def test_superglasses_trajectories_render_like_a_run(tmp_path):
    logs = [SGLog(id="sg1", question="Who designed this building?", ground_truth="Frank Gehry",
                  hops=[SGHop(sub_question="What building is this?", tool_used="Image Search",
                              search_result_snippet="Walt Disney Concert Hall"),
                        SGHop(sub_question="Who designed it?", tool_used="Text Search",
                              search_keywords="Walt Disney Concert Hall architect",
                              search_result_snippet="designed by Frank Gehry")]),
            SGLog(id="sg2", question="No ground truth here")]
    src = tmp_path / "annotations.jsonl"
    src.write_text("".join(json.dumps(lg.dump()) + "\n" for lg in logs), encoding="utf-8")
    out = tmp_path / "sg.jsonl"
    assert main(["--superglasses", str(src), "--out", str(out)]) == 0
    steps = _examples(out)
    assert [json.loads(e.completion[0]["content"]).get("tool") for e in steps] == ["image_search", "web_search", None]
    assert json.loads(steps[1].completion[0]["content"])["arguments"] == {"query": "Walt Disney Concert Hall architect"}
    assert json.loads(steps[2].completion[0]["content"])["answer"] == "Frank Gehry"
    assert "designed by Frank Gehry" in steps[2].prompt[-1]["content"]
    assert "Who designed this building?" in steps[0].prompt[1]["content"]


def test_a_vlm_example_points_at_its_photo_in_trl_vision_format(tmp_path):
    run, _ = _run(tmp_path, ["SpaceX"], ["correct"])
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (64, 48)).save(photos / "s0.jpg")
    out = tmp_path / "vlm.jsonl"
    assert main(["--run", str(run), "--out", str(out), "--images", "--image-dir", str(photos)]) == 0
    first = _examples(out)[0]
    assert first.images == [str((photos / "s0.jpg").resolve())]
    parts = first.prompt[1]["content"]
    assert parts[0] == {"type": "image"} and "attached" in parts[1]["text"] and "data:" not in json.dumps(first.prompt)
