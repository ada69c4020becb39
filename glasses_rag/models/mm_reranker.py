"""A multimodal cross-scorer: jina-reranker-m0 (a Qwen2-VL backbone with a relevance head), from a local folder.

SuperLens (SuperGlasses, arXiv 2602.22683, Appendix D eq. 4) scores each chunk against the image and against the
question with jina-reranker-m0 and mixes the two (0.4 / 0.6). This loads the same architecture through transformers'
own Qwen2-VL classes (never code from a model hub): the backbone with `Qwen2VLForConditionalGeneration` (local files
only), the relevance head from the folder's `score.*` weights (`score.dense` -> ReLU -> `score.out_proj`, as the
checkpoint names them; `score.0` / `score.2` in older ones).

Scoring is the checkpoint's own (its modeling code, `JinaVLForRanking.compute_score`), checked line by line against
vLLM's implementation (vllm/model_executor/models/jina_vl.py and JinaVLForSequenceClassificationConfig in
vllm/model_executor/models/config.py, vLLM 0.33):

* the pair is "**Document**:\\n{document}\\n**Query**:\\n{query}" (vLLM's `get_score_template`); an image query is
  Qwen2-VL's vision tokens in the query's place, as the model card's `query_type="image"` example formats it;
* a text document is cut to `max_length - max_query_length` tokens first (so a long page never pushes the query
  out), the pair to `max_length - 1` tokens, then the score token (id 100) is appended to every row (vLLM's
  `post_process_tokens`, after truncation), with left padding so that it is every row's last position;
* relevance = sigmoid(head(hidden state at the score token) - 2.65) (the checkpoint's LOGIT_BIAS; vLLM's
  `logit_mean = 2.65`), in [0, 1], so SuperLens' fixed 0.6 floor is a logit of 3.06 as the paper meant it.

With no weights on this machine it is tested on a tiny random Qwen2-VL with the same head
(glasses_rag.testing.tiny_models.save_tiny_jina_m0, tests/test_mm_reranker_scoring.py) against an independent
re-implementation of the checkpoint's forward pass; the released model's scores are not reproduced here.

    from glasses_rag.models.mm_reranker import JinaM0Reranker, is_jina_m0
    r = JinaM0Reranker("/models/jina-reranker-m0", device="cuda")
    r.score("who makes this rocket?", ["SpaceX builds the Falcon 9."])      # text query
    r.score_image(photo, ["SpaceX builds the Falcon 9."])                  # the image as the query
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_TOKENS = "<|vision_start|><|image_pad|><|vision_end|>"
HEAD_NAMES = ({"dense": "score.dense", "out": "score.out_proj"}, {"dense": "score.0", "out": "score.2"})
SCORE_TOKEN_ID = 100  # appended to every pair; the head reads the hidden state there (JinaVLForRanking.score_token_id)
LOGIT_BIAS = 2.65  # relevance = sigmoid(logit - LOGIT_BIAS) (the checkpoint's modeling code; vLLM's logit_mean)
MAX_QUERY_TOKENS = 512  # compute_score's max_query_length: a text document gets max_length less this
MIN_PIXELS, MAX_PIXELS = 3136, 602112  # compute_score's processor bounds (56x56 up to 768 merged patches)


def is_jina_m0(path: str | Path) -> bool:
    """A folder whose config is a Qwen2-VL model (jina-reranker-m0's backbone)."""
    cfg = Path(path) / "config.json"
    try:
        return json.loads(cfg.read_text(encoding="utf-8")).get("model_type") == "qwen2_vl"
    except (OSError, ValueError):
        return False


def load_head(folder: Path) -> dict[str, Any]:
    """The relevance head's four tensors from the folder's safetensors files; a ValueError when it has none."""
    from safetensors.torch import load_file

    found: dict[str, Any] = {}
    for f in sorted(folder.glob("*.safetensors")):
        found.update({k: v for k, v in load_file(str(f)).items() if k.startswith("score.")})
    for names in HEAD_NAMES:
        keys = {f"{role}_{p}": f"{prefix}.{p}" for role, prefix in names.items() for p in ("weight", "bias")}
        if all(k in found for k in keys.values()):
            return {role: found[k] for role, k in keys.items()}
    raise ValueError(
        f"{folder} has no relevance head (score.dense / score.out_proj weights): not a jina-reranker-m0 folder"
    )


def relevance_head(head: dict[str, Any], device: str) -> Any:
    """score.dense -> ReLU -> score.out_proj, in float32, from the checkpoint's tensors."""
    import torch

    hidden = int(head["dense_weight"].shape[1])
    dense, out = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, int(head["out_weight"].shape[0]))
    with torch.no_grad():
        for layer, role in ((dense, "dense"), (out, "out")):
            layer.weight.copy_(head[f"{role}_weight"].float())
            layer.bias.copy_(head[f"{role}_bias"].float())
    return torch.nn.Sequential(dense, torch.nn.ReLU(), out).to(device).eval()


class JinaM0Reranker:
    """jina-reranker-m0 from a local folder: `score(query, texts)` and `score_image(image, texts)`, relevance in
    [0, 1] (float32 arrays of len(texts)), computed as the checkpoint's `compute_score` does (module docstring)."""

    calibrated = True

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_length: int = 1024,
        batch_size: int = 8,
        max_pixels: int = MAX_PIXELS,
    ):
        import torch
        from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

        from glasses_rag.models.threads import set_torch_threads

        set_torch_threads()
        self.path = Path(path)
        self.device = device
        self.name = f"multimodal-reranker:{self.path.name}"
        self._torch = torch
        self.max_length = max_length
        self.batch_size = batch_size
        # the tokenizer and the image processor, not AutoProcessor: Qwen2-VL's processor also builds a video
        # processor, which needs torchvision
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self.tokenizer.padding_side = "left"  # the score token is every row's last position
        self.images = Qwen2VLImageProcessor.from_pretrained(
            str(self.path), local_files_only=True, min_pixels=MIN_PIXELS, max_pixels=max_pixels
        )
        dtype = torch.float32 if device == "cpu" else "auto"  # a GPU runs the checkpoint's own dtype
        model = Qwen2VLForConditionalGeneration.from_pretrained(str(self.path), local_files_only=True, dtype=dtype)
        self.backbone = model.model.to(device).eval()
        self.head = relevance_head(load_head(self.path), device)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JinaM0Reranker({self.name!r})"

    @staticmethod
    def pair(document: str, query: str) -> str:
        """The checkpoint's prompt (formatting_prompts_func; vLLM's get_score_template): document first."""
        return f"**Document**:\n{document}\n**Query**:\n{query}"

    def cut_document(self, text: str) -> str:
        """A text document within max_length - 512 tokens (compute_score's max_doc_length), so the query after
        it is never the part truncation removes."""
        limit = max(self.max_length - MAX_QUERY_TOKENS, MAX_QUERY_TOKENS)
        ids = self.tokenizer(text, truncation=True, max_length=limit)["input_ids"]
        return self.tokenizer.decode(ids) if len(ids) >= limit else text

    def _inputs(self, texts: list[str], image: Any) -> dict[str, Any]:
        """Left-padded token ids ending in the score token (and pixels): the image placeholder expanded to the
        image's patch count after merging, as Qwen2-VL's processor does."""
        pix: dict[str, Any] = {}
        if image is None:
            rows = self.tokenizer(texts, truncation=True, max_length=self.max_length - 1)["input_ids"]
        else:
            pix = dict(self.images(images=[image] * len(texts), return_tensors="pt"))
            n = int(pix["image_grid_thw"][0].prod()) // (self.images.merge_size**2)
            rows = self.tokenizer([t.replace("<|image_pad|>", "<|image_pad|>" * n) for t in texts])["input_ids"]
        rows = [[*r, SCORE_TOKEN_ID] for r in rows]  # after truncation, as vLLM's post_process_tokens
        return {**self.tokenizer.pad({"input_ids": rows}, padding=True, return_tensors="pt"), **pix}

    def _run(self, texts: list[str], image: Any) -> np.ndarray:
        torch = self._torch
        with self._lock, torch.inference_mode():
            enc = {k: v.to(self.device) for k, v in self._inputs(texts, image).items()}
            hidden = self.backbone(**enc).last_hidden_state[:, -1]
            logits = self.head(hidden.float())[:, 0]
        return torch.sigmoid(logits - LOGIT_BIAS).cpu().numpy().astype(np.float32)

    def _batched(self, texts: list[str], image: Any = None) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        out = []
        for i in range(0, len(texts), self.batch_size):
            out.append(self._run(texts[i : i + self.batch_size], image))
        return np.concatenate(out)

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        """Each text's relevance to a text query."""
        return self._batched([self.pair(self.cut_document(str(t)), str(query)) for t in texts])

    def score_image(self, image: Any, texts: list[str]) -> np.ndarray:
        """Each text's relevance to the image (the image is the query; eq. 4's Reranker(c_l, v))."""
        img = image.convert("RGB") if hasattr(image, "convert") else image
        return self._batched([self.pair(self.cut_document(str(t)), IMAGE_TOKENS) for t in texts], img)
