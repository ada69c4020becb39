"""A tolerant reader of SuperGlasses annotations and logs, whatever their layout (the Hugging Face rows, the paper's,
"Hop N" keys, SuperLens-style decision lines, our own export): `parse_log(entry)`, `import_logs(path)`. Keys are
matched ignoring case, spaces and punctuation (log_keys); a key that cannot be mapped is kept under `extra` and
reported. A file is looked at before it is read (at most MAX_LOG_BYTES), and text that is not valid Unicode (a lone
surrogate in a JSON escape) is replaced, so that what is read can always be written again."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from glasses_rag.core.files import read_bounded
from glasses_rag.superglasses import log_keys as K
from glasses_rag.superglasses.log_model import (
    FORMAT,
    NO_TOOL,
    NONE,
    SEARCH_TOOLS,
    Layout,
    SGHop,
    SGLog,
    SGObject,
    note_problem,
    sg_tool_name,
    squash,
)


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return " ".join(_text(x) for x in v if x is not None).strip()
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)
    return str(v).strip()


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        s = squash(v)
        if s in K.TRUE:
            return True
        if s in K.FALSE:
            return False
    if isinstance(v, dict):
        for k in ("accuracy", "correct", "value"):
            if k in v:
                return _bool(v[k])
    return None


def _box(v: Any) -> list[float] | None:
    """[x0, y0, x1, y1] from a list (xyxy; x, y, w, h when the second corner lies before the first) or a dict with
    x0/y0/x1/y1, x1/y1/x2/y2, xmin/ymin/xmax/ymax, left/top/right/bottom or x/y/w(idth)/h(eight)."""
    try:
        if isinstance(v, (list, tuple)) and len(v) == 4:
            x0, y0, a, b = (float(x) for x in v)
            return [x0, y0, a, b] if a >= x0 and b >= y0 else [x0, y0, x0 + a, y0 + b]
        if isinstance(v, dict):
            d = {squash(k): x for k, x in v.items()}
            for keys in (
                ("x0", "y0", "x1", "y1"),
                ("x1", "y1", "x2", "y2"),
                ("xmin", "ymin", "xmax", "ymax"),
                ("left", "top", "right", "bottom"),
            ):
                if all(k in d for k in keys):
                    return [float(d[k]) for k in keys]
            for keys in (("x", "y", "w", "h"), ("x", "y", "width", "height")):
                if all(k in d for k in keys):
                    x, y, w, h = (float(d[k]) for k in keys)
                    return [x, y, x + w, y + h]
    except (TypeError, ValueError):
        return None
    return None


def _object(v: Any) -> SGObject | None:
    if v is None or v == "" or v == {} or (isinstance(v, str) and squash(v) in NO_TOOL):
        return None
    if isinstance(v, str):
        return SGObject(label=v.strip())
    if isinstance(v, dict):
        d = {squash(k): x for k, x in v.items()}
        label = next((_text(d[k]) for k in ("label", "name", "object", "category", "class", "entity") if k in d), "")
        raw = next((d[k] for k in ("box", "bbox", "boundingbox", "region", "coordinates") if k in d), None)
        box = _box(raw) if raw is not None else _box(v)
        if not label and box is None:
            return None
        extra = {k: d[k] for k in ("score", "method") if k in d}
        return SGObject(label=label, box=box, **extra)
    return None


def _loads(v: Any) -> Any:
    """A JSON-encoded string decoded; anything else as it is."""
    if isinstance(v, str) and v.strip()[:1] in ("{", "["):
        try:
            return json.loads(v)
        except (json.JSONDecodeError, RecursionError):
            return v
    return v


def _decisions(text: str) -> tuple[list[str], list[str]]:
    """("Need Image Search, No need Text Search") -> (tools needed, tools declined)."""
    need, declined = [], []
    for part in re.split(r"\s*(?:,|;|\||->|→|\band\b|\n)\s*", text or ""):
        s = part.strip().strip(".")
        if not s:
            continue
        m = re.match(
            r"^(?:no\s+need(?:\s+(?:for|of|to use))?|not\s+needed:?|no|without|skip|don'?t\s+need)\s+(.+)$", s, re.I
        )
        if m:
            declined.append(sg_tool_name(m.group(1)))
            continue
        m = re.match(r"^(?:need(?:s)?(?:\s+(?:for|to use))?|use|uses|call|requires?)\s+(.+)$", s, re.I)
        name = sg_tool_name(m.group(1) if m else s)
        if name != NONE:
            need.append(name)
    return need, declined


def tools_named_in(
    value: Any, found: list[tuple[str, dict[str, Any]]] | None = None, notes: list[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The tools named in a `retrieval-tools`-like value, with the details given for each ({keywords, url, ...}).

    None, "", "none", "null", "{}" and "[]" name no tool; a JSON string is decoded; a list names the tools of its
    items; a dict is either one tool ({"tool": "Text Search", "keywords": ...}) or tool -> details
    ({"Text Search": "falcon 9 maker"} or {"text_search": {"keywords": ...}}); a plain string is a tool name (or
    a "Need X, No need Y" decision). A dict naming no known tool is reported and counted as an unnamed tool."""
    found = [] if found is None else found
    value = _loads(value)
    if value is None or (isinstance(value, str) and squash(value) in NO_TOOL) or value in ({}, []):
        return found
    if isinstance(value, (list, tuple)):
        for x in value:
            tools_named_in(x, found, notes)
        return found
    if isinstance(value, dict):
        d = {squash(k): (k, x) for k, x in value.items()}
        key = next(
            (k for k in ("tool", "toolused", "toolname", "name", "type", "searchtool", "tooltype") if k in d), None
        )
        if key is not None:
            names = [n for n, _ in tools_named_in(d[key][1])]
            details = {k: x for k, x in value.items() if squash(k) != key}
            for n in names or []:
                found.append((n, details))
            return found
        named = {k: x for k, x in value.items() if sg_tool_name(k) in SEARCH_TOOLS}
        if named:
            for k, x in named.items():
                if _loads(x) in (None, False) or (isinstance(x, str) and squash(x) in NO_TOOL):
                    continue  # {"Image Search": "none"}: declined
                details = x if isinstance(x, dict) else {"keywords": x} if isinstance(x, str) else {"value": x}
                found.append((sg_tool_name(k), details))
            return found
        if notes is not None:
            notes.append(f"retrieval tool without a known name: {json.dumps(value, ensure_ascii=False)[:120]}")
        found.append(("Unnamed Tool", dict(value)))
        return found
    if isinstance(value, bool):
        if value:
            found.append(("Unnamed Tool", {}))
        return found
    need, _ = _decisions(str(value))
    found += [(n, {}) for n in need]
    return found


def _pick(d: dict[str, tuple[str, Any]], names: tuple[str, ...], used: set[str]) -> tuple[bool, Any]:
    for n in names:
        if n in d and n not in used:
            used.add(n)
            return True, d[n][1]
    return False, None


def _hop_from(
    v: Any, question: str, where: str, problems: list[str] | None, unmapped: list[str], name: str = "hop"
) -> SGHop | None:
    """One hop from a dict in any layout, or from a plain string (a sub-question without a tool)."""
    v = _loads(v)
    if isinstance(v, str):
        return SGHop(sub_question=v.strip()) if v.strip() else None
    if not isinstance(v, dict):
        return None
    d = {squash(k): (k, x) for k, x in v.items()}
    used: set[str] = set()
    got = [_pick(d, names, used) for names in K.HOP_KEYS]
    (has_q, q), (has_t, tool), (_, kw), (_, url), (_, snip) = got
    if not any(found for found, _ in got):
        return None
    notes: list[str] = []
    tools = tools_named_in(tool, notes=notes) if has_t else []
    for n in notes:
        note_problem(problems, f"{where}: {n}")
    tool_name, details = tools[0] if tools else (NONE, {})
    dd = {squash(k): x for k, x in details.items()} if isinstance(details, dict) else {}
    kw = kw if kw is not None else next((dd[k] for k in K.HOP_KW if k in dd), None)
    url = url if url is not None else next((dd[k] for k in K.HOP_URL if k in dd), None)
    snip = snip if snip is not None else next((dd[k] for k in K.HOP_SNIPPET if k in dd), None)
    if isinstance(snip, (list, tuple)) and snip and isinstance(snip[0], dict):
        first = {squash(k): x for k, x in snip[0].items()}
        url = url or first.get("url") or first.get("link")
        snip = next((first[k] for k in ("snippet", "text", "content", "title") if k in first), None)
    if isinstance(url, (list, tuple)):
        url = url[0] if url else None
    extra = _unmapped_keys(d, used, unmapped, f"{name}.", K.HOP_OWN_EXTRAS)
    if len(tools) > 1:
        extra["more_tools"] = [n for n, _ in tools[1:]]
        note_problem(
            problems,
            f"{where}: names {len(tools)} tools ({', '.join(n for n, _ in tools)}); a SuperGlasses "
            "hop has one: the first is `Tool used`, the others are kept under more_tools",
        )
    snippet = _text(snip) or None
    return SGHop(
        sub_question=_text(q) if has_q and _text(q) else question,
        tool_used=tool_name,
        search_keywords=_text(kw) or None,
        search_url=_text(url) or None,
        search_result_snippet=snippet,
        **extra,
    )


def _key_lines(text: str) -> dict[str, Any]:
    """ "Decision: Need RAG\\nObject Detection: Car" -> {"Decision": "Need RAG", "Object Detection": "Car"}."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        m = K.LINE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _layout(d: dict[str, tuple[str, Any]]) -> Layout:
    if d.get("format", (None, None))[1] == FORMAT:
        return "export"
    if "subquestions" in d or "useimage" in d or isinstance(d.get("hops", (None, None))[1], int):
        return "hf"
    if any(K.HOP_N.match(k) for k in d):
        return "hop-n"
    if {"decision", "tooldecision", "objectdetection"} & set(d):
        return "superlens"
    if {"subquestion", "toolused"} & set(d) or any(
        isinstance(x, list) and x and isinstance(x[0], dict) and {"subquestion", "toolused"} & {squash(k) for k in x[0]}
        for _, x in d.values()
    ):
        return "paper"
    return "other"


@dataclass
class _Entry:
    """One log entry being read: its keys (squashed -> (original key, value)), those mapped so far, and what
    could not be mapped (hop keys as "hop N.key"; whole hops that could not be read)."""

    keys: dict[str, tuple[str, Any]]
    where: str
    problems: list[str] | None
    used: set[str] = field(default_factory=set)
    unmapped: list[str] = field(default_factory=list)
    unreadable_hops: list[Any] = field(default_factory=list)

    def pick(self, names: tuple[str, ...]) -> tuple[bool, Any]:
        return _pick(self.keys, names, self.used)

    def problem(self, msg: str) -> None:
        note_problem(self.problems, f"{self.where}: {msg}")


def parse_log(entry: Any, where: str = "entry", problems: list[str] | None = None) -> SGLog | None:
    """One log entry in any known layout -> SGLog, or None (reported) when it cannot be read.

    Every key is mapped or kept under `extra` and named in `unmapped` (and in `problems`). `answer` is read as the
    ground truth in annotation layouts (HF rows, the paper's, "Hop N") and as the model's answer in SuperLens
    logs, or when a ground-truth key is also present."""
    if isinstance(entry, str):
        entry = _key_lines(entry)
    if isinstance(entry, dict) and entry.get("format") == FORMAT:
        try:
            return SGLog.model_validate(entry)  # our own export: lossless
        except ValidationError as err:
            note_problem(
                problems, f"{where}: marked {FORMAT} but not valid ({err.errors()[0].get('msg')}); read tolerantly"
            )
    if not isinstance(entry, dict):
        note_problem(problems, f"{where}: not a JSON object ({type(entry).__name__})")
        return None
    keys = {squash(k): (k, v) for k, v in entry.items()}
    e = _Entry(keys, where, problems, used={k for k in K.IGNORED if k in keys})
    iid = _text(e.pick(K.ID)[1])
    if not iid:
        e.problem("no id")
        return None
    e.where = f"{where} ({iid})"
    return _read_entry(e, iid)


def _read_entry(e: _Entry, iid: str) -> SGLog:
    """The SGLog of an entry with an id; the keys are picked in this order (a key is mapped at most once)."""
    layout = _layout(e.keys)
    question = _text(e.pick(K.QUESTION)[1])
    ground_truth, answer = _answers(e, layout)
    has_acc, acc = e.pick(K.ACCURACY)
    labels = _entry_labels(e)
    hops, hops_given = _entry_hops(e, question, labels)
    decision, need = _entry_decision(e, hops, hops_given)
    has_obj, obj_raw = e.pick(K.OBJECT)
    hop_count = labels.get("hops")
    if isinstance(hop_count, int) and hops and hop_count != len(hops):
        e.problem(f"hops = {hop_count} but {len(hops)} sub-question(s) are given")
    extra = _entry_extra(e)
    return SGLog(
        id=iid,
        question=question,
        ground_truth=ground_truth,
        answer=answer,
        accuracy=_bool(acc) if has_acc else None,
        labels=labels,
        need_retrieval=need,
        tool_decision=decision,
        detected_object=_object(obj_raw) if has_obj else None,
        hops=hops,
        source=layout,
        extra=extra,
        unmapped=e.unmapped,
    )


def _answers(e: _Entry, layout: Layout) -> tuple[str | None, str | None]:
    """(ground truth, the model's answer); a bare `answer` is the ground truth unless the layout or a ground-truth
    key says it is the model's."""
    has_gt, gt = e.pick(K.GT)
    has_pred, pred = e.pick(K.PRED)
    if "answer" in e.keys:
        answer = e.keys["answer"][1]
        if not has_gt and layout != "superlens":
            has_gt, gt = True, answer
            e.used.add("answer")
        elif not has_pred:
            has_pred, pred = True, answer
            e.used.add("answer")
    return (_text(gt) if has_gt and gt is not None else None, _text(pred) if has_pred and pred is not None else None)


def _entry_labels(e: _Entry) -> dict[str, Any]:
    """The dataset labels: a `labels` dict, then the label columns (category, domain, ...); `category` as a list."""
    labels: dict[str, Any] = {}
    if "labels" in e.keys and isinstance(e.keys["labels"][1], dict):
        e.used.add("labels")
        labels.update(e.keys["labels"][1])
    for k, name in K.LABELS.items():
        if k in e.keys and k not in e.used:
            e.used.add(k)
            labels[name] = e.keys[k][1]
    if isinstance(labels.get("category"), str):
        labels["category"] = [labels["category"]]
    return labels


def _entry_hops(e: _Entry, question: str, labels: dict[str, Any]) -> tuple[list[SGHop], bool]:
    """(the hops, whether the entry gives a hop list): a list (HF `sub_questions`, the paper's, ours), "Hop N"
    keys, or one hop's fields on the entry itself."""
    raw_hops = _raw_hops(e, labels)
    hops: list[SGHop] = []
    for i, h in enumerate(raw_hops or []):
        hop = _hop_from(h, question, f"{e.where} hop {i + 1}", e.problems, e.unmapped, f"hop {i + 1}")
        if hop is None:
            e.problem(f"hop {i + 1} unreadable ({type(h).__name__}); kept under extra.unreadable_hops")
            e.unreadable_hops.append(h)
        else:
            hops.append(hop)
    if not hops:
        flat = _flat_hop(e, question)
        if flat is not None:
            hops.append(flat)
    return hops, raw_hops is not None


def _raw_hops(e: _Entry, labels: dict[str, Any]) -> list[Any] | None:
    """The entry's hop list as given (None when it has none); a numeric `hops` is the annotated count (a label)."""
    for k in K.HOPS:
        if k not in e.keys or k in e.used:
            continue
        val = _loads(e.keys[k][1])
        if k == "hops" and (isinstance(val, int) or (isinstance(val, str) and val.strip().isdigit())):
            e.used.add(k)
            labels["hops"] = int(val)  # the annotated hop count, not a list
        elif isinstance(val, (list, dict)) or val is None:
            e.used.add(k)
            return [val] if isinstance(val, dict) else (val or [])
        else:
            e.problem(f"{e.keys[k][0]} is a {type(val).__name__}, not a list of hops")
    numbered = sorted(((int(m.group(1)), k) for k in e.keys if (m := K.HOP_N.match(k))), key=lambda x: x[0])
    if not numbered:
        return None
    e.used.update(k for _, k in numbered)
    return [e.keys[k][1] for _, k in numbered]


def _flat_hop(e: _Entry, question: str) -> SGHop | None:
    """The paper's layout with one hop's fields on the entry itself."""
    flat_keys = [k for names in K.HOP_KEYS[1:] for k in names if k in e.keys and k not in e.used and k not in K.TOOLS]
    if not flat_keys:
        return None
    flat = {e.keys[k][0]: e.keys[k][1] for k in flat_keys}
    for k in ("subquestion", "subquery"):
        if k in e.keys:
            flat[e.keys[k][0]] = e.keys[k][1]
            e.used.add(k)
    hop = _hop_from(flat, question, f"{e.where} hop 1", e.problems, [])
    if hop is not None:
        e.used.update(flat_keys)
    return hop


def _entry_decision(e: _Entry, hops: list[SGHop], hops_given: bool) -> tuple[list[str], bool | None]:
    """(the search tools decided, in order, less those declined; need_retrieval, from the tools when not given)."""
    has_tools, tools_raw = e.pick(K.TOOLS)
    decided: list[str] = []
    declined: list[str] = []
    if has_tools:
        if isinstance(tools_raw, str):
            decided, declined = _decisions(tools_raw)
        else:
            decided = [n for n, _ in tools_named_in(tools_raw)]
    has_need, need_raw = e.pick(K.NEED)
    need = _bool(need_raw) if has_need else None
    if has_need and need is None and need_raw is not None:
        e.problem(f"need_retrieval {need_raw!r} unreadable; taken from the tools")
    hop_tools = [h.tool_used for h in hops if h.uses_tool]
    decision = list(dict.fromkeys(t for t in [*decided, *hop_tools] if t != NONE and t not in declined))
    if need is None and (has_tools or hops_given or hops):
        need = bool(decision)
    return decision, need


def _entry_extra(e: _Entry) -> dict[str, Any]:
    """The entry's `extra` dict plus every key not mapped (each reported), and the hops that could not be read."""
    extra: dict[str, Any] = {}
    if "extra" in e.keys and isinstance(e.keys["extra"][1], dict) and "extra" not in e.used:
        e.used.add("extra")
        extra.update(e.keys["extra"][1])
    extra.update(_unmapped_keys(e.keys, e.used, e.unmapped))
    if e.unreadable_hops:
        extra["unreadable_hops"] = e.unreadable_hops
    for u in e.unmapped:
        hop_name, dot, key = u.partition(".")
        e.problem(
            f"{hop_name} key {key!r} not mapped; kept in the hop"
            if dot and hop_name.startswith("hop ")
            else f"key {u!r} not mapped; kept under extra"
        )
    return extra


def _unmapped_keys(
    keys: dict[str, tuple[str, Any]],
    used: set[str],
    unmapped: list[str],
    prefix: str = "",
    unreported: Iterable[str] = (),
) -> dict[str, Any]:
    """The keys not used, under their original names; each named in `unmapped` (after `prefix`) unless
    `unreported`."""
    out: dict[str, Any] = {}
    for k, (orig, x) in keys.items():
        if k not in used:
            out[orig] = x
            if k not in unreported:
                unmapped.append(f"{prefix}{orig}")
    return out


MAX_LOG_BYTES = 64 << 20  # a whole SuperGlasses annotation set (2,422 questions) is a few MB of JSON


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(value: Any) -> Any:
    """`value` with every string made valid Unicode: a lone surrogate (JSON allows `\\ud800`) cannot be written as
    UTF-8, so an export of it would fail with nothing written; each is replaced by U+FFFD, in keys as well."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    return value


def _entries(path: Path, problems: list[str] | None) -> list[tuple[str, Any]]:
    """The entries of a log file, each with where it is; the file is looked at before it is read."""
    if path.suffix.lower() == ".parquet":  # the dataset's queries file; picture bytes are not log data
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        cols = [f.name for f in schema if not (f.name == "image" and not pa.types.is_string(f.type))]
        return [(f"row {i}", r) for i, r in enumerate(pq.read_table(path, columns=cols).to_pylist())]
    try:
        text = read_bounded(path, MAX_LOG_BYTES).decode("utf-8-sig", "replace")
    except OSError as e:
        raise ValueError(f"{path}: not read: {e}") from None
    try:
        data = valid_text(json.loads(text))
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to read") from None
    except json.JSONDecodeError:
        rows, bad = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {n}", valid_text(json.loads(line))))
            except json.JSONDecodeError as e:
                bad.append(f"line {n}: bad JSON ({e.msg})")
            except RecursionError:
                bad.append(f"line {n}: nested too deeply to read")
        if not rows and text.strip():  # a plain-text SuperLens log: "Key: value" lines, blank line between entries
            return [(f"block {i}", _key_lines(b)) for i, b in enumerate(re.split(r"\n\s*\n", text)) if b.strip()]
        for msg in bad:
            note_problem(problems, msg)
        return rows
    if isinstance(data, dict):
        for key in ("logs", "data", "items", "records", "samples", "results", "rows"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            if not any(squash(k) in K.ID for k in data) and data and all(isinstance(v, dict) for v in data.values()):
                return [(f"key {k!r}", {"id": k, **v}) for k, v in data.items()]  # {id: entry, ...}
            data = [data]
    if not isinstance(data, list):
        note_problem(problems, f"{path.name}: top level is a {type(data).__name__}, not a list of logs")
        return []
    return [(f"entry {i}", e) for i, e in enumerate(data)]


def import_logs(path: str | Path, problems: list[str] | None = None) -> list[SGLog]:
    """Read logs in any known layout from a JSON list (or {"logs": [...]}, or one object), JSON lines, a text file
    of "Key: value" blocks, or a SuperGlasses queries parquet file. Entries that cannot be read and keys that
    cannot be mapped are reported (appended to `problems`); a missing file raises FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no log file at {path}")
    out = []
    for where, entry in _entries(path, problems):
        try:
            lg = parse_log(entry, where, problems)
        except RecursionError:  # an entry nested too deeply for the mapping: that entry only
            note_problem(problems, f"{where}: nested too deeply to read")
            continue
        if lg is not None:
            out.append(lg)
    return out
