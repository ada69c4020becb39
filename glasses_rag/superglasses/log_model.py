"""SuperGlasses search logs as data: the `SGLog` model (one question, its hops, labels and verdict), the SuperGlasses
tool vocabulary and our tools' names in it (glasses_rag.superglasses.logs says what a log is)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from traces.schema import ToolCallEvent

log = logging.getLogger("glasses_rag.superglasses.logs")

FORMAT = "superglasses-log/1"
IMAGE, TEXT, NONE = "Image Search", "Text Search", "None"
SEARCH_TOOLS = (IMAGE, TEXT)  # the SuperGlasses tool vocabulary

# Our tool names -> SuperGlasses names, for traces written before calls recorded their hop kind (`search`, from the
# tool's capabilities): a call's `search` decides first (see `hop_tool`). The two searches are SuperGlasses' tools;
# the others are recorded as `other_tools` (SuperGlasses does not annotate them).
TOOL_NAMES: dict[str, str] = {
    "image_search": IMAGE,
    "google_lens": IMAGE,
    "web_search": TEXT,
    "google_search": TEXT,
    "detect_crop": "Object Detection",
    "ocr": "OCR",
    "query_decoupler": "Query Decoupling",
    "reranker": "Rerank",
    "read_webpage": "Web Page Reader",
}
# A call with one of these errors never reached the tool (see tools.registry.ToolCallError).
NOT_DISPATCHED = frozenset({"unknown_tool", "not_allowed", "bad_arguments"})
Layout = Literal["export", "hf", "paper", "hop-n", "superlens", "other"]


def squash(s: Any) -> str:
    """A key or name without case, spaces or punctuation: "Search result (snippet)" -> "searchresultsnippet"."""
    return re.sub(r"[^a-z0-9]+", "", str(s).lower())


_TOOL_ALIASES: dict[str, str] = {
    **{squash(k): v for k, v in TOOL_NAMES.items()},
    **{squash(v): v for v in TOOL_NAMES.values()},
    **{
        k: IMAGE
        for k in (
            "imagesearch",
            "imageretrieval",
            "reverseimagesearch",
            "googlelens",
            "lens",
            "visualsearch",
            "image",
            "imagesearchtool",
            "imagetool",
        )
    },
    **{
        k: TEXT
        for k in (
            "textsearch",
            "websearch",
            "textretrieval",
            "googlesearch",
            "search",
            "websearchtool",
            "text",
            "textsearchtool",
            "webtool",
            "textquery",
        )
    },
    "objectdetection": "Object Detection",
    "detection": "Object Detection",
    "detectcrop": "Object Detection",
    "textrecognition": "OCR",
    "querydecoupling": "Query Decoupling",
    "querydecomposition": "Query Decoupling",
    "reranking": "Rerank",
    "webpagereader": "Web Page Reader",
    "pagereader": "Web Page Reader",
}
NO_TOOL = frozenset(
    {"", "none", "null", "nil", "no", "n/a", "na", "notool", "noretrieval", "noneed", "false", "0", "{}", "[]", "nan"}
)


def sg_tool_name(tool: str) -> str:
    """Our tool name or any common spelling of a SuperGlasses tool -> its SuperGlasses name; "None"-like -> "None"."""
    t = (tool or "").strip()
    if squash(t) in {squash(x) for x in NO_TOOL}:
        return NONE
    return _TOOL_ALIASES.get(squash(t), t)


def hop_tool(step: ToolCallEvent) -> str:
    """The SuperGlasses name of a call's tool: "Image Search" / "Text Search" from the hop kind its capabilities give
    (`step.search`), so that a search tool added in one file is exported as one; else by name (older traces)."""
    if step.search == "image":
        return IMAGE
    if step.search == "text":
        return TEXT
    return sg_tool_name(step.tool)


class SGObject(BaseModel):
    """The object of interest. `box` is [x0, y0, x1, y1] in pixels of the image, or null."""

    model_config = ConfigDict(extra="allow")

    label: str = ""
    box: list[float] | None = None


class SGHop(BaseModel):
    """One hop: a sub-question and the one tool (or "None") used for it, with the paper's field names."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    sub_question: str = Field("", alias="Sub-question")
    tool_used: str = Field(NONE, alias="Tool used")
    search_keywords: str | None = Field(None, alias="Search keywords")
    search_url: str | None = Field(None, alias="Search URL")
    search_result_snippet: str | None = Field(None, alias="Search result (snippet)")

    @property
    def uses_tool(self) -> bool:
        return self.tool_used != NONE


class SGLog(BaseModel):
    """One question as a SuperGlasses log (ours, an annotation, or another system's)."""

    model_config = ConfigDict(populate_by_name=True)

    format: Literal["superglasses-log/1"] = "superglasses-log/1"
    id: str = Field(description="The SuperGlasses id (our interaction_id for rows of other datasets).")
    question: str = ""
    ground_truth: str | None = None
    answer: str | None = Field(None, description="The model's answer (ours or the logged system's).")
    accuracy: bool | None = Field(None, description="The judge's verdict on `answer`; null when not judged.")
    labels: dict[str, Any] = Field(
        default_factory=dict,
        description="category, domain, difficulty, dynamism, "
        "image_quality, glasses, location, hops (the annotated count), use_image, image_id.",
    )
    need_retrieval: bool | None = Field(None, description="Retrieval used or decided; null when the log does not say.")
    tool_decision: list[str] = Field(
        default_factory=list, description="Search tools used (SuperGlasses names), in order of first use."
    )
    detected_object: SGObject | None = None
    hops: list[SGHop] = Field(default_factory=list, description="The sub-questions, each with zero or one tool.")
    source: Layout = "other"
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Everything else: our trace's run metadata, or keys of an imported log that could not be mapped.",
    )
    unmapped: list[str] = Field(default_factory=list, description="Keys of the imported entry kept under `extra`.")

    def search_tools(self, vocabulary: Iterable[str] = SEARCH_TOOLS) -> set[str]:
        vocab = set(vocabulary)
        return {t for t in [*self.tool_decision, *(h.tool_used for h in self.hops)] if t in vocab}

    def dump(self) -> dict[str, Any]:
        """The export form: the paper's names for hop fields."""
        return self.model_dump(mode="json", by_alias=True)


def information_seeking(tools: set[str]) -> str:
    """SuperGlasses' information-seeking type of a question: None / Image / Text / Both."""
    img, txt = IMAGE in tools, TEXT in tools
    return "Both" if img and txt else "Image" if img else "Text" if txt else "None"


def note_problem(problems: list[str] | None, msg: str) -> None:
    """A problem met while reading logs: logged, and appended to `problems` when given."""
    log.info("superglasses: %s", msg)
    if problems is not None:
        problems.append(msg)
