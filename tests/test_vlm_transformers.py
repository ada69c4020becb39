"""TransformersVLMBackend on tiny randomly initialised models built in-process (no downloads).

The output of a random model is junk; the point is that the real load -> chat template ->
generate -> decode path runs, and that the policy turns junk into a graceful Decision.
"""

from __future__ import annotations

import pytest
from PIL import Image

from core.calls import collect_model_calls
from graph.model_policy import make_model_policy
from graph.policy import AnswerDraft, PolicyReplyError, PolicyView, ToolSpec
from models.vlm.base import image_to_data_url

torch = pytest.importorskip("torch")

SPECIALS = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<image>"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
        "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _tokenizer():
    """A byte-level tokenizer with no merges (256 byte symbols + specials) and a ChatML-like template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>", "<image>"])
    fast.chat_template = CHAT
    return fast


def _llama_config(vocab: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=2, max_position_embeddings=8192, pad_token_id=0, bos_token_id=1, eos_token_id=2)


@pytest.fixture(scope="module")
def text_model_dir(tmp_path_factory):
    from transformers import LlamaForCausalLM

    d = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    tok = _tokenizer()
    LlamaForCausalLM(_llama_config(len(tok))).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    d = tmp_path_factory.mktemp("tiny_llava")
    torch.manual_seed(0)
    tok = _tokenizer()
    vis = CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                           patch_size=14, projection_dim=16)
    cfg = LlavaConfig(vision_config=vis, text_config=_llama_config(len(tok)), image_token_index=tok.convert_tokens_to_ids("<image>"),
                      vision_feature_layer=-1, vision_feature_select_strategy="default")
    LlavaForConditionalGeneration(cfg).save_pretrained(d)
    ip = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=14, vision_feature_select_strategy="default",
                   image_token="<image>", num_additional_image_tokens=1, chat_template=CHAT).save_pretrained(d)
    return d


TOOLS = [ToolSpec(name="ocr", description="Read text in the image.", signature="ocr() - Read text in the image.",
                  json_schema={"type": "function", "function": {"name": "ocr", "description": "Read text in the image.",
                                                                "parameters": {"type": "object", "properties": {}}}})]


def _view():
    return PolicyView(task=1, question="What is written on the sign?", has_image=True, tools=TOOLS, remaining_steps=3,
                      remaining_s=20.0)


def test_text_only_causal_lm(text_model_dir):
    from models.vlm.transformers_local import TransformersVLMBackend

    b = TransformersVLMBackend(text_model_dir, device="cpu")
    assert not b.is_vision and not b.supports_images and not b.supports_native_tools
    url = image_to_data_url(Image.new("RGB", (40, 30)))
    r = b.complete([{"role": "system", "content": "be brief"},
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}]}],
                   max_tokens=6)
    assert r.usage.output_tokens <= 6 and r.usage.input_tokens > 10 and isinstance(r.text, str)
    assert r.latency_ms > 0


def test_text_only_policy_reports_junk_as_reply_errors(text_model_dir):
    p = make_model_policy(f"transformers:{text_model_dir}", max_tokens=8)
    img = Image.new("RGB", (64, 64), (10, 200, 10))
    with collect_model_calls() as calls:
        for call in (p.decide, p.answer):  # a random model's junk: a reply error the graph records, no crash
            try:
                out = call(_view(), img)
                assert out is not None
            except PolicyReplyError as e:
                assert isinstance(e.raw, str)
    assert len(calls) == 2 and all(c.completion_tokens <= 8 for c in calls)


def test_tiny_llava_vision_path(llava_dir):
    from models.vlm.transformers_local import TransformersVLMBackend

    b = TransformersVLMBackend(llava_dir, device="cpu", dtype="float32")
    assert b.is_vision and b.supports_images
    url = image_to_data_url(Image.new("RGB", (64, 48), (1, 2, 3)))
    msgs = [{"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what?"}]}]
    r = b.complete(msgs, max_tokens=5)
    no_img = b.complete([{"role": "user", "content": "what?"}], max_tokens=5)
    assert r.usage.input_tokens > no_img.usage.input_tokens  # the image became image tokens
    p = make_model_policy(f"transformers:{llava_dir}", max_tokens=6)
    try:
        assert p.decide(_view(), Image.new("RGB", (80, 60))).action in ("answer", "call_tool")
    except PolicyReplyError:
        pass
    try:  # junk from a random model is never 'supported': unparseable (an error the graph records) or unsupported
        v = p.verifier().verify("What is written?", AnswerDraft(answer="STOP", confidence=0.9), ["a red stop sign"],
                                Image.new("RGB", (80, 60)))
        assert v.supported is False
    except PolicyReplyError as e:
        assert isinstance(e.raw, str)


def test_missing_folder():
    from models.vlm.transformers_local import TransformersVLMBackend

    with pytest.raises(FileNotFoundError):
        TransformersVLMBackend("/nonexistent/model/folder")
