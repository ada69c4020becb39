"""traces.sft: a run's decisions and SuperGlasses trajectories as JSONL in TRL's conversational tool-calling shape."""

from __future__ import annotations

import json

from PIL import Image
from support import KGSearch, make_agent

from graph.agent import TurnInput
from graph.model_policy import make_model_policy
from testing.fake_model_server import FakeOpenAIServer
from tools.base import HistoryTurn
from traces.sft import SFTRecord, main
from traces.store import TraceStore
from traces.superglasses import SGHop, SGLog

F = FakeOpenAIServer



def _turn_replies(answer: str) -> list[dict]:
    return [F.tool_call_reply("image_search", {"k": 3}),
            F.tool_call_reply("teleport", {"to": "mars"}),  # refused by the registry: not a decision to learn
            F.text_reply('{"action": "answer", "rationale": "the KG says so"}'),
            F.text_reply(json.dumps({"answer": answer, "confidence": 0.9, "entity": "Falcon 9", "rationale": "KG"})),
            F.text_reply('{"verifications": [], "supported": true, "confidence": 0.9, "reason": "KG"}')]


def _check_shape(lines: list[str]) -> list[SFTRecord]:
    """Each line: {"messages": [...], "tools": [...]} as TRL documents it for tool calling."""
    records = []
    for line in lines:
        raw = json.loads(line)
        assert set(raw) == {"messages", "tools"}
        rec = SFTRecord.model_validate(raw)
        roles = [m.role for m in rec.messages]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        for i, m in enumerate(rec.messages):
            if m.role == "tool":  # answers a call of the assistant turn before it
                calls = next(x for x in reversed(rec.messages[:i]) if x.role == "assistant").tool_calls or []
                assert m.name in {c.function.name for c in calls}
            if m.role == "assistant":
                assert m.tool_calls and m.content is None and "content" not in raw["messages"][i]
        names = {t["function"]["name"] for t in raw["tools"]}
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in raw["tools"])
        assert {c.function.name for m in rec.messages for c in m.tool_calls or []} <= names
        records.append(rec)
    return records


def test_a_run_exported_for_sft(tmp_path):
    store = TraceStore(tmp_path / "runs", "r1")
    with FakeOpenAIServer() as srv:
        srv.push(*_turn_replies("SpaceX"), *_turn_replies("Hawthorne"))
        agent = make_agent(make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=0), KGSearch(),
                           budget_s=20)
        first = agent.run_turn(TurnInput(task=3, session_id="c1", interaction_id="i0", question="who makes this?",
                                         image=Image.new("RGB", (64, 48))))
        second = agent.run_turn(TurnInput(task=3, session_id="c1", interaction_id="i1", turn_index=1,
                                          question="where are they based?", image=Image.new("RGB", (64, 48)),
                                          history=[HistoryTurn(question=first.question, answer=first.answer)]))
    store.write(first.model_copy(update={"score": "correct"}))
    store.write(second.model_copy(update={"score": "incorrect"}))
    out = tmp_path / "sft.jsonl"
    assert main(["--run", str(store.dir), "--out", str(out), "--keep", "answered"]) == 0
    a, b = _check_shape(out.read_text(encoding="utf-8").splitlines())
    calls = [(c.function.name, c.function.arguments) for m in a.messages for c in m.tool_calls or []]
    assert calls == [("image_search", {"k": 3}), ("answer", {"answer": "SpaceX", "confidence": 0.9,
                                                             "entity": "Falcon 9", "rationale": "KG"})]
    assert "Falcon 9" in next(m.content for m in a.messages if m.role == "tool")
    assert "teleport" not in out.read_text(encoding="utf-8")
    assert "Q: who makes this? A: SpaceX" in b.messages[1].content and "where are they based?" in b.messages[1].content
    assert main(["--run", str(store.dir), "--out", str(out)]) == 0  # default: only the turn judged correct
    assert len(_check_shape(out.read_text(encoding="utf-8").splitlines())) == 1
    import datasets  # what SFTTrainer is given: the file loads as a dataset with both columns

    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert set(ds.column_names) == {"messages", "tools"} and ds[0]["messages"][0]["role"] == "system"


def test_an_unscored_run_needs_an_explicit_keep(tmp_path, capsys):
    store = TraceStore(tmp_path / "runs", "r2")
    with FakeOpenAIServer() as srv:
        srv.push(*_turn_replies("SpaceX"))
        agent = make_agent(make_model_policy(f"openai:{srv.base_url}#fake-vlm", max_retries=0), KGSearch(),
                           budget_s=20)
        store.write(agent.run_turn(TurnInput(task=1, session_id="s", interaction_id="i", question="who makes this?",
                                             image=Image.new("RGB", (64, 48)))))
    assert main(["--run", str(store.dir), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--keep answered" in capsys.readouterr().err


def test_superglasses_trajectories_exported_for_sft(tmp_path):
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
    (rec,) = _check_shape(out.read_text(encoding="utf-8").splitlines())
    calls = [(c.function.name, c.function.arguments) for m in rec.messages for c in m.tool_calls or []]
    assert calls == [("image_search", {}), ("web_search", {"query": "Walt Disney Concert Hall architect"}),
                     ("answer", {"answer": "Frank Gehry", "confidence": 1.0})]
    assert [m.content for m in rec.messages if m.role == "tool"] == ["Walt Disney Concert Hall", "designed by Frank Gehry"]
