"""The keys a SuperGlasses log may use for each field, squashed (`log_model.squash`: no case, spaces or punctuation),
in order of preference; the values read as yes and no. Read by glasses_rag.superglasses.log_import."""

from __future__ import annotations

import re

ID = ("id", "sgid", "interactionid", "qid", "questionid", "queryid", "sampleid", "uid")
QUESTION = ("question", "query", "userquestion", "prompt")
GT = ("groundtruth", "gt", "goldanswer", "referenceanswer", "groundtruthanswer", "gtanswer", "goldenanswer")
PRED = (
    "prediction",
    "response",
    "modelanswer",
    "finalanswer",
    "agentanswer",
    "predictedanswer",
    "output",
    "superlensanswer",
)
LABELS = {
    "category": "category",
    "categories": "category",
    "querycategory": "category",
    "domain": "domain",
    "difficulty": "difficulty",
    "dynamism": "dynamism",
    "imagequality": "image_quality",
    "glasses": "glasses",
    "device": "glasses",
    "location": "location",
    "useimage": "use_image",
    "imageid": "image_id",
    "image": "image",
    "numhops": "hops",
    "hopcount": "hops",
    "numberofhops": "hops",
}
NEED = (
    "needretrieval",
    "needsretrieval",
    "needsearch",
    "needssearch",
    "retrievalneeded",
    "requiresretrieval",
    "needrag",
    "rag",
    "decision",
    "retrievaldecision",
    "retrievaldemand",
    "ragdecision",
)
TOOLS = (
    "tooldecision",
    "tooldecisions",
    "tools",
    "toolsused",
    "toolsequence",
    "toolchain",
    "tooluse",
    "informationseeking",
)
OBJECT = (
    "detectedobject",
    "object",
    "objectdetection",
    "targetobject",
    "objectofinterest",
    "detection",
    "entityobject",
)
HOPS = (
    "hops",
    "subquestions",
    "searchlog",
    "searchlogs",
    "searchtrajectory",
    "searchtrajectories",
    "trajectory",
    "searchsteps",
    "steps",
    "searchhistory",
    "hoplist",
)
ACCURACY = ("accuracy", "correct", "iscorrect", "judgement", "judgment", "verdict")
IGNORED = ("format", "source", "unmapped")  # written by our export; re-derived on reading

HOP_SUBQ = ("subquestion", "subquery", "subq", "question", "text", "querytext")
HOP_TOOL = (
    "toolused",
    "tool",
    "toolname",
    "searchtool",
    "tooltype",
    "searchtype",
    "retrievaltools",
    "retrievaltool",
    "tools",
    "type",
    "name",
)
HOP_KW = ("searchkeywords", "keywords", "keyword", "searchquery", "query", "searchterms", "q")
HOP_URL = ("searchurl", "url", "link", "sourceurl", "resulturl", "urls", "links")
HOP_SNIPPET = (
    "searchresultsnippet",
    "searchresult",
    "snippet",
    "resultsnippet",
    "result",
    "searchsnippet",
    "content",
    "searchresults",
    "results",
    "evidence",
)
HOP_KEYS = (HOP_SUBQ, HOP_TOOL, HOP_KW, HOP_URL, HOP_SNIPPET)
HOP_OWN_EXTRAS = ("steps", "error", "moretools")  # written by our export: kept without a report
HOP_N = re.compile(r"^hop(\d+)$")
LINE = re.compile(r"^\s*([^:]{1,60}?)\s*:\s*(.*?)\s*$")

TRUE = {
    "true",
    "yes",
    "y",
    "1",
    "t",
    "need",
    "needed",
    "required",
    "needrag",
    "rag",
    "retrieval",
    "search",
    "useretrieval",
    "needretrieval",
    "needsearch",
}
FALSE = {
    "false",
    "no",
    "n",
    "0",
    "f",
    "none",
    "notneeded",
    "noretrieval",
    "norag",
    "noneedrag",
    "noneed",
    "directanswer",
    "direct",
    "nosearch",
    "noneedsearch",
    "noneedretrieval",
    "",
}
