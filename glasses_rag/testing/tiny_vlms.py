"""Tiny vision-language models of three real architectures, built in-process from their configuration classes and
saved with a processor of the model's own class, the model's special tokens and its own chat template
(glasses_rag/testing/real_chat_templates.py); only the sizes are tiny and the vocabulary byte-level (no hub access).

    folder = save_tiny_vlm("qwen2_5_vl", tmp_path / "qwen")      # or "gemma3", "mllama"

- qwen2_5_vl (Qwen2.5-VL): the Qwen2-VL image processor (dynamic resolution: 14-px patches merged 2 x 2, here at
  most 56 x 56 pixels, so 4 image tokens), Qwen's ChatML tokens; its processor's video half is a
  `BaseVideoProcessor` (the Qwen2-VL video processor needs torchvision, which this environment cannot load: the agent
  sends photos, never videos).
- gemma3 (Gemma 3, image-text-to-text): SigLIP tower on 28-px images, 4 soft tokens per image between
  `<start_of_image>` and `<end_of_image>`, Gemma's turn markers.
- mllama (Llama 3.2 Vision): one 28-px tile, cross-attention layers, Llama 3's header tokens and `<|image|>`.

Special tokens and their roles are those of the real tokenizer_config.json / generation_config.json of
Qwen/Qwen2.5-VL-7B-Instruct, google/gemma-3-4b-it and meta-llama/Llama-3.2-11B-Vision-Instruct.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glasses_rag.testing.real_chat_templates import GEMMA3, LLAMA3_2_VISION, QWEN2_5_VL
from glasses_rag.testing.tiny_models import byte_level

QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
GEMMA_SPECIALS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]
LLAMA_SPECIALS = [
    "<|finetune_right_pad_id|>",
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
]


def qwen_tokenizer() -> Any:
    from transformers import Qwen2TokenizerFast

    return Qwen2TokenizerFast(
        tokenizer_object=byte_level(QWEN_SPECIALS),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=QWEN_SPECIALS[1:],
    )


def gemma_vlm_tokenizer() -> Any:
    from transformers import GemmaTokenizerFast

    return GemmaTokenizerFast(
        tokenizer_object=byte_level(GEMMA_SPECIALS),
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=GEMMA_SPECIALS[4:],
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
        add_bos_token=True,
        add_eos_token=False,
    )


def llama_vision_tokenizer() -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=byte_level(LLAMA_SPECIALS),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
        additional_special_tokens=LLAMA_SPECIALS[3:],
    )


def _ids(tok: Any, *names: str) -> list[int]:
    return [int(tok.convert_tokens_to_ids(n)) for n in names]


def _qwen(tok: Any) -> tuple[Any, Any, Any]:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )

    from glasses_rag.models.vlm.vision_inputs import photos_only_processor

    image, video, start, end = _ids(tok, "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    text: dict[str, Any] = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    text.update(num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32768)
    text.update(rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, tie_word_embeddings=True)
    vision: dict[str, Any] = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32)
    vision.update(window_size=28, fullatt_block_indexes=[1])
    cfg = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=image,
        video_token_id=video,
        vision_start_token_id=start,
        vision_end_token_id=end,
        **_token_roles(tok),
    )
    images = Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=56 * 56)
    processor = photos_only_processor(Qwen2_5_VLProcessor, images, tok, QWEN2_5_VL)
    return Qwen2_5_VLForConditionalGeneration(cfg), processor, _ids(tok, "<|im_end|>", "<|endoftext|>")


def _gemma(tok: Any) -> tuple[Any, Any, Any]:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    boi, eoi, image = _ids(tok, "<start_of_image>", "<end_of_image>", "<image_soft_token>")
    text: dict[str, Any] = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    text.update(num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=16)
    text.update(layer_types=["sliding_attention", "full_attention"], max_position_embeddings=32768)
    vision: dict[str, Any] = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    vision.update(image_size=28, patch_size=14, vision_use_head=False)
    cfg = Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=4,
        boi_token_index=boi,
        eoi_token_index=eoi,
        image_token_index=image,
        **_token_roles(tok),
    )
    images = Gemma3ImageProcessor(size={"height": 28, "width": 28})
    processor = Gemma3Processor(images, tok, chat_template=GEMMA3, image_seq_length=4)
    return Gemma3ForConditionalGeneration(cfg), processor, _ids(tok, "<eos>", "<end_of_turn>")


def _mllama(tok: Any) -> tuple[Any, Any, Any]:
    from transformers import MllamaConfig, MllamaForConditionalGeneration, MllamaImageProcessor, MllamaProcessor

    (image,) = _ids(tok, "<|image|>")
    text: dict[str, Any] = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2)
    text.update(num_attention_heads=2, num_key_value_heads=1, cross_attention_layers=[1])
    text.update(max_position_embeddings=131072, rope_scaling=LLAMA3_ROPE, **_token_roles(tok))
    vision: dict[str, Any] = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1)
    vision.update(num_attention_heads=2, vision_output_dim=64, intermediate_layers_indices=[0])
    vision.update(image_size=28, patch_size=14, max_num_tiles=1, supported_aspect_ratios=[[1, 1]])
    cfg = MllamaConfig(text_config=text, vision_config=vision, image_token_index=image)
    images = MllamaImageProcessor(size={"height": 28, "width": 28}, max_image_tiles=1)
    processor = MllamaProcessor(images, tok, chat_template=LLAMA3_2_VISION)
    return MllamaForConditionalGeneration(cfg), processor, _ids(tok, "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")


# Llama 3.2's rope scaling (config.json of meta-llama/Llama-3.2-11B-Vision-Instruct, text_config)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _token_roles(tok: Any) -> dict[str, Any]:
    return {"pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}


# Qwen2VLVideoProcessor's settings, at the tiny image processor's pixel bounds (what save_pretrained writes for it)
QWEN_VIDEO_CONFIG = {
    "video_processor_type": "Qwen2VLVideoProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "do_sample_frames": False,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "max_pixels": 56 * 56,
    "min_pixels": 28 * 28,
    "size": {"longest_edge": 56 * 56, "shortest_edge": 28 * 28},
    "merge_size": 2,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
}

BUILDERS: dict[str, tuple[Callable[[], Any], Callable[[Any], tuple[Any, Any, Any]]]] = {
    "qwen2_5_vl": (qwen_tokenizer, _qwen),
    "gemma3": (gemma_vlm_tokenizer, _gemma),
    "mllama": (llama_vision_tokenizer, _mllama),
}


def save_tiny_vlm(kind: str, folder: str | Path, seed: int = 0) -> Path:
    """A tiny random `kind` model (qwen2_5_vl, gemma3, mllama) with its processor, chat template and generation
    config (the stop tokens the real instruct model has), saved to `folder`."""
    import torch
    from transformers import GenerationConfig

    make_tokenizer, build = BUILDERS[kind]
    tok = make_tokenizer()
    torch.manual_seed(seed)
    model, processor, stops = build(tok)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=stops, pad_token_id=tok.pad_token_id
    )
    out = Path(folder)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    if kind == "qwen2_5_vl":  # the video half the real folder has (loads where torchvision does)
        (out / "video_preprocessor_config.json").write_text(json.dumps(QWEN_VIDEO_CONFIG, indent=2) + "\n")
    return out


__all__ = ["BUILDERS", "byte_level", "save_tiny_vlm"]
