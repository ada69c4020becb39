"""Per-turn scoring that follows the CRAG-MM (Meta KDD Cup 2025) `local_evaluation.py`.

Order of operations, as in the official evaluator:

1. the agent response is truncated to 75 tokens (``MAX_RESPONSE_LENGTH_IN_TOKENS``); the official kit
   encodes with the ``meta-llama/Llama-3.2-1B-Instruct`` tokenizer (``tokenizers`` library, truncation
   enabled at 75, special tokens included, so BOS uses one of the 75) and decodes the kept ids;
2. "I don't know" detection on the (truncated) response -> ``missing``;
3. exact match: ``response.strip().lower() == ground_truth.strip().lower()`` -> ``correct``;
4. otherwise a judge decides correct / incorrect.  An unparseable verdict or a failed call counts as
   not correct (i.e. ``incorrect``: it is neither correct nor a miss), exactly as the official code
   ends up counting it, and the reason is kept.

Judges:
* :class:`LLMJudge` -- any OpenAI-compatible ``/v1/chat/completions`` endpoint, with the official judge
  prompt (``prompts/judge_system.txt`` + ``prompts/judge_user.txt``) and the official
  ``Result: CORRECT`` / ``Result: WRONG`` parsing.
* :class:`RuleJudge` -- offline, **approximate** ("rule-judge (approximate)"): normalised match,
  containment, number tolerance and set match.  It is not the official metric.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import httpx
from pydantic import BaseModel
from tenacity import (
    RetryError,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    Retrying,
)

log = logging.getLogger(__name__)

MAX_RESPONSE_LENGTH_IN_TOKENS = 75
MAX_EVAL_TOKENS = 1024
MAX_API_RETRIES = 3
PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"

TurnResult = Literal["correct", "missing", "incorrect"]


# --------------------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------------------


class Truncator(Protocol):
    name: str

    def truncate(self, text: str) -> str: ...


class TokenizerTruncator:
    """Truncate with a real tokenizer loaded from a LOCAL path, the way the official kit does.

    ``path`` may be a ``tokenizer.json`` file or a folder holding one (e.g. a local copy of
    ``meta-llama/Llama-3.2-1B-Instruct``, the tokenizer the official evaluator uses).  The text is
    encoded with special tokens (BOS counts toward the limit, as in the official code), truncated to
    ``max_tokens`` ids and decoded with special tokens skipped.
    """

    def __init__(self, path: str | Path, max_tokens: int = MAX_RESPONSE_LENGTH_IN_TOKENS):
        from tokenizers import Tokenizer

        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        self.tokenizer = Tokenizer.from_file(str(file))
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self.max_tokens = max_tokens
        self.name = f"tokenizer:{p.name}({max_tokens})"

    def truncate(self, text: str) -> str:
        enc = self.tokenizer.encode(text)
        return self.tokenizer.decode(enc.ids)


_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


class WhitespaceApproxTruncator:
    """APPROXIMATION of the 75-token limit when no tokenizer is available locally.

    Counts "pieces" -- runs of word characters and single punctuation marks, split at whitespace --
    and keeps the first ``max_tokens - 1`` of them (one slot is reserved for the BOS token the
    official Llama tokenizer adds).  The kept prefix of the ORIGINAL text is returned (no
    re-spacing).  Real sub-word tokenizers produce more tokens for rare/long words and numbers, so
    this keeps somewhat more text than the official truncation would.
    """

    name = "whitespace-approx(75)"

    def __init__(self, max_tokens: int = MAX_RESPONSE_LENGTH_IN_TOKENS, reserve_bos: bool = True):
        self.budget = max_tokens - (1 if reserve_bos else 0)
        self.name = f"whitespace-approx({max_tokens})"

    def truncate(self, text: str) -> str:
        pieces = list(_PIECE.finditer(text))
        if len(pieces) <= self.budget:
            return text
        if self.budget <= 0:
            return ""
        return text[: pieces[self.budget - 1].end()]


def make_truncator(tokenizer_path: str | Path | None = None) -> Truncator:
    """A :class:`TokenizerTruncator` when a local tokenizer path is given, else the approximation."""
    if tokenizer_path:
        return TokenizerTruncator(tokenizer_path)
    return WhitespaceApproxTruncator()


# --------------------------------------------------------------------------------------------------
# "I don't know" detection and exact match
# --------------------------------------------------------------------------------------------------

IdkRule = Literal["kddcup2025", "crag-mm-release"]


def clean_text(text: str) -> str:
    """Lowercase and drop every character that is not a-z, 0-9 or whitespace (CRAG-MM release)."""
    return re.sub(r"[^a-z0-9\s]", "", text.lower())


def is_idk(response: str, rule: IdkRule = "kddcup2025") -> bool:
    """Official miss detection.

    * ``kddcup2025`` (KDD Cup 2025 starter kit ``local_evaluation.py``): the substring
      ``"i don't know"`` (ASCII apostrophe) in ``response.lower()``.  "I don’t know" with a curly
      apostrophe or "I do not know" are NOT misses under this rule.
    * ``crag-mm-release`` (facebookresearch/CRAG-MM ``evaluation/evaluator.py``): the response is
      lower-cased and stripped of non-alphanumerics, then ``"i dont know"`` or ``"i do not know"``
      must occur in it.
    """
    if rule == "kddcup2025":
        return "i don't know" in response.lower()
    cleaned = clean_text(response)
    return "i dont know" in cleaned or "i do not know" in cleaned


def is_exact_match(response: str, ground_truth: str) -> bool:
    return response.strip().lower() == ground_truth.strip().lower()


# --------------------------------------------------------------------------------------------------
# Judges
# --------------------------------------------------------------------------------------------------


class JudgeVerdict(BaseModel):
    correct: bool | None  # None: the judge gave no usable verdict (counted as not correct)
    reason: str = ""
    raw: str | None = None


@runtime_checkable
class Judge(Protocol):
    name: str

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict: ...


def parse_judge_output(text: str) -> bool | None:
    """Official parsing: WRONG is checked first (the whole text for "Result: WRONG", or "WRONG" in the
    last line), then CORRECT the same way; anything else is None."""
    last = text.split("\n")[-1]
    if "Result: WRONG" in text or "WRONG" in last:
        return False
    if "Result: CORRECT" in text or "CORRECT" in last:
        return True
    return None


def load_prompts(system_path: str | Path | None = None, user_path: str | Path | None = None) -> tuple[str, str]:
    system = Path(system_path or PROMPTS_DIR / "judge_system.txt").read_text(encoding="utf-8")
    user = Path(user_path or PROMPTS_DIR / "judge_user.txt").read_text(encoding="utf-8")
    return system, user


def render_user_prompt(template: str, query: str, ground_truth: str, prediction: str) -> str:
    # str.replace, not str.format: questions and answers may contain braces.
    return (
        template.replace("{query}", query)
        .replace("{ground_truth}", ground_truth)
        .replace("{prediction}", prediction)
    )


class _RetryableHTTP(Exception):
    pass


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (_RetryableHTTP, httpx.TransportError, httpx.TimeoutException))


class LLMJudge:
    """LLM-as-a-judge over any OpenAI-compatible chat-completions endpoint (plain httpx, no SDK).

    ``base_url`` is e.g. ``http://127.0.0.1:8000`` or ``https://api.openai.com/v1``; ``/v1`` is added
    when missing.  Like the official judge: temperature 0, max_tokens 1024, 3 attempts with
    exponential back-off on transport errors, timeouts, 429 and 5xx.  Other 4xx are not retried.
    A failure after all attempts or an unparseable answer yields ``correct=None`` with the reason.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_attempts: int = MAX_API_RETRIES,
        backoff_s: float = 1.0,
        max_tokens: int = MAX_EVAL_TOKENS,
        system_prompt_path: str | Path | None = None,
        user_prompt_path: str | Path | None = None,
        client: httpx.Client | None = None,
    ):
        base = base_url.rstrip("/")
        self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model = model
        self.api_key = api_key
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens
        self.system_prompt, self.user_template = load_prompts(system_prompt_path, user_prompt_path)
        self._client = client or httpx.Client(timeout=timeout_s)
        self.name = f"llm-judge:{model}"

    def messages(self, query: str, ground_truth: str, response: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": render_user_prompt(self.user_template, query, ground_truth, response)},
        ]

    def _post(self, payload: dict) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        r = self._client.post(self.url, json=payload, headers=headers)
        if r.status_code == 429 or r.status_code >= 500:
            raise _RetryableHTTP(f"HTTP {r.status_code}: {r.text[:200]}")
        r.raise_for_status()
        data = r.json()
        return data["choices"][0]["message"]["content"] or ""

    def judge(self, query: str, ground_truth: str, response: str) -> JudgeVerdict:
        payload = {
            "model": self.model,
            "messages": self.messages(query, ground_truth, response),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        try:
            retrying = Retrying(
                stop=stop_after_attempt(self.max_attempts),
                wait=wait_exponential(multiplier=self.backoff_s, min=0, max=30),
                retry=retry_if_exception(_is_retryable),
                reraise=True,
            )
            content = retrying(self._post, payload)
        except (RetryError, Exception) as exc:  # never crash a run on the judge
            reason = f"judge-error: {type(exc).__name__}: {exc}"
            log.warning("LLM judge failed, counting as not correct: %s", reason)
            return JudgeVerdict(correct=None, reason=reason)
        verdict = parse_judge_output(content)
        if verdict is None:
            log.warning("LLM judge answer unparseable, counting as not correct: %r", content[:200])
            return JudgeVerdict(correct=None, reason="judge-unparseable", raw=content)
        return JudgeVerdict(correct=verdict, reason="Result: CORRECT" if verdict else "Result: WRONG", raw=content)


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
    result: TurnResult
    response: str  # the truncated response that was scored
    truncated: bool
    is_exact_match: bool
    is_miss: bool
    judge: str | None = None  # judge name when a judge decided, "exact-match"/"idk" otherwise
    reason: str = ""


def score_turn(
    query: str,
    response: str,
    ground_truth: str,
    judge: Judge | None = None,
    truncator: Truncator | None = None,
    idk_rule: IdkRule = "kddcup2025",
) -> TurnScore:
    """Score one turn: truncate -> exact match -> IDK -> judge (official order of precedence).

    Without a judge, a non-exact, non-IDK response is ``incorrect`` (the official behaviour when
    semantic evaluation is disabled)."""
    truncator = truncator or WhitespaceApproxTruncator()
    response = response or ""
    cut = truncator.truncate(response)
    truncated = cut != response
    exact = is_exact_match(cut, ground_truth)
    miss = is_idk(cut, idk_rule)
    if exact:
        return TurnScore(result="correct", response=cut, truncated=truncated, is_exact_match=True,
                         is_miss=miss, judge="exact-match", reason="exact match")
    if miss:
        return TurnScore(result="missing", response=cut, truncated=truncated, is_exact_match=False,
                         is_miss=True, judge="idk", reason=f"i don't know ({idk_rule})")
    if judge is None:
        return TurnScore(result="incorrect", response=cut, truncated=truncated, is_exact_match=False,
                         is_miss=False, judge=None, reason="no judge: not an exact match")
    try:
        verdict = judge.judge(query, ground_truth, cut)
    except Exception as exc:  # a judge must never crash the run
        log.warning("judge %s raised, counting as not correct: %s", getattr(judge, "name", judge), exc)
        verdict = JudgeVerdict(correct=None, reason=f"judge-error: {type(exc).__name__}: {exc}")
    return TurnScore(
        result="correct" if verdict.correct else "incorrect",
        response=cut,
        truncated=truncated,
        is_exact_match=False,
        is_miss=False,
        judge=getattr(judge, "name", type(judge).__name__),
        reason=verdict.reason,
    )
