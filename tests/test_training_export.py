"""glasses_rag.training.export: each decision step of a turn as a training example whose prompt is the request the model
policy sent (TRL's conversational prompt-completion format), labelled from the run's scores."""

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


COVE = {"verifications": [], "supported": True, "confidence": 0.9, "reason": "the KG says so"}


def _run(tmp_path, answers: list[str], scores: list[str | None], self_check: bool = False):
    """Turns of a text-only model policy over the fake server (one image search, then the answer inside the
    decision, then with `self_check` its verification), scored as given; returns the run folder and the decide
    requests the server received (with `self_check`, the verification requests after them)."""
    store = TraceStore(tmp_path / "runs", "r1")
    with FakeOpenAIServer() as srv:
        for a in answers:
            srv.push(F.text_reply(json.dumps(CALL)), F.text_reply(json.dumps(_answer(a))))
            if self_check and a != "I don't know":
                srv.push(F.text_reply(json.dumps(COVE)))
        policy = make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=0, text_only=True)
        agent = make_agent(policy, KGSearch(), budget_s=600, self_check="on" if self_check else "off")
        for i, score in enumerate(scores):
            trace = agent.run_turn(
                TurnInput(
                    task=1,
                    session_id=f"s{i}",
                    interaction_id=f"i{i}",
                    question="who makes this rocket?",
                    image=Image.new("RGB", (64, 48)),
                    image_info=ImageInfo(size=(64, 48)),
                )
            )
            store.write(trace.model_copy(update={"score": score}))
        requests = [r for r in srv.requests if "Decide the next step" in json.dumps(r.get("messages"))]
        requests += [r for r in srv.requests if "chain of verification" in json.dumps(r.get("messages"))]
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
    assert first.completion == [
        {
            "role": "assistant",
            "content": '{"action": "call_tool", "tool": "image_search", "arguments": {"k": 3}, "rationale": ""}',
        }
    ]
    # ... exactly what the grammar of the decision schema accepts (xgrammar, as in-process generation uses it)
    xgr = pytest.importorskip("xgrammar")
    from glasses_rag.policies.model.replies import decision_schema
    from graph.state import tool_spec
    from tools import default_registry

    schema = decision_schema([tool_spec(t) for t in default_registry().for_task(1)])["schema"]
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)
    for example in (first, second):
        assert xgr.testing._is_grammar_accept_string(grammar, example.completion[0]["content"])
    assert json.loads(second.completion[0]["content"]) == {
        "action": "answer",
        "answer": "SpaceX",
        "confidence": 0.9,
        "entity": "Falcon 9",
        "rationale": "",
    }
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
    logs = [
        SGLog(
            id="sg1",
            question="Who designed this building?",
            ground_truth="Frank Gehry",
            hops=[
                SGHop(
                    sub_question="What building is this?",
                    tool_used="Image Search",
                    search_result_snippet="Walt Disney Concert Hall",
                ),
                SGHop(
                    sub_question="Who designed it?",
                    tool_used="Text Search",
                    search_keywords="Walt Disney Concert Hall architect",
                    search_result_snippet="designed by Frank Gehry",
                ),
            ],
        ),
        SGLog(id="sg2", question="No ground truth here"),
    ]
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
    # the photo as the model is sent it (its data URL's JPEG bytes), written beside the export
    assert len(first.images) == 1 and first.images[0].startswith(str((tmp_path / "vlm.images").resolve()))
    parts = first.prompt[1]["content"]
    assert parts[0] == {"type": "image"} and "attached" in parts[1]["text"] and "data:" not in json.dumps(first.prompt)


def _answer_of(example: Example) -> str | None:
    return json.loads(example.completion[0]["content"]).get("answer")


def test_counterfactual_abstentions_withhold_or_replace_the_evidence(tmp_path):
    """An answered turn with the evidence it answered from taken away (or another entity's results put in its
    place) teaches "I don't know" at the decision after that call; the ratio sets how many."""
    from glasses_rag.superglasses.logs import read_run
    from glasses_rag.training.export import ExportOptions, examples_from_run

    run, _ = _run(tmp_path, ["SpaceX", "SpaceX"], ["correct", "correct"])
    out = tmp_path / "cf.jsonl"
    assert (
        main(
            [
                "--run",
                str(run),
                "--out",
                str(out),
                "--budget",
                "600",
                "--counterfactual",
                "1",
                "--counterfactual-kinds",
                "empty",
            ]
        )
        == 0
    )
    made = [e for e in _examples(out) if e.meta["label"] == "counterfactual-empty"]
    assert len(made) == 2 and all(_answer_of(e) == "I don't know" for e in made)
    shown = made[0].prompt[-1]["content"]
    assert "no match in the image KG" in shown and "Falcon 9" not in shown and made[0].meta["step"] == 1
    # the teacher's own examples are unchanged beside them
    assert [_answer_of(e) for e in _examples(out) if e.meta["label"] == "correct"] == [None, "SpaceX", None, "SpaceX"]
    assert main(["--run", str(run), "--out", str(out)]) == 0  # the default: none
    assert not [e for e in _examples(out) if e.meta["label"].startswith("counterfactual")]
    assert (
        main(["--run", str(run), "--out", str(out), "--counterfactual", "2", "--counterfactual-kinds", "empty,no-web"])
        == 0
    )  # no web search ran: only "empty" applies
    assert sum(e.meta["label"].startswith("counterfactual") for e in _examples(out)) == 2

    # swap: another turn's image search of another entity, never one whose results hold the teacher's answer
    traces = read_run(run, [])
    other = traces[1].model_copy(deep=True)
    call = next(s for s in other.steps if getattr(s, "tool", None) == "image_search")
    hit = dict(call.update["evidence"][0])
    call.update["evidence"] = [
        {
            **hit,
            "entity_name": "Eiffel Tower",
            "snippet": "height: 330 m; city: Paris",
            "attributes": {"height": "330 m"},
        }
    ]
    opts = ExportOptions(counterfactual=1.0, counterfactual_kinds=["swap"], self_check=False, budget_s=600)
    swapped = [e for e in examples_from_run([traces[0], other], opts) if e.meta["label"] == "counterfactual-swap"]
    assert [e.meta["session_id"] for e in swapped] == ["s0"]  # s1's donor (Falcon 9) states SpaceX: not used
    assert "Eiffel Tower" in swapped[0].prompt[-1]["content"] and "Falcon 9" not in swapped[0].prompt[-1]["content"]
    assert _answer_of(swapped[0]) == "I don't know"


def test_self_check_examples_are_the_verification_request_the_verifier_sent(tmp_path):
    """The self-check example's prompt is the chain-of-verification request the model policy's verifier sent in
    the run; a supported draft (a turn judged correct) -> supported, the same draft over a counterfactual's
    evidence or a turn judged wrong -> not supported; each verdict is what the verification grammar accepts."""
    from glasses_rag.policies.model.replies import COVE_SCHEMA
    from glasses_rag.policies.model.verify import cove_from_text

    run, requests = _run(tmp_path, ["SpaceX", "Boeing"], ["correct", "incorrect"], self_check=True)
    cove_requests = [r for r in requests if "chain of verification" in json.dumps(r["messages"])]
    assert len(cove_requests) == 2
    out = tmp_path / "sc.jsonl"
    assert (
        main(
            [
                "--run",
                str(run),
                "--out",
                str(out),
                "--budget",
                "600",
                "--counterfactual",
                "1",
                "--counterfactual-kinds",
                "empty",
                "--self-check",
            ]
        )
        == 0
    )
    checks = {e.meta["label"]: e for e in _examples(out) if e.meta.get("purpose") == "verify"}
    assert set(checks) == {"check-correct", "check-incorrect", "check-counterfactual-empty"}
    assert _budget_free(checks["check-correct"].prompt) == _budget_free(cove_requests[0]["messages"])
    assert _budget_free(checks["check-incorrect"].prompt) == _budget_free(cove_requests[1]["messages"])
    verdicts = {k: cove_from_text(e.completion[0]["content"]) for k, e in checks.items()}
    assert verdicts["check-correct"].supported and verdicts["check-correct"].confidence == 1.0
    assert not verdicts["check-incorrect"].supported and not verdicts["check-counterfactual-empty"].supported
    cf = checks["check-counterfactual-empty"].prompt[-1]["content"]
    assert "no match in the image KG" in cf and "draft answer to the question by chain of verification: SpaceX" in cf
    xgr = pytest.importorskip("xgrammar")
    grammar = xgr.Grammar.from_json_schema(json.dumps(COVE_SCHEMA["schema"]), any_whitespace=False, strict_mode=True)
    assert all(xgr.testing._is_grammar_accept_string(grammar, e.completion[0]["content"]) for e in checks.values())
