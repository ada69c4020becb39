"""Years, dates, times, weekdays and frequencies in text (rule-based patterns)."""

from __future__ import annotations

import re

from glasses_rag.text.units import DEFAULT

YEAR = re.compile(
    r"(?<![\d,.$])\b(?:(?:AD|A\.D\.|BC|BCE|CE)\s*\d{1,4}|\d{1,4}\s*(?:AD|A\.D\.|BC|BCE|CE)\b|1[0-9]{3}|20[0-9]{2})"
    r"(?![\d,]\d|\.\d|\s*(?:" + DEFAULT.year_exclusion + r")\b)",
    re.I,
)
_MONTHS = (
    "january february march april (?-i:May) june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
).split()  # "may" is a month only when capitalised
MONTH_ALT = "|".join(_MONTHS[:12]) + r"|(?:" + "|".join(_MONTHS[12:]) + r")\.?"
MONTH = re.compile(r"\b(?:" + MONTH_ALT + r")(?!\w)", re.I)
WEEKDAY = re.compile(r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b", re.I)
SEASON = re.compile(
    r"\b(spring|summer|autumn|fall|winter|century|decade|ago|frost|dawn|dusk|sunrise|sunset|"
    r"morning|evening|night|noon|midnight)\b",
    re.I,
)
TIME = re.compile(
    r"\b\d{1,2}(?::\d{2})?\s*(?:a\.?m\.?|p\.?m\.?)(?!\w)|\b\d{1,2}:\d{2}\b|\bnoon\b|\bmidnight\b|\b\d{1,2} o'clock\b",
    re.I,
)
TEMPORAL = re.compile(
    r"\b(after|before|during|until|since|between|every|each|daily|weekly|monthly|yearly|annually|"
    r"hourly|once|twice)\b",
    re.I,
)
FREQUENCY = re.compile(
    r"\bevery\b|\b(daily|weekly|monthly|yearly|annually|hourly|nightly)\b|\b(once|twice|\w+ times)\s+"
    r"(?:a|an|per|each)\b",
    re.I,
)
# a calendar date to the day: "July 20, 1969", "20 July 1969", "2021-07-20", "20/07/2021"
FULL_DATE = re.compile(
    r"\b(?:"
    + MONTH_ALT
    + r")\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{3,4}|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:"
    + MONTH_ALT
    + r")\s+\d{3,4}",
    re.I,
)
DAY_OF_MONTH = re.compile(
    r"\b(?:"
    + MONTH_ALT
    + r")\s+\d{1,2}(?:st|nd|rd|th)?\b|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:"
    + MONTH_ALT
    + r")\b|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b",
    re.I,
)
