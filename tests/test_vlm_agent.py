"""The whole graph driven by a VLM policy over HTTP (local fake OpenAI-compatible server), real tools."""

from PIL import Image
from support import KGSearch, make_agent

from glasses_rag.policies.model.policy import make_model_policy
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from graph.agent import TurnInput


def test_vlm_policy_drives_tools_and_self_check_through_the_graph():
    with FakeOpenAIServer() as srv:
        srv.push(
            FakeOpenAIServer.tool_call_reply("image_search", {"k": 3}),
            FakeOpenAIServer.tool_call_reply("teleport", {"to": "mars"}),
            FakeOpenAIServer.text_reply('Sure! ```json\n{"action": "answer", "rationale": "the KG says so",}\n```'),
            FakeOpenAIServer.text_reply('{"answer": "SpaceX", "confidence": 0.9, "entity": "Falcon 9"}'),
            # self-check (default: one chain-of-verification round trip)
            FakeOpenAIServer.text_reply(
                '{"verifications": [{"question": "Who makes Falcon 9?", "answer": "SpaceX", '
                '"supported": true}], "supported": true, "confidence": 0.9, "reason": "KG"}'
            ),
        )
        policy = make_model_policy(f"openai:{srv.base_url}#fake-vlm")
        agent = make_agent(policy, KGSearch(), budget_s=20)
        tr = agent.run_turn(
            TurnInput(
                task=1,
                session_id="s",
                interaction_id="i",
                question="who makes this rocket?",
                image=Image.new("RGB", (64, 48), (200, 30, 30)),
            )
        )
        sent = list(srv.requests)
    acts = tr.tool_calls()
    assert [s.tool for s in acts] == ["image_search", "teleport"]
    assert acts[0].results[0].entity_name == "Falcon 9"
    assert acts[1].error.kind == "unknown_tool"
    check = next(s for s in tr.steps if s.node == "verdict")
    assert check.verdict.method == "vlm-cove" and check.verdict.supported and check.decision == "keep"
    # every model call of the turn is in the trace, with its purpose and raw reply
    purposes = [c.purpose for c in tr.model_calls()]
    assert purposes == ["decide"] * 3 + ["answer", "cove"]
    assert tr.tokens.calls == len(purposes)
    assert tr.answer == "SpaceX" and tr.entity == "Falcon 9"
    assert tr.policy.startswith("vlm") or "fake-vlm" in tr.policy
    # the image went to the model as a data URL, and the decision was constrained to the allowed tools' schema
    first = sent[0]
    assert any(
        part.get("type") == "image_url" and part["image_url"]["url"].startswith("data:image/")
        for m in first["messages"]
        if isinstance(m.get("content"), list)
        for part in m["content"]
    )
    options = first["response_format"]["json_schema"]["schema"]["anyOf"]
    offered = {o["properties"]["tool"]["const"] for o in options if "tool" in o["properties"]}
    assert offered >= {"image_search", "ocr"} and "self_check" not in offered  # self-check is not a plannable tool
    assert "web_search" not in offered  # task 1 allow-list
    assert {c.mode for c in tr.model_calls()} == {"structured"}
