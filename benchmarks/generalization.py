"""Does the default agent hold on data it was not written against? Demo, paraphrase and held-out figures side by side.

    python benchmarks/generalization.py                       # sets demo, demo-paraphrase, heldout; tasks 1 2 3
    python benchmarks/generalization.py --sets demo heldout --tasks 2 --json out.json
    python benchmarks/generalization.py --sweep               # threshold sweeps, on the tuning sets only

Each set is a content folder `glasses_rag/crag_mm/bundled/<name>/` (glasses_rag.crag_mm.content's format); a
missing folder is skipped, so the script runs before the paraphrase and held-out sets exist. For each set it renders the
dataset and its local search index under `data/<name>/` (the demo's under data/demo), then runs every task with

* the default agent (`build_agent(AgentConfig(...))`, the rule-based planner), and
* the same agent with retrieval tools removed (an allow-list without the tools tagged finds_entity or
  searches_web): the gap between the two is what retrieval adds (target: >= 0.20 truthfulness),

scores each turn with the rule judge (approximate, offline) and the official counting (glasses_rag.crag_mm.evaluate),
and prints per set and task: accuracy, missing, hallucination (turns judged wrong, before the multi-turn early stop;
target <= 10%), truthfulness (turn level) and the official score (mean over conversations), then the ablation delta and
the paraphrase delta (demo-paraphrase minus demo; target within 0.05).

Generalisation discipline: thresholds are chosen with --sweep on the tuning sets (TUNING_SETS: the demo and two
sets written to tune the planner, tuning-rewordings and tuning-extra); demo-paraphrase and heldout are only reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for k, v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}.items():
    os.environ.setdefault(k, v)

CONTENT = ROOT / "glasses_rag" / "crag_mm" / "bundled"
DEFAULT_SETS = ["demo", "demo-paraphrase", "heldout"]
TUNING_SETS = ["demo", "tuning-rewordings", "tuning-extra"]
TASK_SPLIT = {1: "single_turn", 2: "single_turn", 3: "multi_turn"}
RETRIEVAL_TAGS = ("finds_entity", "searches_web")
# RulePlannerConfig thresholds swept (task 2, tuning sets pooled); the defaults sit in each list
SWEEPS: dict[str, list[float]] = {
    "min_image_score": [0.7, 0.8, 0.88, 0.95],
    "image_tie_margin": [0.0, 0.01, 0.03],
    "min_attr_sim": [0.2, 0.27, 0.35, 0.5],
    "min_attr_sim_shared": [0.05, 0.15, 0.27],
    "min_attr_sim_no_overlap": [0.5, 0.65, 0.8],
    "min_web_sim": [0.25, 0.35, 0.45, 0.55],
    "min_free_text_coverage": [0.3, 0.6, 0.9],
}


def dataset_for(name: str, data_root: Path, content_root: Path = CONTENT) -> Any:
    """The rendered dataset of content folder `name` (built on first use, rebuilt when the content changes)."""
    from glasses_rag.crag_mm.builds import dataset_paths, ensure_dataset
    from glasses_rag.crag_mm.content import load_content
    from glasses_rag.crag_mm.demo import demo_paths

    paths = demo_paths() if name == "demo" and data_root == ROOT / "data" else dataset_paths(data_root / name)
    return ensure_dataset(load_content(content_root / name), paths)


def agent_config(index_dir: Path, allowed: list[str] | None = None, **over: Any) -> Any:
    from glasses_rag.retrieval.search import SearchConfig
    from graph.config import AgentConfig, ToolsConfig

    return AgentConfig(search=SearchConfig(index_dir=index_dir), tools=ToolsConfig(allowed=allowed), **over)


def without_retrieval(task: int) -> list[str]:
    """The task's allow-list less every tool tagged finds_entity or searches_web (chosen by tag, not by name)."""
    from graph.config import DEFAULT_TOOL_PROFILE
    from tools import default_registry

    offered = default_registry().for_task(task, profile=DEFAULT_TOOL_PROFILE)
    return [t.name for t in offered if not set(RETRIEVAL_TAGS) & t.tags]


def run_one(
    config: Any, paths: Any, task: int, limit: int | None, judge: Any, truncator: Any, run_id: str, out_dir: Path
) -> tuple[Any, list[Any]]:
    """Run one task of one dataset with one configuration; returns (EvalReport, traces' compact records)."""
    from glasses_rag.crag_mm.dataset import load_conversations
    from glasses_rag.crag_mm.evaluate import TurnRecord, evaluate, record_from_trace
    from glasses_rag.crag_mm.scoring import score_trace
    from glasses_rag.harness.runner import run_task
    from graph.build import build_agent
    from traces.store import TraceStore

    agent = build_agent(config, run_id=run_id, task=task)
    store = TraceStore(out_dir, run_id)
    records: list[TurnRecord] = []
    extra: list[dict] = []

    def keep(trace) -> None:
        records.append(record_from_trace(trace))
        extra.append(
            {
                "question": trace.question,
                "answer": trace.answer,
                "ground_truth": trace.ground_truth,
                "confidence": trace.confidence,
                "score": trace.score,
            }
        )

    convs = load_conversations(getattr(paths, TASK_SPLIT[task]), limit=limit)
    run_task(
        agent,
        convs,
        task,
        store,
        scorer=partial(score_trace, judge=judge, truncator=truncator),
        on_turn=keep,
        history_answer=truncator.truncate,
    )
    return evaluate(records, judge=judge, truncator=truncator), extra


def figures(report: Any) -> dict[str, float]:
    m = report.overall
    wrong = sum(1 for t in report.turns if t.raw_result == "incorrect")
    n = max(1, m.total)
    return {
        "n": m.total,
        "accuracy": m.accuracy,
        "missing": m.missing_rate,
        "hallucination": wrong / n,
        "truthfulness": m.truthfulness,
        "score": m.multi_turn_score,
    }


def print_table(rows: list[dict]) -> None:
    head = (
        f"{'set':16} {'task':>4} {'agent':13} {'n':>4} {'acc':>6} {'miss':>6} {'halluc':>6} {'truth':>6} {'score':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['set']:16} {r['task']:>4} {r['agent']:13} {r['n']:>4} {r['accuracy']:6.3f} {r['missing']:6.3f} "
            f"{r['hallucination']:6.3f} {r['truthfulness']:6.3f} {r['score']:6.3f}"
        )


def deltas(rows: list[dict]) -> list[dict]:
    """Ablation delta (default minus no retrieval) per set and task; paraphrase delta (paraphrase minus demo)."""
    by = {(r["set"], r["task"], r["agent"]): r for r in rows}
    out = []
    for (s, t, a), r in by.items():
        if a != "default":
            continue
        d: dict[str, Any] = {"set": s, "task": t}
        base = by.get((s, t, "no-retrieval"))
        if base:
            d["ablation_truthfulness"] = r["truthfulness"] - base["truthfulness"]
            d["ablation_score"] = r["score"] - base["score"]
        demo = by.get(("demo", t, "default"))
        if s == "demo-paraphrase" and demo:
            d["paraphrase_truthfulness"] = r["truthfulness"] - demo["truthfulness"]
            d["paraphrase_score"] = r["score"] - demo["score"]
        d["hallucination_ok"] = r["hallucination"] <= 0.10
        out.append(d)
    return out


def print_deltas(ds: list[dict]) -> None:
    print("\nablation (default - no retrieval; target >= +0.20) and paraphrase (paraphrase - demo; target |d| <= 0.05)")
    for d in ds:
        parts = [f"{d['set']:16} task {d['task']}"]
        if "ablation_truthfulness" in d:
            parts.append(f"ablation truth {d['ablation_truthfulness']:+.3f} score {d['ablation_score']:+.3f}")
        if "paraphrase_truthfulness" in d:
            parts.append(f"paraphrase truth {d['paraphrase_truthfulness']:+.3f} score {d['paraphrase_score']:+.3f}")
        parts.append("halluc <= 10%: " + ("yes" if d["hallucination_ok"] else "NO"))
        print("  " + "; ".join(parts))


# ---- sweeps (tuning sets only) ------------------------------------------------------------------------------------


def sweep_abstain(sets: list[Any], judge: Any, truncator: Any, out_dir: Path, limit: int | None) -> list[dict]:
    """Truthfulness / hallucination vs the self-check confidence floor (abstain_below), tasks 1 and 2.

    One run with abstain_below=0 keeps every supported draft with its verified confidence; each threshold then
    turns the answers under it into "I don't know" (the same decision the self-check node makes)."""
    from glasses_rag.crag_mm.scoring import score_turn

    out = []
    for task in (1, 2):
        turns = [
            t
            for paths in sets
            for t in run_one(
                agent_config(paths.root, abstain_below=0.0),
                paths,
                task,
                limit,
                judge,
                truncator,
                f"sweep-abstain-{paths.root.name}-t{task}",
                out_dir,
            )[1]
        ]
        for thr in (0.0, 0.2, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7):
            res = []
            for t in turns:
                keep = t["confidence"] is not None and t["confidence"] >= thr
                if keep:
                    res.append(t["score"])
                else:
                    res.append(
                        score_turn(
                            t["question"], "I don't know", t["ground_truth"], judge=judge, truncator=truncator
                        ).result
                    )
            out.append(_rates("abstain_below", thr, task, res))
    return out


def sweep_planner(
    sets: list[Any],
    judge: Any,
    truncator: Any,
    out_dir: Path,
    limit: int | None,
    field: str,
    values: list[float],
    tasks: tuple[int, ...],
) -> list[dict]:
    """Truthfulness / hallucination vs one RulePlannerConfig threshold (a run per value and set, pooled)."""
    from glasses_rag.policies.rules.rule_planner import RulePlannerConfig

    out = []
    for task in tasks:
        for v in values:
            scores = []
            for paths in sets:
                cfg = agent_config(paths.root, planner=RulePlannerConfig(**{field: v}))
                _, turns = run_one(
                    cfg, paths, task, limit, judge, truncator, f"sweep-{field}-{v}-{paths.root.name}-t{task}", out_dir
                )
                scores += [t["score"] for t in turns]
            out.append(_rates(field, v, task, scores))
    return out


def sweep_image_floor(sets: list[Any]) -> list[dict]:
    """How often the top image-KG match is the pictured entity, by its score: precision and coverage of trusting
    matches at or above each floor (the image embedder's own floor is `match_floor`)."""
    from glasses_rag.core.images import load_image, prepare
    from glasses_rag.crag_mm.dataset import load_all
    from glasses_rag.retrieval.local_search import LocalSearchIndex

    rows = []
    for paths in sets:
        meta = json.loads(paths.questions_json.read_text())
        index = LocalSearchIndex(paths.root)
        for part in (paths.single_turn, paths.multi_turn):
            for c in load_all(part)[0]:
                im, info = load_image(c.image)
                im, info = prepare(im, info, c.egocentric, "harness")
                res = index.image_search(im, k=1) if im is not None else []
                if res and res[0]["entities"]:
                    rows.append(
                        (
                            res[0]["score"],
                            res[0]["entities"][0]["entity_name"] == meta[c.turns[0].interaction_id]["entity"],
                        )
                    )
    out = []
    for floor in (0.70, 0.80, 0.84, 0.88, 0.90, 0.92, 0.95):
        kept = [ok for s, ok in rows if s >= floor]
        out.append(
            {
                "sweep": "image_match_floor",
                "value": floor,
                "images": len(rows),
                "trusted": len(kept),
                "precision": sum(kept) / len(kept) if kept else 0.0,
                "coverage_of_right": sum(kept) / max(1, sum(ok for _, ok in rows)),
                "embedder": getattr(index.image_embedder, "name", "?"),
            }
        )
    return out


def _rates(name: str, value: float, task: int, results: list[str]) -> dict:
    n = max(1, len(results))
    c, m, w = (sum(r == k for r in results) for k in ("correct", "missing", "incorrect"))
    return {
        "sweep": name,
        "value": value,
        "task": task,
        "n": len(results),
        "accuracy": c / n,
        "hallucination": w / n,
        "truthfulness": (c - w) / n,
    }


def print_sweep(rows: list[dict]) -> None:
    if not rows:
        return
    if rows[0]["sweep"] == "image_match_floor":
        print(f"\nimage-match floor ({rows[0]['embedder']}): trusting the top match at or above the floor")
        for r in rows:
            print(
                f"  floor {r['value']:.2f}: {r['trusted']:3d}/{r['images']} trusted, precision {r['precision']:.3f}, "
                f"right matches kept {r['coverage_of_right']:.3f}"
            )
        return
    print(f"\nsweep {rows[0]['sweep']} (tuning sets pooled; truth = correct - wrong, per turn)")
    for r in rows:
        print(
            f"  task {r['task']} {r['sweep']}={r['value']:<5g} acc {r['accuracy']:.3f} halluc {r['hallucination']:.3f} "
            f"truth {r['truthfulness']:+.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--sets", nargs="+", default=DEFAULT_SETS, help="content folder names under glasses_rag/crag_mm/bundled/"
    )
    p.add_argument("--tasks", nargs="+", type=int, default=[1, 2, 3], choices=[1, 2, 3])
    p.add_argument("--limit", type=int, default=None, help="first N conversations of each task")
    p.add_argument("--no-ablation", action="store_true", help="skip the runs without retrieval tools")
    p.add_argument("--sweep", action="store_true", help="threshold sweeps on the tuning sets (--tune-sets)")
    p.add_argument("--tune-sets", nargs="+", default=TUNING_SETS, help="content folders the sweeps pool")
    p.add_argument("--content-root", type=Path, default=CONTENT, help="folder holding the content folders")
    p.add_argument("--data-root", type=Path, default=ROOT / "data", help="where datasets are rendered")
    p.add_argument("--out", type=Path, default=None, help="trace folder (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    args = p.parse_args(argv)

    import tempfile

    from glasses_rag.crag_mm.scoring import make_judge, make_truncator

    judge = make_judge("rule")
    truncator = make_truncator(None)
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="generalization-"))
    rows: list[dict] = []
    skipped: list[str] = []
    t0 = time.time()
    for name in args.sets:
        if not (args.content_root / name / "questions.yaml").is_file():
            skipped.append(name)
            continue
        paths = dataset_for(name, args.data_root, args.content_root)
        for task in args.tasks:
            variants = [("default", None)] + ([] if args.no_ablation else [("no-retrieval", without_retrieval(task))])
            for label, allowed in variants:
                report, _ = run_one(
                    agent_config(paths.root, allowed),
                    paths,
                    task,
                    args.limit,
                    judge,
                    truncator,
                    f"{name}-t{task}-{label}",
                    out_dir,
                )
                rows.append({"set": name, "task": task, "agent": label, **figures(report)})
                print(f"  done {name} task {task} {label} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    print(f"judge: {getattr(judge, 'name', 'rule')}; policy: rule-based-planner (heuristic); traces: {out_dir}")
    if skipped:
        print(f"skipped (no content folder under {args.content_root}): {', '.join(skipped)}")
    print_table(rows)
    ds = deltas(rows)
    print_deltas(ds)
    sweeps: list[dict] = []
    if args.sweep:
        tune = [
            dataset_for(n, args.data_root, args.content_root)
            for n in args.tune_sets
            if (args.content_root / n / "questions.yaml").is_file()
        ]
        if not tune:
            print("sweeps need at least one tuning content folder")
        else:
            blocks = [sweep_image_floor(tune), sweep_abstain(tune, judge, truncator, out_dir, args.limit)]
            for name, values in SWEEPS.items():
                blocks.append(sweep_planner(tune, judge, truncator, out_dir, args.limit, name, values, (2,)))
            for block in blocks:
                print_sweep(block)
                sweeps += block
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "deltas": ds,
                    "sweeps": sweeps,
                    "skipped": skipped,
                    "judge": getattr(judge, "name", "rule"),
                },
                indent=1,
            )
        )
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
