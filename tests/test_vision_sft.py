"""The training road on three real vision-language architectures (Qwen2.5-VL, Gemma 3, Llama 3.2 Vision), tiny and
random, each with its own processor class, special tokens and chat template (glasses_rag/testing/tiny_vlms.py):
export with photos (the first example without one) -> fine-tune with the processor and the model's own template ->
the adapter merged in-process -> the agent's decisions with the photo in the request, every one of which parses."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from support import KGSearch, make_agent
from test_training_export import _run

from glasses_rag.core.types import ImageInfo
from graph.agent import TurnInput
from traces.model_loop import LoopStats

pytest.importorskip("trl")
pytest.importorskip("peft")

KINDS = ["qwen2_5_vl", "gemma3", "mllama"]
VISION_PARTS = ("visual", "vision_tower", "vision_model", "multi_modal_projector")


def _photo(seed: int = 0) -> Image.Image:
    """A 1600 x 1200 photo of noise: larger than the 1,024 px the model is sent, so the resize shows."""
    import numpy as np

    rng = np.random.RandomState(seed)
    return Image.fromarray((rng.rand(1200, 1600, 3) * 255).astype("uint8"))


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """An export of two turns: s0 without a photo (so the first examples have none), s1 with one."""
    from glasses_rag.training.export import main

    tmp = tmp_path_factory.mktemp("vision-export")
    run, _ = _run(tmp, ["SpaceX", "SpaceX"], ["correct", "correct"])
    photos = tmp / "photos"
    photos.mkdir()
    _photo().save(photos / "s1.jpg", quality=95)
    out = tmp / "sft.jsonl"
    assert main(["--run", str(run), "--out", str(out), "--images", "--image-dir", str(photos)]) == 0
    return out


def test_the_export_keeps_the_photo_as_the_model_is_sent_it(export):
    """The example's image file holds the bytes of the request's data URL: the photo at the policy's 1,024 px, JPEG
    quality 90 (glasses_rag.models.vlm.vision_inputs.model_photo), not the original file."""
    import base64

    from glasses_rag.models.vlm.base import image_to_data_url

    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert not rows[0].get("images") and rows[-1]["images"]
    path = rows[-1]["images"][0]
    assert path.startswith(str(export.parent / "sft.images"))
    with Image.open(export.parent / "photos" / "s1.jpg") as original:
        sent = image_to_data_url(original.convert("RGB"), 1024)
    assert open(path, "rb").read() == base64.b64decode(sent.split(",", 1)[1])
    assert Image.open(path).size == (1024, 768)


def test_training_sees_the_pixels_inference_decodes(export, tmp_path):
    """The image TRL trains on and the one the in-process backend hands its processor are the same array."""
    import numpy as np

    from glasses_rag.models.vlm.base import data_url_to_image, image_to_data_url
    from glasses_rag.models.vlm.vision_inputs import load_processor
    from glasses_rag.testing.tiny_vlms import save_tiny_vlm
    from glasses_rag.training.sft_data import load_examples

    ds, _ = load_examples(export, 100_000, load_processor(save_tiny_vlm("gemma3", tmp_path / "m")), vision=True)
    trained = next(ex["images"][0] for ex in ds if ex["images"])
    with Image.open(export.parent / "photos" / "s1.jpg") as original:
        inferred = data_url_to_image(image_to_data_url(original.convert("RGB"), 1024))
    assert np.array_equal(np.asarray(trained.convert("RGB")), np.asarray(inferred))


@pytest.mark.parametrize("kind", KINDS)
def test_a_tiny_vlm_trains_on_photos_and_decides_with_the_photo(kind, export, tmp_path):
    from safetensors import safe_open

    from glasses_rag.models.vlm import ModelConfig
    from glasses_rag.policies.model.policy import make_model_policy
    from glasses_rag.testing.tiny_vlms import save_tiny_vlm
    from glasses_rag.training.finetune import FinetuneConfig, finetune

    model = save_tiny_vlm(kind, tmp_path / "model")
    adapter = tmp_path / "adapter"
    # (a byte-level vocabulary: a token per byte, so the bound is above the default 4,096)
    cfg = FinetuneConfig(
        data=str(export), model=str(model), out=str(adapter), max_steps=2, grad_accum=1, max_length=8192
    )
    card = finetune(cfg)
    lines = export.read_text().splitlines()
    assert card["finished"] and card["data"] == {**card["data"], "examples": len(lines), "left_out_too_long": 0}
    with safe_open(str(adapter / "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and not [k for k in keys if any(p in k for p in VISION_PARTS)]  # the language model only

    policy = make_model_policy(
        ModelConfig(backend="transformers", path=str(model), adapter=str(adapter), max_tokens=700)
    )
    sent: list[list[dict]] = []
    complete = policy.backend.complete

    def recording(messages, *a, **kw):
        sent.append(messages)
        return complete(messages, *a, **kw)

    policy.backend.complete = recording  # type: ignore[method-assign]
    agent = make_agent(policy, KGSearch(), budget_s=600, max_steps=1, self_check="off")
    trace = agent.run_turn(
        TurnInput(
            task=1,
            session_id="e0",
            interaction_id="e0-t0",
            question="who makes this rocket?",
            image=_photo(1),
            image_info=ImageInfo(size=(1600, 1200)),
        )
    )
    stats = LoopStats()
    stats.add(trace)
    assert stats.decisions >= 1 and stats.decisions_parsed == stats.decisions, stats
    assert sent and all("image_url" in json.dumps(m) for m in sent)  # every decision request carries the photo


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_lora_targets_are_the_language_model_and_all_linear_takes_the_tower(kind, tmp_path):
    """`language-model` (the default) adapts every linear layer of the decoder and nothing of the vision tower or
    projector (vLLM applies LoRA to the language model only, vllm-project/vllm#29639); peft's `all-linear`, the
    documented in-process-only option, adapts the tower too."""
    import torch.nn as nn
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from glasses_rag.testing.tiny_vlms import save_tiny_vlm
    from glasses_rag.training.finetune import FinetuneConfig, lora_targets

    assert FinetuneConfig.model_fields["target_modules"].default == "language-model"
    folder = save_tiny_vlm(kind, tmp_path / "m")

    def adapted(spec: str) -> list[str]:
        model = AutoModelForImageTextToText.from_pretrained(folder)
        lora = LoraConfig(r=2, target_modules=lora_targets(model, spec), task_type="CAUSAL_LM")
        tuned = get_peft_model(model, lora)
        return [n for n, m in tuned.named_modules() if hasattr(m, "lora_A") and isinstance(m, nn.Module)]

    lm, everything = adapted("language-model"), adapted("all-linear")
    decoder = AutoModelForImageTextToText.from_pretrained(folder).get_decoder()
    linear = [n for n, m in decoder.named_modules() if isinstance(m, nn.Linear)]
    assert len(lm) == len(linear) and not [n for n in lm if any(p in n for p in VISION_PARTS)]
    assert [n for n in everything if any(p in n for p in VISION_PARTS)]


def test_a_merged_mllama_student_is_the_model_evaluated_in_process(tmp_path):
    """vLLM serves no LoRA on Llama 3.2 Vision: the adapter is merged and saved (glasses_rag.training.merge); the
    saved model's logits are those of the in-process merge."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from glasses_rag.models.vlm.transformers_local import merged_adapter
    from glasses_rag.testing.tiny_vlms import save_tiny_vlm
    from glasses_rag.training.finetune import lora_targets
    from glasses_rag.training.merge import merge

    base = save_tiny_vlm("mllama", tmp_path / "m")
    model = AutoModelForImageTextToText.from_pretrained(base)
    torch.manual_seed(3)
    lora = LoraConfig(r=2, target_modules=lora_targets(model, "language-model"), init_lora_weights=False)
    get_peft_model(model, lora).save_pretrained(str(tmp_path / "a"))
    out = merge(base, tmp_path / "a", tmp_path / "merged", dtype="float32")
    ids = torch.tensor([[1, 5, 40, 41, 42]])
    saved = AutoModelForImageTextToText.from_pretrained(out)(input_ids=ids).logits
    in_process = merged_adapter(AutoModelForImageTextToText.from_pretrained(base), tmp_path / "a")(input_ids=ids).logits
    plain = AutoModelForImageTextToText.from_pretrained(base)(input_ids=ids).logits
    assert torch.allclose(saved, in_process, atol=1e-5) and not torch.allclose(saved, plain, atol=1e-3)
    assert (out / "preprocessor_config.json").is_file() and (out / "chat_template.jinja").is_file()
