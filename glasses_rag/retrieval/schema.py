"""Typed CRAG-MM records and the search-backend contract shared by every backend.

Search results keep exactly the dict layout of `cragmm-search-pipeline`'s `UnifiedSearchPipeline`:
image search -> {index, score, url, entities: [{entity_name, entity_attributes}]},
web search   -> {index, score, page_name, page_snippet, page_url}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from glasses_rag.core.images import ImagePrep


def plain(v: Any) -> Any:
    """Arrow / numpy values (scalars, nested in dicts and lists) as JSON-able Python values; dict keys as str."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item):
        try:
            return v.item()
        except Exception:  # noqa: BLE001 - an array of several values stays as it is
            return v
    return v


class ImageEntity(BaseModel):
    entity_name: str
    entity_attributes: dict[str, Any] | None = None


class ImageSearchResult(BaseModel):
    index: int
    score: float  # cosine similarity (1 - distance), higher is better, as in the official pipeline
    url: str
    entities: list[ImageEntity]


class WebSearchResult(BaseModel):
    index: int | str
    score: float
    page_name: str
    page_snippet: str
    page_url: str


@runtime_checkable
class SearchBackend(Protocol):
    """What tools call. Results are plain dicts in the official format (validate with the models above)."""

    name: str

    def image_search(self, image: Any, k: int = 5) -> list[dict[str, Any]]: ...

    def web_search(self, query: str, k: int = 5) -> list[dict[str, Any]]: ...


class Turn(BaseModel):
    interaction_id: str
    query: str
    domain: str | None = None
    query_category: str | None = None
    dynamism: str | None = None
    image_quality: str | None = None
    labels: dict[str, Any] = Field(
        default_factory=dict,
        description="Other labels of the dataset row, kept as "
        "they are (e.g. SuperGlasses' difficulty, hops, glasses, sub_questions).",
    )


class Conversation(BaseModel):
    """One dataset row: an image and 1..n turns with their reference answers."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    session_id: str
    image: Any = None  # the undecoded image (bytes, an Image() cell, a path) or a PIL image; None when absent
    image_url: str | None = None
    image_error: str | None = None
    turns: list[Turn]
    answers: list[str] = Field(default_factory=list)
    egocentric: bool | None = None

    def photo(self, image_prep: ImagePrep = "harness") -> tuple[Any, Any]:
        """The photo decoded and prepared as a run prepares photos (glasses_rag.core.images.prepare), with its
        ImageInfo (why there is none, where it came from)."""
        from glasses_rag.core.images import load_image, prepare

        image, info = load_image(self.image)
        if image is None and self.image_error:
            info.note = self.image_error
        if info.source is None and self.image_url:
            info.source = self.image_url
        return prepare(image, info, self.egocentric, image_prep)
