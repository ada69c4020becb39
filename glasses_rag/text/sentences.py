"""Sentences (pysbd, a maintained rule-based segmenter) and clauses."""

from __future__ import annotations

import re
from functools import lru_cache

_CHAT_TAG = re.compile(r"(\[/?INST\]|<\|?/?\s*(?:system|assistant|user|im_start|im_end|endoftext)\s*\|?>)", re.I)


@lru_cache(maxsize=4096)
def _segment(text: str) -> tuple[str, ...]:
    import pysbd  # abbreviations (St., Dr., U.S.), decimals, initials

    out: list[str] = []
    for block in re.split(r"\s*\n+\s*", _CHAT_TAG.sub(r"\n\1\n", text)):  # a chat-template tag ends a sentence
        if block.strip():
            # a Segmenter keeps per-call state: one per call keeps concurrent turns apart (it is cheap to build)
            for s in pysbd.Segmenter(language="en", clean=False).segment(block):
                s = s.strip()
                if out and re.fullmatch(r"[A-Za-z]{1,4}\.", out[-1]) and out[-1] in block:
                    out[-1] = f"{out[-1]} {s}"  # "Est. 1921", "Vol. 3": an abbreviation pysbd does not know
                elif s:
                    out.append(s)
    return tuple(out)


def sentences(text: str, min_chars: int = 4) -> list[str]:
    """Sentences of a text (pysbd), also split at line breaks (OCR lines, lists)."""
    t = " ".join((text or "").split(" "))
    return [s for s in _segment(t[:20000]) if len(s) >= min_chars]


def clauses(sentence: str) -> list[str]:
    """A sentence cut at clause boundaries (", and", ";", ", which", dashes), for short answers."""
    parts = re.split(r"\s*(?:;|\s[–—]\s|,\s+(?=(?:and|but|while|which|whereas|so)\b))\s*", sentence)
    return [p.strip(" ,.;") for p in parts if len(p.strip(" ,.;")) > 2]
