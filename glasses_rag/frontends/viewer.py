"""Static HTML viewer for one run folder:
`python -m glasses_rag.frontends.viewer <run_dir> [--out file.html] [--data PATH] [--image-root DIR]`.

Writes ONE self-contained HTML file (inline CSS and JS, images as base64 JPEG data URLs, no external
requests): the run header (run.json, report.json), then every conversation and turn with the image
and the detected boxes, the question, the labels, each step (collapsible), the answer, the ground truth
and the score. Filters (score, tool, errors, free text) run in the page. The page is rendered from Jinja2 templates
with autoescape (glasses_rag/frontends/pages.py): traces hold web text, which may contain HTML or script; the page's
Content-Security-Policy lets only its own script (pinned by hash) run.

Traces hold no images: they come from `images` (session_id -> PIL image) or from the dataset named by
`data` (default: run.json's "data"). A missing image becomes a placeholder. A run folder is data someone may have
handed over: what may be read is never widened by it (an image path is read only inside the dataset's folder or the
`image_root` the viewer itself is given, `--image-root` or GLASSES_IMAGE_ROOT, never the run's own recorded
`--image-root`), and the work is bounded: trace files are stat'ed before they are read and one over 32 MB is
skipped unread, a page shows at most MAX_PAGE_TURNS turns and MAX_PAGE_TRACE_BYTES of trace files (the rest
counted), and what it embeds of the stored requests is capped (glasses_rag/frontends/viewer_parts.py). Damaged trace
files are listed as skipped; nothing here raises on bad input except a missing run folder.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from glasses_rag.frontends import viewer_parts as vp
from glasses_rag.frontends.pages import render_page
from glasses_rag.frontends.reading import read_json, read_trace, trace_files
from glasses_rag.frontends.viewer_header import header
from glasses_rag.frontends.viewer_turns import SCORES, Thumb, score_of, turn_tools, turn_view
from traces.schema import TurnTrace

THUMB_SIDE = 480
MAX_PAGE_TURNS = 10_000  # turns one page shows; a larger run's page shows its first ones and counts the rest
MAX_PAGE_TRACE_BYTES = 64 << 20  # trace files one page reads (a 2,000-turn model run writes ~50 MB)


# ------------------------------------------------------------------------------------------
# Reading the run folder
# ------------------------------------------------------------------------------------------


def load_traces(run_dir: Path) -> tuple[list[TurnTrace], list[tuple[str, str]]]:
    """Every readable trace (ordered by session, then turn) and (file name, reason) for each skipped one."""
    traces, skipped, _ = _page_traces(Path(run_dir), limit=None)
    return traces, skipped


def _page_traces(run_dir: Path, limit: int | None) -> tuple[list[TurnTrace], list[tuple[str, str]], str | None]:
    """The traces a page shows, ordered by session (first seen) then turn; the skipped files with the reason; what
    was left out past the page's limits (None when nothing was)."""
    traces: list[TurnTrace] = []
    skipped: list[tuple[str, str]] = []
    files = trace_files(run_dir)
    read_bytes, cut = 0, None
    for i, p in enumerate(files):
        if limit is not None and (len(traces) >= limit or read_bytes > MAX_PAGE_TRACE_BYTES):
            cut = (
                f"{len(files) - i:,} of {len(files):,} trace file(s) not shown: a page shows at most {limit:,} "
                f"turns and {MAX_PAGE_TRACE_BYTES >> 20} MB of traces (python -m glasses_rag.frontends.diff "
                "compares whole runs; the JSON traces hold everything)"
            )
            break
        try:
            size = os.stat(p).st_size
            traces.append(read_trace(p))  # over 32 MB or not a regular file: skipped unread (reading.py)
            read_bytes += size
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            msg = str(e).strip().splitlines()
            skipped.append((p.name, f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]))
    return _by_conversation(traces), skipped, cut


def _by_conversation(traces: list[TurnTrace]) -> list[TurnTrace]:
    sessions: dict[str, list[TurnTrace]] = {}
    for t in traces:
        sessions.setdefault(t.session_id, []).append(t)
    return [t for turns in sessions.values() for t in sorted(turns, key=lambda t: t.turn_index)]


def _split_from_argv(argv: Any, option: str = "--split") -> str | None:
    if isinstance(argv, list):
        for i, a in enumerate(argv):
            if a == option and i + 1 < len(argv):
                return str(argv[i + 1])
            if isinstance(a, str) and a.startswith(f"{option}="):
                return a.split("=", 1)[1]
    return None


def _conversations(
    data: str, split: str | None, benchmark: str | None, image_root: str | None = None, modules: Sequence[str] = ()
) -> Iterable[Any]:
    """The run's conversations as its benchmark reads them (one named by the run, else the one whose layout the
    data is in, else CRAG-MM). Image paths are confined to the dataset's folder and `image_root` (else
    GLASSES_IMAGE_ROOT)."""
    from glasses_rag.evaluation import DataRequest
    from glasses_rag.harness.benchmarks import DEFAULT, benchmark_registry

    registry = benchmark_registry(modules)
    spec = registry.get(benchmark) if benchmark else None
    spec = spec or next((b for b in registry.values() if b.recognizes and b.recognizes(data)), registry[DEFAULT])
    return spec.load(data, DataRequest(data=data, split=split, image_root=image_root))


def _images(
    data: str,
    want: set[str],
    split: str | None,
    benchmark: str | None,
    image_root: str | None,
    notes: list[str],
    modules: Sequence[str] = (),
) -> Iterator[tuple[str, Any]]:
    """(session_id, PIL image) from the dataset, one at a time, reading rows only until every wanted one is found;
    what went wrong is added to `notes`."""
    found: set[str] = set()
    if not want:
        return
    try:
        from glasses_rag.crag_mm.dataset import decode_image

        for conv in _conversations(data, split, benchmark, image_root, modules):
            if conv.session_id in want and conv.session_id not in found:
                found.add(conv.session_id)
                yield conv.session_id, decode_image(conv.image)[0]
                if len(found) == len(want):
                    break
    except Exception as e:  # noqa: BLE001 - a missing or unreadable dataset only costs the images
        notes.append(f"images could not be read from {data!r}: {type(e).__name__}: {e}"[:400])
        return
    if len(want) > len(found):
        notes.append(f"{len(want) - len(found)} conversation(s) not found in {data!r}")


def load_images(
    data: str,
    session_ids: Iterable[str],
    split: str | None = None,
    benchmark: str | None = None,
    image_root: str | None = None,
    modules: Sequence[str] = (),
) -> tuple[dict[str, Any], str | None]:
    """session_id -> PIL image from the dataset, reading rows only until every wanted session is found."""
    notes: list[str] = []
    found = dict(_images(data, set(session_ids), split, benchmark, image_root, notes, modules))
    return found, (notes[0] if notes else None)


# ------------------------------------------------------------------------------------------
# Images
# ------------------------------------------------------------------------------------------


def make_thumb(img: Any, agent_size: tuple[int, int] | None = None) -> tuple[Thumb | None, str | None]:
    """A thumbnail of the conversation's image; boxes are drawn relative to `agent_size` (the trace's
    `image.size`: the frame the agent's boxes are in, which always spans the whole image)."""
    if img is None:
        return None, None
    try:
        img.load()
        w, h_ = img.size
        if w < 1 or h_ < 1:
            return None, f"image has no pixels ({w}x{h_})"
        t = img.copy()
        if t.mode != "RGB":
            t = t.convert("RGB")
        t.thumbnail((THUMB_SIDE, THUMB_SIDE))
        buf = io.BytesIO()
        t.save(buf, format="JPEG", quality=82)
        url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        aw, ah = agent_size if agent_size and min(agent_size) > 0 else (w, h_)
        return Thumb(url, t.width, t.height, aw, ah), None
    except Exception as e:  # noqa: BLE001 - truncated bytes, odd modes, decompression bombs
        return None, f"image could not be rendered: {type(e).__name__}: {e}"[:300]


def _run_thumbs(
    run: dict[str, Any],
    sessions: dict[str, list[TurnTrace]],
    images: dict[str, Any] | None,
    data: str | None,
    image_root: str | None,
    problems: list[str],
    modules: Sequence[str] = (),
) -> dict[str, tuple[Thumb | None, str | None]]:
    """session_id -> (thumbnail, why there is none): from the images given, then from `data` or run.json's "data"
    (read as the run's benchmark), each image made a thumbnail as soon as it is read (one image in memory at a
    time). `image_root` is the viewer's own (its --image-root; None: GLASSES_IMAGE_ROOT), never the run's."""

    def agent_size(sid: str) -> tuple[int, int] | None:
        return next((t.image.size for t in sessions[sid] if t.image.size), None)

    given = {sid: img for sid, img in (images or {}).items() if img is not None and sid in sessions}
    thumbs = {sid: make_thumb(img, agent_size(sid)) for sid, img in given.items()}
    need = {s for s, turns in sessions.items() if s not in given and any(t.has_image for t in turns)}
    # images given and no data: the caller chose the images; otherwise read `data` or run.json's "data"
    source = data if data is not None else (run.get("data") if images is None else None)
    if need and source:
        benchmark = run.get("benchmark") if isinstance(run.get("benchmark"), str) else None
        split = _split_from_argv(run.get("argv"))
        for sid, img in _images(str(source), need, split, benchmark, image_root, problems, modules):
            thumbs[sid] = make_thumb(img, agent_size(sid))
    elif need and images is None:
        problems.append("no dataset given (run.json has no 'data'; pass --data): images are shown as placeholders")
    return thumbs


# ------------------------------------------------------------------------------------------
# The page
# ------------------------------------------------------------------------------------------


def _counted_turns(report: dict[str, Any] | None) -> dict[tuple[str, int], dict[str, Any]]:
    """(session_id, turn_index) -> the report's record of that turn."""
    counted: dict[tuple[str, int], dict[str, Any]] = {}
    if report is not None and isinstance(report.get("turns"), list):
        for rec in report["turns"]:
            if isinstance(rec, dict) and isinstance(rec.get("turn_index"), int):
                counted[(str(rec.get("session_id")), rec["turn_index"])] = rec
    return counted


def _conversation(
    n: int,
    sid: str,
    turns: list[TurnTrace],
    thumb: tuple[Thumb | None, str | None],
    context: dict[str, Any],
) -> tuple[str | None, dict[str, Any]]:
    """(the CSS rule of the conversation's thumbnail, or None without one; the conversation's data). The photo is
    drawn with the first turn, and again only with a turn that has boxes of its own to draw on it."""
    image, why = thumb
    if image is None and why is None and any(t.has_image for t in turns):
        why = "image not found for this conversation"
    cls = f"img-{n}"
    counted, run_dir, kg, budget = context["counted"], context["run_dir"], context["kg"], context["budget"]
    views = [
        turn_view(t, (image, cls, why, i == 0), counted.get((t.session_id, t.turn_index)), run_dir, kg, budget)
        for i, t in enumerate(turns)
    ]
    style = f".{cls}{{background-image:url({image.data_url})}}" if image is not None else None
    return style, {"n": n, "sid": sid, "turns": views}


def _read_json_file(run_dir: Path, name: str, problems: list[str]) -> dict[str, Any] | None:
    value, err = read_json(run_dir / name)
    if err:
        problems.append(f"{name} unreadable: {err}")
    return value if isinstance(value, dict) else None


def _run_benchmark(run_dir: Path, run: dict[str, Any], problems: list[str], modules: Sequence[str]) -> Any:
    """The benchmark the run was made by (glasses_rag.evaluation.Benchmark: how it shows its report), or None when
    run.json names one not known here (said on the page)."""
    from glasses_rag.harness.benchmarks import benchmark_for_run, benchmark_registry

    spec = benchmark_for_run(run, run_dir, benchmark_registry(modules))
    if spec is None:
        problems.append(
            f"run.json names the benchmark {run.get('benchmark')!r}, which is not known here: "
            "--benchmark-module MODULE adds it (its report is not shown)"
        )
    return spec


def build_html(
    run_dir: Path,
    images: dict[str, Any] | None = None,
    data: str | None = None,
    image_root: str | None = None,
    modules: Sequence[str] = (),
) -> str:
    """The whole page as a string (see `render_run`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder not found: {run_dir}")
    problems: list[str] = []
    run = _read_json_file(run_dir, "run.json", problems) or {}
    spec = _run_benchmark(run_dir, run, problems, modules)
    own = spec.viewer if spec is not None and spec.viewer.layout != "eval-report" else None
    report = _read_json_file(run_dir, "report.json", problems)
    own_report = _read_json_file(run_dir, own.file, problems) if own is not None else None
    traces, skipped, cut = _page_traces(run_dir, MAX_PAGE_TURNS)
    problems += [cut] if cut else []
    sessions: dict[str, list[TurnTrace]] = {}
    for t in traces:
        sessions.setdefault(t.session_id, []).append(t)
    thumbs = _run_thumbs(run, sessions, images, data, image_root, problems, modules)
    kg = vp.KgImages.for_run(run)
    context = {"counted": _counted_turns(report), "run_dir": run_dir, "kg": kg, "budget": vp.RequestBudget()}
    styles, conversations = [], []
    for n, (sid, turns) in enumerate(sessions.items()):
        style, conversation = _conversation(n, sid, turns, thumbs.get(sid, (None, None)), context)
        styles += [style] if style is not None else []
        conversations.append(conversation)
    counts = Counter(score_of(t) for t in traces)
    return render_page(
        "viewer.html.j2",
        title=f"Run {run.get('run_id') or run_dir.name}",
        script="viewer.js",
        styles=["viewer.css"],
        style="\n".join([*styles, kg.css()]),
        header=header(
            run_dir,
            run,
            report,
            (own, own_report) if own is not None else None,
            traces,
            len(sessions),
            problems,
            skipped,
        ),
        controls={
            "scores": SCORES,
            "counts": counts,
            "tools": sorted({x for t in traces for x in turn_tools(t)}),
            "explain": vp.chips_explanation(None if own is not None else report, counts),
        },
        conversations=conversations,
    )


def _write_page(out: Path, page: str) -> Path:
    from traces.store import write_atomic

    # a lone surrogate read from run.json or a trace ("\ud800") cannot be UTF-8: written as "?", not a crash
    write_atomic(out, page.encode("utf-8", "replace"))  # with the user's umask, no wider
    return out


def render_run(
    run_dir: Path,
    out: Path | None = None,
    images: dict[str, Any] | None = None,
    data: str | None = None,
    image_root: str | None = None,
    modules: Sequence[str] = (),
) -> Path:
    """Writes the run's HTML page (default `<run_dir>/index.html`) and returns its path.

    Args:
        images: session_id -> PIL image (takes precedence).
        data: dataset path or cached name to read the images from (default: run.json's "data").
        image_root: a folder image paths may also point into (default: GLASSES_IMAGE_ROOT); never taken from the
            run folder.
        modules: modules defining benchmarks of your own (--benchmark-module): a run of one is read as that
            benchmark reads its data and shows its report.

    Example: `render_run(Path("traces/runs/task1-x"))` -> traces/runs/task1-x/index.html
    """
    run_dir = Path(run_dir)
    page = build_html(run_dir, images=images, data=data, image_root=image_root, modules=modules)
    return _write_page(Path(out) if out is not None else run_dir / "index.html", page)


def render_diff_page(diff: Any, out: Path, only: list[str] | None = None) -> Path:
    """The run diff (glasses_rag.frontends.run_diff.RunDiff) as one page in this viewer's style; controls start at
    `only`[0]."""
    from glasses_rag.frontends.diff_page import diff_page

    return _write_page(Path(out), diff_page(diff, Path(out), only))


def _runs_inside(folder: Path) -> Any:
    """The diff of the runs in `folder` when it holds no trace itself but two runs or more (a presets folder)."""
    from glasses_rag.frontends.run_diff import diff_runs, find_runs

    if any(folder.glob("*__*.json")) or len(find_runs(folder)) < 2:
        return None
    return diff_runs([folder])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m glasses_rag.frontends.viewer",
        description="Render a run folder of turn traces as one self-contained HTML page.",
    )
    p.add_argument("run_dir", type=Path, help="run folder (holds <session>__<turn>.json, run.json, report.json)")
    p.add_argument("--out", type=Path, default=None, help="HTML file to write (default: <run_dir>/index.html)")
    p.add_argument(
        "--data",
        default=None,
        help="dataset to read the images from (default: run.json's 'data'); a folder, file or cached name",
    )
    p.add_argument(
        "--image-root",
        default=None,
        help="a folder the dataset's image paths may also point into (default: GLASSES_IMAGE_ROOT); a run "
        "folder's own recorded --image-root is never used",
    )
    p.add_argument("--no-images", action="store_true", help="do not read the dataset; show placeholders")
    p.add_argument(
        "--benchmark-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module defining a benchmark of your own (as python -m graph.run's): its runs' data and report",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.run_dir.is_dir():
        print(f"error: run folder not found: {args.run_dir}", file=sys.stderr)
        return 2
    images: dict[str, Any] | None = {} if args.no_images else None
    diff = _runs_inside(args.run_dir)
    if diff is not None:  # a folder of runs (benchmarks.presets): each run's page, and their diff linking them
        for r in diff.runs:
            render_run(
                Path(r.path), images=images, data=args.data, image_root=args.image_root, modules=args.benchmark_module
            )
        out = render_diff_page(diff, args.out or args.run_dir / "index.html")
        print(
            f"{out}: the diff of the {len(diff.runs)} runs in this folder (as python -m glasses_rag.frontends.diff "
            f"{args.run_dir} --html {out} writes it), linking each run's own page (<run>/index.html)"
        )
        return 0
    out = render_run(
        args.run_dir, args.out, images=images, data=args.data, image_root=args.image_root, modules=args.benchmark_module
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
