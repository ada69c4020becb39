"""The rule judge (approximate): an offline stand-in for the LLM judge, NOT the official metric."""

from __future__ import annotations

import re
import unicodedata

from glasses_rag.crag_mm.scoring.verdict import JudgeVerdict
from glasses_rag.text.units import Quantity

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_LEADINS = (
    "the answer is ",
    "answer is ",
    "it is ",
    "its ",
    "it s ",
    "this is ",
    "that is ",
    "they are ",
    "these are ",
    "those are ",
    "there are ",
    "there is ",
    "it was ",
    "this was ",
    "he is ",
    "she is ",
)
_UNITS = {
    "m": "m",
    "meter": "m",
    "meters": "m",
    "metre": "m",
    "metres": "m",
    "km": "km",
    "kilometer": "km",
    "kilometers": "km",
    "kilometre": "km",
    "kilometres": "km",
    "cm": "cm",
    "centimeter": "cm",
    "centimeters": "cm",
    "centimetre": "cm",
    "centimetres": "cm",
    "mm": "mm",
    "millimeter": "mm",
    "millimeters": "mm",
    "ft": "ft",
    "foot": "ft",
    "feet": "ft",
    "in": "in",
    "inch": "in",
    "inches": "in",
    "mi": "mi",
    "mile": "mi",
    "miles": "mi",
    "yd": "yd",
    "yard": "yd",
    "yards": "yd",
    "kg": "kg",
    "kilogram": "kg",
    "kilograms": "kg",
    "g": "g",
    "gram": "g",
    "grams": "g",
    "lb": "lb",
    "lbs": "lb",
    "pound": "lb",
    "pounds": "lb",
    "oz": "oz",
    "ounce": "oz",
    "ounces": "oz",
    "l": "l",
    "liter": "l",
    "liters": "l",
    "litre": "l",
    "litres": "l",
    "ml": "ml",
    "milliliter": "ml",
    "milliliters": "ml",
    "gallon": "gal",
    "gallons": "gal",
    "gal": "gal",
    "%": "%",
    "percent": "%",
    "percentage": "%",
    "s": "s",
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "min": "min",
    "minute": "min",
    "minutes": "min",
    "h": "h",
    "hr": "h",
    "hour": "h",
    "hours": "h",
    "day": "day",
    "days": "day",
    "year": "year",
    "years": "year",
    "yr": "year",
    "yrs": "year",
    "mph": "mph",
    "kmh": "kmh",
    "kph": "kmh",
    "cal": "kcal",
    "kcal": "kcal",
    "calorie": "kcal",
    "calories": "kcal",
    "usd": "usd",
    "$": "usd",
    "dollar": "usd",
    "dollars": "usd",
    "c": "c",
    "celsius": "c",
    "f": "f",
    "fahrenheit": "f",
}
_SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "bn": 1e9, "trillion": 1e12}
_NUM = re.compile(
    r"(?P<cur>\$)?\s*(?P<num>-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+)\s*(?P<scale>thousand|million|billion|trillion|bn)?"
    r"\s*(?P<unit>%|[a-z]+)?",
    re.IGNORECASE,
)
_STOP = {
    "is",
    "are",
    "was",
    "were",
    "about",
    "around",
    "approximately",
    "roughly",
    "nearly",
    "almost",
    "of",
    "it",
    "its",
    "this",
    "that",
    "there",
    "tall",
    "high",
    "long",
    "wide",
    "deep",
    "old",
    "has",
    "have",
    "with",
    "to",
    "in",
    "on",
    "at",
    "for",
    "be",
    "by",
    "total",
    "estimated",
    "some",
    "over",
    "under",
}


def normalize_answer(text: str) -> str:
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
            return t[len(lead) :]
    return t


def _contains(haystack: str, needle: str) -> bool:
    if not needle:
        return False
    return re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", haystack) is not None


def extract_quantities(text: str) -> list[Quantity]:
    """The numbers in `text` with the unit after each, in this judge's own small unit table (no conversion; only
    `value` and `unit` are compared). Spans are in the NFKD, lower-cased text; no dimension is set."""
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
        out.append(Quantity(value, unit, None, m.start(), m.end(), m.group(0)))
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
    items = [normalize_answer(x) for x in _LIST_SPLIT.split(text)]
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
        gt = normalize_answer(ground_truth)
        resp = normalize_answer(response)
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
            if (
                gq
                and rq
                and all(
                    any(
                        _numbers_close(g.value, r.value, self.rel_tol)
                        and (g.unit is None or r.unit is None or g.unit == r.unit)
                        for r in rq
                    )
                    for g in gq
                )
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
