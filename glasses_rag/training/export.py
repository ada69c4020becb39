"""Training examples that are the inference prompt: one example per decision step of a turn, rendered by the model
policy's own prompt code, in TRL's conversational prompt-completion format.

    python -m glasses_rag.training.export --run traces/runs/<run_id> --out sft.jsonl
        [--wrong idk|drop|keep] [--keep all]
    python -m glasses_rag.training.export --superglasses annotations.jsonl --out sft.jsonl

Each line (TRL docs, "Dataset formats and types": conversational prompt-completion; SFTTrainer then computes the
loss on the completion only):

    {"prompt": [<the messages the model policy sends for this decision: system text with the tools and the reply
                 format, the turn, each earlier call and its result as the model saw them, the decide instruction>],
     "completion": [{"role": "assistant", "content": <the decision, as the model should write it>}],
     "images": [<path of the photo as the model is sent it>]  (only with --images: TRL's vision format, the user
                                      turn then holds {"type": "image"} where the photo goes; the file, in
                                      <out>.images/, holds the JPEG bytes of the request's data URL)
     "tools": [<function specs>]                   (only with --mode native)
     "meta": {"session_id", "interaction_id", "step", "label"}}

The prompt is what `glasses_rag.policies.model.policy.ModelPolicy.decide_messages` renders from the view the policy had
at that step, rebuilt from the trace (the calls' recorded state updates, typed again; evidence as the prompt shows it,
not the trace's one-line summaries). The completion is the decision in the mode the model will run: `structured`
(default) is the compact JSON the decision schema's grammar lets the model write (keys in schema order, no free
whitespace but the one space after ':' and ',' that xgrammar's compact JSON writes), each tool call one decision (calls
the teacher ran together become consecutive decisions, each
seeing the previous one's result), the last decision the answer itself; `native` is an assistant tool call (the
`final_answer` function to answer).

Labels (from the run's scores): a turn judged correct keeps the teacher's answer; a turn the teacher answered
"I don't know" is an abstention example; a turn judged wrong becomes an abstention example (`--wrong idk`,
default), is dropped (`drop`) or kept as answered (`keep`). `--keep all` ignores the scores (an unscored run).
Calls the registry refused (an unknown tool, bad arguments) are left out with their results.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from glasses_rag.core.files import write_atomic
from glasses_rag.policies.model.policy import ModelPolicy
from glasses_rag.policies.model.replies import ANSWER_CHARS
from glasses_rag.policies.model.verify import ModelVerifier
from glasses_rag.policies.protocol import IDK, PolicyView, StepSummary
from glasses_rag.policies.self_check import lexical_support
from glasses_rag.superglasses.logs import IMAGE, TEXT, SGLog, import_logs, read_run
from glasses_rag.training.examples import (  # noqa: F401 - the export's API, re-exported
    COUNTERFACTUALS,
    NO_IMAGE,
    SUPERGLASSES_TASK,
    Counterfactual,
    Example,
    ExportMode,
    ExportOptions,
    Wrong,
    answer_completion,
    call_completion,
    dispatched,
    examples_from_trace,
    fit_text,
    label,
    not_offered,
    photo_of,
    policy_for,
    render,
    summary_of,
    task_tools,
    tool_profile,
    turn_view,
)
from glasses_rag.training.photos import sent_photos, with_photo_files
from tools import default_registry
from tools.base import HistoryTurn, Hit
from tools.image_search import NO_MATCH
from tools.web_search import NO_PAGES
from traces.schema import ToolCallEvent, TurnTrace


def examples_from_run(
    traces: list[TurnTrace],
    opts: ExportOptions,
    images: dict[str, str] | None = None,
    left_out: dict[str, int] | None = None,
) -> list[Example]:
    """Every kept turn's examples; a turn's history is its conversation's earlier turns as the agent answered. A
    turn that calls a tool the prompt does not offer is left out whole, counted per tool in `left_out`."""
    policy = policy_for(opts)
    by_session: dict[str, list[TurnTrace]] = {}
    for t in traces:
        by_session.setdefault(t.session_id, []).append(t)
    donors = image_results(traces)
    out = []
    for sid, turns in by_session.items():
        turns.sort(key=lambda t: t.turn_index)
        for i, t in enumerate(turns):
            history = [HistoryTurn(question=p.question, answer=p.answer, entity=p.entity) for p in turns[:i]]
            unoffered = not_offered(t, opts)
            if unoffered:
                if left_out is not None:
                    for name in unoffered:
                        left_out[name] = left_out.get(name, 0) + 1
                continue
            image = (images or {}).get(sid)
            out += examples_from_trace(t, history, policy, opts, image)
            out += counterfactual_examples(t, history, policy, opts, donors, image)
            if opts.self_check:
                out += self_check_examples(t, history, policy, opts, image)
    return out


# ---- counterfactual abstentions and self-checks ---------------------------------------------------------------


def _unit(*parts: str) -> float:
    """A number in [0, 1) fixed by `parts` (which turns get a counterfactual, and which donor: reproducible)."""
    return int(hashlib.sha256("|".join(parts).encode()).hexdigest()[:12], 16) / 16**12


def _top_entity(step: StepSummary) -> str | None:
    hits = [h for h in step.update.get("evidence") or [] if isinstance(h, Hit)]
    return (hits[0].entity_name or hits[0].url) if hits else None


def image_results(traces: list[TurnTrace]) -> list[tuple[str, StepSummary]]:
    """Every image search of the run that found something, with its session: the donors of `swap`."""
    out = []
    for t in traces:
        for ev in dispatched(t):
            step = summary_of(ev)
            if ev.tool == "image_search" and not step.error and _top_entity(step):
                out.append((t.session_id, step))
    return out


def answered(trace: TurnTrace, opts: ExportOptions) -> str | None:
    """The teacher's answer when the export teaches it (a turn whose label is an answer), else None."""
    target = label(trace, opts)
    return target[0] if target and target[0] != IDK else None


def counterfactuals(
    trace: TurnTrace, opts: ExportOptions, donors: list[tuple[str, StepSummary]]
) -> list[tuple[str, list[StepSummary]]]:
    """(kind, the calls the model saw, the last one changed) for this turn's counterfactuals: `counterfactual`
    per answered turn (the fraction by a hash of the turn), kinds and donors picked by hashes too. A turn
    without a call a kind changes gets none of that kind."""
    answer = answered(trace, opts)
    if answer is None or opts.counterfactual <= 0:
        return []
    calls = [summary_of(ev) for ev in dispatched(trace)]
    made: dict[str, list[StepSummary]] = {}
    for kind in opts.counterfactual_kinds:
        tool = "web_search" if kind == "no-web" else "image_search"
        at = next((i for i, c in enumerate(calls) if c.tool == tool and not c.error), None)
        if at is None:
            continue
        if kind == "swap":
            own = _top_entity(calls[at])
            fits = [
                step
                for sid, step in donors
                if sid != trace.session_id
                and _top_entity(step) != own
                and lexical_support(answer, [h.text() for h in step.update["evidence"]])[0] < 0.5
            ]
            if not fits:
                continue
            donor = fits[int(_unit(trace.interaction_id, "donor") * len(fits))]
            changed = calls[at].model_copy(update={"update": donor.update, "summary": donor.summary})
        else:
            changed = calls[at].model_copy(
                update={"update": {"evidence": []}, "summary": NO_PAGES if kind == "no-web" else NO_MATCH}
            )
        made[kind] = [*calls[:at], changed]
    n = int(opts.counterfactual) + (_unit(trace.interaction_id, "count") < opts.counterfactual % 1)
    order = sorted(made, key=lambda k: _unit(trace.interaction_id, k))
    return [(k, made[k]) for k in order[:n]]


def counterfactual_examples(
    trace: TurnTrace,
    history: list[HistoryTurn],
    policy: ModelPolicy,
    opts: ExportOptions,
    donors: list[tuple[str, StepSummary]],
    image: str | None = None,
) -> list[Example]:
    """For each counterfactual of the turn: the decision after the changed call, "I don't know"; with
    `self_check`, also the verification of the teacher's answer against that evidence: not supported."""
    answer = answered(trace, opts)
    tools = task_tools(trace.task, opts)
    meta = {"session_id": trace.session_id, "interaction_id": trace.interaction_id, "task": trace.task}
    out = []
    for kind, done in counterfactuals(trace, opts, donors):
        view = turn_view(trace, history, tools, done, opts)
        out.append(
            render(
                view,
                policy,
                opts,
                answer_completion(IDK, 0.0, None, opts.mode),
                image,
                {**meta, "label": f"counterfactual-{kind}", "step": len(done)},
            )
        )
        if opts.self_check and answer is not None:
            out.append(
                render_check(
                    view,
                    policy,
                    opts,
                    answer,
                    False,
                    image,
                    {**meta, "label": f"check-counterfactual-{kind}", "step": len(done)},
                )
            )
    return out


def self_check_examples(
    trace: TurnTrace, history: list[HistoryTurn], policy: ModelPolicy, opts: ExportOptions, image: str | None = None
) -> list[Example]:
    """The verification request for the teacher's draft with all of the turn's evidence: supported when the turn
    was judged correct, not supported when judged wrong (an abstention is never verified: the graph skips it)."""
    if trace.error or trace.ended_by == "error" or trace.abstained or not trace.answer or trace.answer == IDK:
        return []
    if trace.score not in ("correct", "incorrect"):
        return []
    done = [summary_of(ev) for ev in dispatched(trace)]
    view = turn_view(trace, history, task_tools(trace.task, opts), done, opts)
    meta = {
        "session_id": trace.session_id,
        "interaction_id": trace.interaction_id,
        "task": trace.task,
        "label": f"check-{trace.score}",
        "step": len(done),
    }
    return [render_check(view, policy, opts, trace.answer, trace.score == "correct", image, meta)]


def check_completion(supported: bool) -> dict[str, Any]:
    """The verdict as the verification schema's grammar writes it (no verification questions: the short form a
    small model can afford; glasses_rag.policies.model.verify reads "supported" and "confidence")."""
    obj = {"verifications": [], "supported": supported, "confidence": 1.0 if supported else 0.0, "reason": ""}
    return {"role": "assistant", "content": json.dumps(obj)}


def render_check(
    view: PolicyView,
    policy: ModelPolicy,
    opts: ExportOptions,
    draft: str,
    supported: bool,
    image: str | None,
    meta: dict[str, Any],
) -> Example:
    """The verifier's own request (glasses_rag.policies.model.verify.ModelVerifier.cove_messages) for `draft`
    after `view`."""
    shown: Any = None
    if view.has_image:
        shown = photo_of(image) if opts.sees_images and image else NO_IMAGE
    prompt = ModelVerifier(policy).cove_messages(
        view, fit_text(draft, ANSWER_CHARS) or "", None if shown is NO_IMAGE and opts.sees_images else shown
    )
    images = None
    if opts.sees_images and image and view.has_image:
        prompt, images = sent_photos(prompt)  # the photo as the model is sent it (training.photos)
    return Example(
        prompt=prompt, completion=[check_completion(supported)], images=images, meta={**meta, "purpose": "verify"}
    )


# ---- from SuperGlasses annotations ------------------------------------------------------------------------------


def trace_from_superglasses(log: SGLog) -> TurnTrace | None:
    """An annotated trajectory as a scored turn trace (each search hop a call whose result is the annotated
    snippet, the ground truth the answer), so it renders exactly like a run's turn. None without a question or a
    ground truth."""
    if not log.question or not log.ground_truth:
        return None
    steps: list[Any] = []
    for i, hop in enumerate(log.hops):
        if hop.tool_used == IMAGE:
            steps.append(ToolCallEvent(index=i, tool="image_search", summary=hop.search_result_snippet or ""))
        elif hop.tool_used == TEXT:
            query = hop.search_keywords or hop.sub_question or log.question
            steps.append(
                ToolCallEvent(
                    index=i, tool="web_search", arguments={"query": query}, summary=hop.search_result_snippet or ""
                )
            )
    has_image = log.labels.get("use_image") is not False
    return TurnTrace(
        run_id="superglasses",
        task=SUPERGLASSES_TASK,
        session_id=log.id,
        interaction_id=log.id,
        turn_index=0,
        question=log.question,
        image={"size": (1, 1) if has_image else None},
        policy="annotation",
        search_backend="annotation",
        budget_s=10.0,
        max_steps=8,
        steps=steps,
        answer=log.ground_truth,
        abstained=False,
        confidence=1.0,
        ended_by="answer",
        latency_ms=0.0,
        score="correct",
    )


def save_images(
    data: str | Path, folder: str | Path, limit: int | None = None, problems: list[str] | None = None
) -> int:
    """Each conversation's photo of a dataset (any layout glasses_rag.crag_mm.dataset reads) as
    `folder/<session_id>.jpg`, for `--image-dir`; returns how many were written (rows without a usable image are
    skipped, and so are session ids that are not a plain file name, `../../x` or `/tmp/x`: said in `problems`).
    Each file is written beside its name and renamed onto it, never through a link."""
    import io

    from glasses_rag.core.paths import PathRefused, file_in
    from glasses_rag.crag_mm.dataset import decode_image, load_conversations

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for conv in load_conversations(data, limit=limit):
        image, _ = decode_image(conv.image)
        if image is None:
            continue
        try:
            path = file_in(out, conv.session_id, ".jpg", "a session id")
        except PathRefused as e:
            (problems if problems is not None else []).append(f"photo not written: {e}")
            continue
        buf = io.BytesIO()
        image.convert("RGB").save(buf, format="JPEG", quality=90)
        write_atomic(path, buf.getvalue(), sync=False)
        n += 1
    return n


def photos_in(folder: str | Path) -> dict[str, str]:
    """`{session id: path}` of the `<session_id>.jpg` files of `folder` that are inside it (a link to a file
    elsewhere is left out: glasses_rag.core.paths.confine)."""
    import os

    from glasses_rag.core.paths import confine

    root = [Path(os.path.realpath(folder))]
    found = {p.stem: confine(p, root, "photo")[0] for p in Path(folder).glob("*.jpg")}
    return {k: v for k, v in found.items() if v is not None}


# ---- CLI --------------------------------------------------------------------------------------------------------


def write_examples(examples: list[Example], out: str | Path) -> Path:
    """The examples as JSONL at `out`; their photos (the JPEG bytes each request sent) in `<out stem>.images/`."""
    path = Path(out)
    kept = [e.model_copy(update={"images": with_photo_files(e.images, path)}) if e.images else e for e in examples]
    write_atomic(path, "".join(e.line() + "\n" for e in kept))
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m glasses_rag.training.export", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="a run folder, traces/runs/<run_id>")
    src.add_argument("--superglasses", help="SuperGlasses annotations (any layout glasses_rag.superglasses.logs reads)")
    p.add_argument("--out", required=True, help="the JSONL file to write")
    p.add_argument(
        "--mode",
        choices=["structured", "native"],
        default="structured",
        help="how the model writes decisions: JSON (grammar-constrained, default) or native tool calls",
    )
    p.add_argument(
        "--wrong",
        choices=["idk", "drop", "keep"],
        default="idk",
        help='turns judged wrong: relabelled "I don\'t know" (default), dropped, or kept as answered',
    )
    p.add_argument("--no-abstentions", action="store_true", help="leave out the teacher's \"I don't know\" turns")
    p.add_argument(
        "--counterfactual",
        type=float,
        default=0.0,
        metavar="RATIO",
        help="counterfactual abstention examples per answered turn (evidence withheld or replaced, target "
        '"I don\'t know"; default 0: none, as validated)',
    )
    p.add_argument(
        "--counterfactual-kinds",
        default=",".join(COUNTERFACTUALS),
        help="comma-separated: " + "; ".join(f"{k}: {v}" for k, v in COUNTERFACTUALS.items()),
    )
    p.add_argument("--self-check", action="store_true", help="add the self-check (verification) examples")
    p.add_argument(
        "--keep",
        choices=["scored", "all"],
        default="scored",
        help="scored (default): label turns by their scores; all: every turn as the teacher answered",
    )
    p.add_argument("--tools", help="comma-separated tools the model is offered (default: the task's)")
    p.add_argument(
        "--budget",
        type=float,
        help="the turn budget the prompts state, in seconds (default: each "
        "trace's; give the budget the model will run with)",
    )
    p.add_argument(
        "--max-evidence",
        type=int,
        default=5,
        help="search results shown per call (as the model policy's max_evidence; default 5)",
    )
    p.add_argument("--evidence-chars", type=int, default=300, help="characters per result shown (default 300)")
    p.add_argument(
        "--images", action="store_true", help="a VLM: prompts show the photo (TRL's vision format); needs --image-dir"
    )
    p.add_argument("--image-dir", help="a folder of <session_id>.jpg photos")
    p.add_argument("--images-from", help="a dataset split folder whose photos are first written to --image-dir")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return export_command(args)
    except (FileNotFoundError, ValueError) as e:  # a run folder that is not there, an unknown tool: one line
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


def export_command(args: argparse.Namespace) -> int:
    """The command line's export: options checked, examples written, what was left out said."""
    opts = ExportOptions(
        mode=args.mode,
        wrong=args.wrong,
        keep_all=args.keep == "all",
        abstentions=not args.no_abstentions,
        sees_images=args.images,
        counterfactual=args.counterfactual,
        self_check=args.self_check,
        counterfactual_kinds=[k for k in args.counterfactual_kinds.split(",") if k],
        tools=[t for t in args.tools.split(",") if t] if args.tools else None,
        budget_s=args.budget,
        policy={"max_evidence": args.max_evidence, "evidence_chars": args.evidence_chars},
    )
    if opts.tools is not None:  # a misspelled name would give a prompt offering fewer tools, or none
        default_registry().check_names(opts.tools, None, tool_profile(opts.profile))
    problems: list[str] = []
    if args.run:
        traces = read_run(args.run, problems)
        if not opts.keep_all and traces and not any(t.score for t in traces):
            print(f"no turn of {args.run} is scored: rescore it first, or use --keep all", file=sys.stderr)
            return 2
        source = f"{len(traces)} turn(s)"
    else:
        logs = import_logs(args.superglasses, problems)
        traces = [t for t in (trace_from_superglasses(lg) for lg in logs) if t is not None]
        source = f"{len(logs)} annotated trajectories"
    images = None
    if args.images_from and args.image_dir:
        print(f"{save_images(args.images_from, args.image_dir, problems=problems)} photo(s) -> {args.image_dir}")
    if args.image_dir:
        images = photos_in(args.image_dir)
    left_out: dict[str, int] = {}
    examples = examples_from_run(traces, opts, images, left_out)
    if left_out:
        turns = sum(1 for t in traces if not_offered(t, opts))
        calls = ", ".join(f"{name} in {n}" for name, n in sorted(left_out.items()))
        problems.append(
            f"{turns} turn(s) left out: they call a tool the prompt does not offer ({calls}); --tools adds it"
        )
    for msg in problems:
        print(f"warning: {msg}", file=sys.stderr)
    path = write_examples(examples, args.out)
    print(f"{len(examples)} example(s) from {source} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
