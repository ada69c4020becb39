from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crag.scoring import (
    LLMJudge,
    RuleJudge,
    TokenizerTruncator,
    WhitespaceApproxTruncator,
    is_exact_match,
    is_idk,
    load_prompts,
    parse_judge_output,
    score_turn,
)

# ---------------------------------------------------------------------------- IDK / exact match


@pytest.mark.parametrize(
    "text,starter,release",
    [
        ("I don't know.", True, True),
        ("i DON'T KNOW the answer", True, True),
        ("Sorry, I don't know", True, True),
        ("I don\u2019t know", False, True),  # curly apostrophe: only the release rule catches it
        ("I do not know", False, True),
        ("I dont know", False, True),
        ("I'm not sure", False, False),
        ("Sorry, I cannot help with that.", False, False),
    ],
)
def test_idk_rules(text, starter, release):
    assert is_idk(text, "kddcup2025") is starter
    assert is_idk(text, "crag-mm-release") is release


def test_exact_match_is_strip_lower_only():
    assert is_exact_match("  Paris ", "paris")
    assert not is_exact_match("Paris.", "paris")


def test_score_turn_precedence():
    rj = RuleJudge()
    assert score_turn("q", "Paris", "paris", judge=None).result == "correct"
    s = score_turn("q", "I don't know", "paris", judge=rj)
    assert s.result == "missing" and s.judge == "idk"
    s = score_turn("q", "London", "paris", judge=None)
    assert s.result == "incorrect" and s.judge is None
    s = score_turn("q", "It is Paris.", "paris", judge=rj)
    assert s.result == "correct" and s.judge == "rule-judge (approximate)"


def test_judge_exception_is_not_correct():
    class Boom:
        name = "boom"

        def judge(self, q, g, r):
            raise RuntimeError("down")

    s = score_turn("q", "London", "Paris", judge=Boom())
    assert s.result == "incorrect" and "judge-error" in s.reason


# ---------------------------------------------------------------------------- truncation


def test_whitespace_truncation_75():
    t = WhitespaceApproxTruncator()
    text = " ".join(f"w{i}" for i in range(200))
    cut = t.truncate(text)
    assert cut.split()[-1] == "w73"  # 74 pieces + 1 reserved for BOS = 75
    assert len(cut.split()) == 74
    short = "The answer is Paris, France."
    assert t.truncate(short) == short
    assert "approx" in t.name


def test_truncation_makes_idk_invisible_after_75_tokens():
    long = " ".join(["word"] * 100) + " I don't know"
    assert score_turn("q", long, "x").result == "incorrect"
    assert score_turn("q", "I don't know " + long, "x").result == "missing"


def test_tokenizer_truncation_from_local_file(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, decoders

    vocab = {"[UNK]": 0, "<bos>": 1}
    for i in range(200):
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok.add_special_tokens(["<bos>"])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(tmp_path / "tokenizer.json"))
    tr = TokenizerTruncator(tmp_path)  # folder form
    text = " ".join(f"w{i}" for i in range(150))
    cut = tr.truncate(text)
    assert cut.split() == [f"w{i}" for i in range(74)]  # BOS takes one of the 75
    assert TokenizerTruncator(tmp_path / "tokenizer.json").truncate("w1 w2") == "w1 w2"
    s = score_turn("q", text, "w0", truncator=tr)
    assert s.truncated and s.response == cut


# ---------------------------------------------------------------------------- rule judge


@pytest.mark.parametrize(
    "gt,resp,ok",
    [
        ("The Eiffel Tower", "eiffel tower", True),  # normalised match (articles, case)
        ("Paris", "It is in Paris, France.", True),  # containment
        ("This is the Empire State Building.", "Empire State Building", True),  # lead-in stripped
        ("This is the Empire State Building.", "It's the Empire State Building.", True),  # lead-in stripped
        ("70 m", "It is 70 meters tall.", True),  # unit synonyms
        ("70 meters", "70.5 m", True),  # 1% tolerance
        ("70 m", "72 m", False),
        ("70 m", "70 ft", False),  # incompatible unit
        ("3,576,873", "about 3576873 people", True),
        ("3.5 million", "3,500,000", True),
        ("mango and strawberry", "Strawberry, mango", True),  # set match
        ("mango, strawberry, kiwi", "mango and strawberry", False),
        ("Paris", "London", False),
        ("par", "Paris", False),  # word boundary
    ],
)
def test_rule_judge(gt, resp, ok):
    v = RuleJudge().judge("q", gt, resp)
    assert v.correct is ok, v.reason


def test_rule_judge_named_approximate():
    assert "approximate" in RuleJudge().name


# ---------------------------------------------------------------------------- LLM judge


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The prediction matches.\nResult: CORRECT", True),
        ("Explanation: wrong city.\nResult: WRONG", False),
        ("CORRECT", True),
        ("Result: WRONG, although CORRECT in part", False),  # WRONG checked first
        ("I think it's fine", None),
        ("", None),
    ],
)
def test_parse_judge_output(text, expected):
    assert parse_judge_output(text) is expected


class _FakeOpenAI(BaseHTTPRequestHandler):
    script: list = []  # list of (status, content) consumed in order; last one repeats
    seen: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        status, content = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if status == 200:
            payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        else:
            payload = {"error": {"message": content}}
        self.wfile.write(json.dumps(payload).encode())

    def log_message(self, *a):
        pass


@pytest.fixture()
def fake_server():
    _FakeOpenAI.script = []
    _FakeOpenAI.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _judge(url, **kw):
    return LLMJudge(url, "fake-model", api_key="sk-test", backoff_s=0.0, timeout_s=5, **kw)


def test_llm_judge_correct_and_request_format(fake_server):
    _FakeOpenAI.script = [(200, "Explanation: grounded.\nResult: CORRECT")]
    s = score_turn(
        query="what tower is this?",
        response="The Eiffel Tower in Paris",
        ground_truth="It's the Eiffel Tower",
        judge=_judge(fake_server),
    )
    assert s.result == "correct" and s.judge == "llm-judge:fake-model"
    req = _FakeOpenAI.seen[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-test"
    body = req["body"]
    assert body["model"] == "fake-model" and body["temperature"] == 0.0 and body["max_tokens"] == 1024
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert system == load_prompts()[0]
    assert "Result: CORRECT" in system and "EXAMPLES START" in system
    assert "Question: what tower is this?\nGround Truth: It's the Eiffel Tower\nPrediction: The Eiffel Tower in Paris" in user


def test_llm_judge_wrong(fake_server):
    _FakeOpenAI.script = [(200, "Explanation: different city.\nResult: WRONG")]
    assert score_turn("q", "London", "Paris", judge=_judge(fake_server + "/v1")).result == "incorrect"
    assert _FakeOpenAI.seen[0]["path"] == "/v1/chat/completions"


def test_llm_judge_garbage_is_not_correct(fake_server):
    _FakeOpenAI.script = [(200, "hmm, hard to say")]
    s = score_turn("q", "London", "Paris", judge=_judge(fake_server))
    assert s.result == "incorrect" and s.reason == "judge-unparseable"
    assert len(_FakeOpenAI.seen) == 1  # no retry on an unparseable answer (as officially)


def test_llm_judge_500_then_ok(fake_server):
    _FakeOpenAI.script = [(500, "boom"), (200, "Result: CORRECT")]
    s = score_turn("q", "Paris!", "Paris", judge=_judge(fake_server))
    assert s.result == "correct"
    assert len(_FakeOpenAI.seen) == 2


def test_llm_judge_always_500_gives_up(fake_server):
    _FakeOpenAI.script = [(500, "down")]
    s = score_turn("q", "Paris!", "Paris", judge=_judge(fake_server))
    assert s.result == "incorrect" and s.reason.startswith("judge-error")
    assert len(_FakeOpenAI.seen) == 3


def test_llm_judge_unreachable_does_not_crash():
    s = score_turn("q", "Paris!", "Paris", judge=LLMJudge("http://127.0.0.1:9", "m", backoff_s=0.0, timeout_s=1))
    assert s.result == "incorrect" and "judge-error" in s.reason


def test_llm_judge_not_called_for_idk_or_exact(fake_server):
    _FakeOpenAI.script = [(200, "Result: CORRECT")]
    j = _judge(fake_server)
    assert score_turn("q", "I don't know", "Paris", judge=j).result == "missing"
    assert score_turn("q", "paris", "Paris", judge=j).result == "correct"
    assert _FakeOpenAI.seen == []
