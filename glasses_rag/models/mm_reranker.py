"""A multimodal cross-scorer: jina-reranker-m0 (a Qwen2-VL backbone with a relevance head), from a local folder.

SuperLens (SuperGlasses Appendix D, eq. 4) scores each chunk against the image and against the question with
jina-reranker-m0 and mixes the two (0.4 / 0.6). This loads the same architecture through transformers' own
Qwen2-VL classes (never code from a model hub): the backbone with `Qwen2VLForConditionalGeneration` (local files
only), the relevance head from the folder's `score.*` weights (`score.dense` -> ReLU -> `score.out_proj`, as the
model's checkpoint names them; `score.0` / `score.2` in older ones), pooled at the last token. Relevance is the
sigmoid of the head's logit, in [0, 1], so a fixed floor (SuperLens' 0.6) means the same on every turn.

The pair layout ("**Document**:" then "**Query**:", an image as Qwen2-VL's vision tokens) follows the model's
published description; with no weights on this machine it is tested on a tiny random model built from the
Qwen2-VL config (tests/test_reranker.py), not against the released scores.

    from glasses_rag.models.mm_reranker import JinaM0Reranker, is_jina_m0
    r = JinaM0Reranker("/models/jina-reranker-m0")
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


class JinaM0Reranker:
    """jina-reranker-m0 from a local folder: `score(query, texts)` and `score_image(image, texts)`, relevance in
    [0, 1] (float32 arrays of len(texts))."""

    calibrated = True

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_length: int = 1024,
        batch_size: int = 8,
        max_pixels: int = 602112,
    ):
        import torch
        from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

        from glasses_rag.models.threads import set_torch_threads

        set_torch_threads()
        self.path = Path(path)
        self.name = f"multimodal-reranker:{self.path.name}"
        self._torch = torch
        self.device = device
        self.max_length = max_length
        self.batch_size = batch_size
        # the tokenizer and the image processor, not AutoProcessor: Qwen2-VL's processor also builds a video
        # processor, which needs torchvision
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self.tokenizer.padding_side = "left"  # the last position is every row's last token
        self.images = Qwen2VLImageProcessor.from_pretrained(
            str(self.path), local_files_only=True, max_pixels=max_pixels
        )
        model = Qwen2VLForConditionalGeneration.from_pretrained(str(self.path), local_files_only=True)
        self.backbone = model.model.to(device).eval()
        head = load_head(self.path)
        hidden = int(head["dense_weight"].shape[1])
        dense, out = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, int(head["out_weight"].shape[0]))
        with torch.no_grad():
            for layer, role in ((dense, "dense"), (out, "out")):
                layer.weight.copy_(head[f"{role}_weight"])
                layer.bias.copy_(head[f"{role}_bias"])
        self.head = torch.nn.Sequential(dense, torch.nn.ReLU(), out).to(device).eval()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JinaM0Reranker({self.name!r})"

    @staticmethod
    def pair(document: str, query: str) -> str:
        return f"**Document**:\n{document}\n**Query**:\n{query}"

    def _inputs(self, texts: list[str], image: Any) -> dict[str, Any]:
        """Token ids (and pixels): the image placeholder expanded to the image's patch count after merging, as
        Qwen2-VL's processor does."""
        if image is None:
            return dict(
                self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
            )
        pix = self.images(images=[image] * len(texts), return_tensors="pt")
        n = int(pix["image_grid_thw"][0].prod()) // (self.images.merge_size**2)
        expanded = [t.replace("<|image_pad|>", "<|image_pad|>" * n) for t in texts]
        return {**self.tokenizer(expanded, padding=True, return_tensors="pt"), **pix}

    def _run(self, texts: list[str], image: Any) -> np.ndarray:
        torch = self._torch
        with self._lock, torch.inference_mode():
            enc = {k: v.to(self.device) for k, v in self._inputs(texts, image).items()}
            hidden = self.backbone(**enc).last_hidden_state[:, -1]
            logits = self.head(hidden.float())[:, 0]
        return torch.sigmoid(logits).cpu().numpy().astype(np.float32)

    def _batched(self, texts: list[str], image: Any = None) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        out = []
        for i in range(0, len(texts), self.batch_size):
            batch = texts[i : i + self.batch_size]
            out.append(self._run(batch, image))
        return np.concatenate(out)

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        """Each text's relevance to a text query."""
        return self._batched([self.pair(str(t), str(query)) for t in texts])

    def score_image(self, image: Any, texts: list[str]) -> np.ndarray:
        """Each text's relevance to the image (the image is the query; eq. 4's Reranker(c_l, v))."""
        img = image.convert("RGB") if hasattr(image, "convert") else image
        return self._batched([self.pair(str(t)[:2000], IMAGE_TOKENS) for t in texts], img)
