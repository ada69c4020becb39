"""A GGUF file as a transformers folder: dequantised once by transformers (packages `gguf` and `accelerate`) and
kept under the cache folder (`$GLASSES_GGUF_CACHE`, else ~/.cache/glasses-rag/gguf), keyed by the file's SHA-256
and the conversion's version, so later loads take a second instead of minutes. Gemma's tokenizer is rebuilt from
the GGUF's own vocabulary on the way (`repair_gemma_tokenizer`).

Example:
    >>> folder = converted_gguf("~/models/gemma-3-270m-q4_k_m.gguf")  # doctest: +SKIP
    >>> AutoModelForCausalLM.from_pretrained(folder)                  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GGUF_CACHE = Path("~/.cache/glasses-rag/gguf")
CONVERSION = "v2"  # part of the cache key: bump when the conversion changes (v2: Gemma tokenizer repaired)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def converted_gguf(path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A GGUF file as a transformers folder (bf16 safetensors + tokenizer), converted once and cached under
    `cache_dir/<sha256 of the file, 16 hex>/`; later calls return the cached folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = Path(path).expanduser().resolve()
    if not src.is_file():
        raise FileNotFoundError(f"GGUF file not found: {src}")
    cache = Path(cache_dir or os.environ.get("GLASSES_GGUF_CACHE") or GGUF_CACHE).expanduser()
    digest = file_sha256(src)
    out = cache / f"{digest[:16]}-{CONVERSION}"
    if (out / "config.json").is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{out.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    log.warning("converting %s to a transformers model once (cached in %s)", src.name, out)
    try:
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.bfloat16)
    except ImportError as e:
        raise ImportError(f"loading a GGUF file with transformers needs the gguf and accelerate packages: {e}") from e
    if model.config.model_type.startswith("gemma"):
        repair_gemma_tokenizer(tok, src)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "SOURCE.txt").write_text(f"converted from {src} (sha256 {digest}, conversion {CONVERSION})\n")
    try:
        os.rename(tmp, out)  # atomic: a concurrent conversion of the same file keeps the first one
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def repair_gemma_tokenizer(tok: Any, gguf_path: Path) -> None:
    """Rebuild a Gemma tokenizer that transformers converted from GGUF the way sentencepiece tokenizes.

    transformers (4.5x) makes it a Unigram model over what is a BPE vocabulary (the scores are merge ranks), so
    text is cut into odd pieces ("▁a re ▁t he"); it registers none of the control tokens, so `<start_of_turn>` in a
    chat template is not one token; and it renames the byte token <0x09> to a second "\t". Here, from the GGUF's
    own vocabulary: BPE with merges ordered by the scores (as transformers' sentencepiece converter does), byte
    fallback, and the control and user-defined tokens added as such."""
    from gguf import GGUFReader
    from tokenizers import AddedToken
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import generate_merges

    fields = GGUFReader(gguf_path).fields
    pieces = fields["tokenizer.ggml.tokens"].contents()
    scores = fields["tokenizer.ggml.scores"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()  # 3: control, 4: user-defined, 6: byte
    pieces = [
        "▁" * len(p) if p and not p.strip(" ") else p for p in pieces
    ]  # runs of spaces, as the normalizer sees them
    vocab: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        vocab.setdefault(piece, i)
    backend = tok.backend_tokenizer
    backend.model = BPE(
        vocab,
        generate_merges(vocab, list(zip(pieces, scores))),
        unk_token=tok.unk_token or "<unk>",
        fuse_unk=True,
        byte_fallback=True,
    )
    backend.add_special_tokens([AddedToken(p, normalized=False, special=True) for p, t in zip(pieces, types) if t == 3])
    backend.add_tokens([AddedToken(p, normalized=False, special=False) for p, t in zip(pieces, types) if t == 4])


__all__ = ["CONVERSION", "GGUF_CACHE", "converted_gguf", "file_sha256", "repair_gemma_tokenizer"]
