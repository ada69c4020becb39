"""Issue 39: what a served model (and each tool) meets in the paper presets, stage by stage, against the papers:
the open-web lens on the whole photo when nothing was detected (SuperGlasses, arXiv 2602.22683, §3.2), ..."""

from __future__ import annotations

from PIL import Image

QUESTION = "who manufactures this rocket?"


def lens_context(crop_method: str | None):
    from glasses_rag.core.types import Box
    from glasses_rag.models.resources import ModelPaths, Resources
    from tools import ToolContext

    crop = None if crop_method is None else Box(x0=0, y0=0, x1=20, y1=20, label="rocket", method=crop_method)
    return ToolContext(
        task=2,
        question=QUESTION,
        image=Image.new("RGB", (64, 48), (200, 30, 30)),
        resources=Resources(None, ModelPaths()),
        crop=crop,
    )


def test_google_lens_searches_the_whole_photo_unless_a_detector_found_the_object(monkeypatch):
    import glasses_rag.web.open_web as open_web
    from glasses_rag.web.serpapi import SearchResults
    from tools.google_lens import google_lens

    sizes: list[tuple[int, int]] = []

    class Lens:
        def lens_search(self, image, k=5, refine=""):
            sizes.append(image.size)
            return SearchResults(), False

    monkeypatch.setattr(open_web, "get_open_web", Lens)
    for method, searched in (
        ("grounding-dino:tiny", (20, 20)),
        ("heuristic:saliency-crop", (64, 48)),
        (None, (64, 48)),
    ):
        sizes.clear()
        out = google_lens(lens_context(method), use_crop=True)
        assert sizes == [searched], method
        assert ("stand-in" in out.method) is (method or "").startswith("heuristic:")
