"""A preset with each tool or module removed, against the full preset: a SuperLens-Table-4-style table.

    python -m benchmarks.ablate --preset superlens --task 2
    python -m benchmarks.ablate --preset unsw-verify --task 2 --data heldout
    python -m benchmarks.ablate --preset superlens --task 2 --data <folder> --index-dir <folder>
        --model openai:<url>#<m>

Rows (SuperGlasses Table 4, 004 §4.3): A. no retrieval (every tool that finds the entity, searches or reads pages
removed); then the paper's own rows when the preset lists them (`ablation` in its file: SuperLens' B. Mandatory
Retrieval and C. Demand-Adaptive Retrieval, with one or two components removed); then, as extra rows labelled so,
each module of the preset switched off (its routers and its self-check; a router switched off decides what the
preset file says) and each tool removed from the allow-list. Each row gives accuracy and truthfulness, their change
against the full preset over the same questions, and a paired bootstrap 95% interval of that change: the per-question
differences resampled with replacement (2,000 resamples, seed 0), so a reader can tell noise from effect.

Every row is an ordinary resumable run folder under `<--out>/<bench id>/<row>`; the same command again reuses the
finished turns. Rows run concurrently within graph.run's budget rule: a policy that runs on this machine's CPU
gets at most one conversation per core over all rows (--oversubscribe lifts it); a model server gets --concurrency
(default: one conversation per row).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}.items():
    os.environ.setdefault(_k, _v)

from benchmarks.preset_runs import Row, base_config, bench_id, concurrency_for, parse, run_row  # noqa: E402

N_RESAMPLES = 2000
SEED = 0


# ---- paired bootstrap ----------------------------------------------------------------------------------------


class Change(BaseModel):
    """A row's change against the full preset on the questions both ran."""

    n: int
    delta: float
    low: float
    high: float


def interval(diffs: np.ndarray, resamples: np.ndarray) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the mean difference over the given resamples (rows of indices)."""
    means = diffs[resamples].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def paired_bootstrap(diffs: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> Change:
    """Mean of the per-question differences and its bootstrap 95% interval (questions resampled with
    replacement; a fixed seed gives the same interval every time)."""
    diffs = np.asarray(diffs, dtype=float)
    if diffs.size == 0:
        return Change(n=0, delta=0.0, low=0.0, high=0.0)
    rng = np.random.default_rng(seed)
    low, high = interval(diffs, rng.integers(0, diffs.size, size=(n_resamples, diffs.size)))
    return Change(n=int(diffs.size), delta=float(diffs.mean()), low=low, high=high)


def per_question(flags: dict[str, tuple[bool, bool]], metric: str) -> dict[str, float]:
    """Each question's share of the metric: accuracy = correct; truthfulness = 2*correct + missing - 1 (their means
    are the official accuracy and truthfulness)."""
    if metric == "accuracy":
        return {k: float(c) for k, (c, m) in flags.items()}
    return {k: 2.0 * c + m - 1.0 for k, (c, m) in flags.items()}


def change(full: Row, row: Row, metric: str) -> Change:
    """The row minus the full preset, paired by question."""
    a, b = per_question(full.flags, metric), per_question(row.flags, metric)
    keys = sorted(set(a) & set(b))
    return paired_bootstrap(np.array([b[k] - a[k] for k in keys]))


# ---- the rows ---------------------------------------------------------------------------------------------------


class Variant(BaseModel):
    group: str  # the paper's group ("A. No Retrieval", "B. Mandatory Retrieval", ...) or an "Extra: ..." group
    label: str  # the run folder's name
    title: str
    preset: str  # a name or a preset file
    allowed: list[str] | None = None
    reported: float | None = None  # the paper's figure for this row

    def key(self) -> tuple:
        return (self.preset, tuple(self.allowed or ()))


EXTRA_MODULES = "Extra (not in the paper's table): each module off"
EXTRA_TOOLS = "Extra (not in the paper's table): each tool removed"


def _variant_file(root: Path, name: str, data: dict[str, Any]) -> Path:
    import yaml

    path = root / "presets" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def paper_rows(preset: Any, data: dict[str, Any], names: list[str], root: Path) -> list[Variant]:
    """The rows of the paper's own ablation table (the preset's `ablation` section), with its group letters."""
    out = []
    for i, row in enumerate(preset.ablation.rows if preset.ablation else []):
        steps = [{**s, "if_removed": row.if_removed.get(s["id"], s.get("if_removed", {}))} for s in data["steps"]]
        variant = {**data, "steps": steps, "disabled": [*preset.disabled, *row.disabled]}
        path = _variant_file(root, f"{preset.name}-table-{i + 1}", variant) if row.disabled else None
        out.append(
            Variant(
                group=row.group,
                label=f"table-{i + 1}",
                title=row.title,
                reported=row.reported,
                preset=str(path) if path else "",
                allowed=[n for n in names if n not in row.without],
            )
        )
    return out


def no_search_row(preset: Any, data: dict[str, Any], tools: list[Any], root: Path) -> Variant | None:
    """Table 4 A "w/o Search": no retrieval at all, so nothing that serves it either (every tool and every router
    off: the object detector, the query decoupler and the routers make no call); the answer step and the
    self-check stay. None for a preset without tools or routers."""
    names = [t.name for t in tools]
    routers = [s.id for s in preset.steps if s.route is not None and s.id not in preset.disabled]
    if not names and not routers:
        return None
    path = _variant_file(root, f"{preset.name}-without-search", {**data, "disabled": [*preset.disabled, *routers]})
    off = f"{len(names)} tools and {len(routers)} routers off" if routers else f"{len(names)} tools off"
    return Variant(
        group="A. No Retrieval",
        label="no-retrieval",
        preset=str(path),
        allowed=[],
        title=f"w/o Search ({off})",
        reported=preset.ablation.reported_without_search if preset.ablation else None,
    )


def variants(preset_spec: str, task: int, tools_config: Any, root: Path, profile: Any = None) -> list[Variant]:
    """The full preset; no retrieval; the paper's own ablation rows (the preset's `ablation`); then, as extra rows,
    each module off (a preset file beside the runs) and each tool removed (rows equal to a paper row are left out)."""
    from glasses_rag.policies.presets import load_preset
    from tools import default_registry

    preset = load_preset(preset_spec, tools_config.modules)
    tools = default_registry(tools_config.modules).for_task(task, preset.tools, profile)  # the benchmark's tools
    names = [t.name for t in tools]
    module_of = {t: s.module for s in preset.steps for t in s.tools}
    reported = preset.ablation or None
    out = [
        Variant(
            group="",
            label="full",
            title=f"{preset.name} (full)",
            preset=preset_spec,
            allowed=names,
            reported=reported.reported_full if reported else None,
        )
    ]
    data = preset.model_dump(mode="json", exclude_defaults=True)
    data.pop("ablation", None)
    data.setdefault("steps", [])
    without_search = no_search_row(preset, data, tools, root)
    if without_search is not None:
        out.append(without_search)
    out += [v.model_copy(update={"preset": v.preset or preset_spec}) for v in paper_rows(preset, data, names, root)]
    extra = []
    for step_id, module in preset.modules():
        path = _variant_file(
            root, f"{preset.name}-without-{step_id}", {**data, "disabled": [*preset.disabled, step_id]}
        )
        extra.append(
            Variant(
                group=EXTRA_MODULES, label=f"without-{step_id}", title=f"w/o {module}", preset=str(path), allowed=names
            )
        )
    for n in names:
        title = f"w/o {module_of[n]} ({n})" if n in module_of else f"w/o {n}"
        extra.append(
            Variant(
                group=EXTRA_TOOLS,
                label=f"without-{n}",
                title=title,
                preset=preset_spec,
                allowed=[m for m in names if m != n],
            )
        )
    return out + [v for v in extra if v.group == EXTRA_MODULES or v.key() not in {o.key() for o in out}]


def run_variants(args: argparse.Namespace, base: Any, todo: list[Variant], root: Path, scoring: Any) -> list[Row]:
    """Every variant's run, several at once: the run's concurrency is shared among the rows running together."""
    from glasses_rag.retrieval.cache import CachedSearch
    from glasses_rag.retrieval.search import make_search

    configs = [
        base.model_copy(update={"preset": v.preset, "tools": base.tools.model_copy(update={"allowed": v.allowed})})
        for v in todo
    ]
    total, _ = concurrency_for(args, configs[0], default=len(todo))  # capped at the cores for a CPU-bound policy
    workers = max(1, min(len(todo), total))
    per_row = max(1, total // workers)
    index = getattr(args, "default_index", None)  # the data's own index (prepared by base_config)
    backend = make_search(base.search, base.models, web=args.task != 1, index_dir=index)  # one for every row
    search = backend if isinstance(backend, CachedSearch) else CachedSearch(backend)
    quiet = argparse.Namespace(**{**vars(args), "no_progress": True})

    def one(i: int) -> Row:
        v = todo[i]
        try:
            row = run_row(quiet, v.label, configs[i], root, scoring, per_row, search=search)
        except Exception as e:  # noqa: BLE001 - one failing row must not lose the others
            row = Row(label=v.label, preset=v.preset, error=f"{type(e).__name__}: {e}")
        print(f"  {v.title}: " + (f"done ({row.seconds:.0f} s)" if not row.error else row.error), flush=True)
        return row

    print(f"{len(todo)} runs, {workers} at a time, {per_row} conversation(s) each", flush=True)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ablation-row") as pool:
        return list(pool.map(one, range(len(todo))))


# ---- output -----------------------------------------------------------------------------------------------------


def table(todo: list[Variant], rows: list[Row]) -> tuple[str, list[dict[str, Any]]]:
    """The printed table (Table 4 style: each row's change against the full preset) and its JSON rows."""
    full = rows[0]
    width = max(len(v.title) for v in todo) + 2
    head = f"{'setting':{width}} {'n':>4} {'accuracy':>8} {'change [95% CI]':>24} {'truth':>7} {'change [95% CI]':>24}"
    lines, group = [head, "-" * len(head)], None
    out: list[dict[str, Any]] = []
    for v, r in zip(todo, rows):
        if v.group != group and v.group:
            lines.append(v.group)
            group = v.group
        name = ("  " if v.group else "") + v.title
        if r.error or full.error:
            lines.append(f"{name:{width}} failed: {r.error or full.error}")
            out.append({"setting": v.title, "group": v.group, "error": r.error or full.error})
            continue
        acc, tru = change(full, r, "accuracy"), change(full, r, "truthfulness")
        cells = [
            f"{acc.n:>4} {r.accuracy:8.3f}",
            _ci(acc, v is todo[0]),
            f"{r.truthfulness:7.3f}",
            _ci(tru, v is todo[0]),
        ]
        paper = f"   paper {v.reported:.2f}" if v.reported is not None else ""
        lines.append(f"{name:{width}} " + " ".join(cells) + paper)
        out.append(
            {
                "setting": v.title,
                "group": v.group,
                "run": r.model_dump(),
                "accuracy_change": acc.model_dump(),
                "truthfulness_change": tru.model_dump(),
                "reported": v.reported,
            }
        )
    return "\n".join(lines), out


def _ci(c: Change, is_full: bool) -> str:
    return f"{'-':>24}" if is_full else f"{c.delta:+8.3f} [{c.low:+.3f}, {c.high:+.3f}]"


def own_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.ablate",
        add_help=False,
        description="Rerun a preset with each tool or module removed (SuperLens Table 4).",
    )
    p.add_argument("-h", "--help", action="store_true", help="this help, then graph.run's options")
    p.add_argument(
        "--preset", required=True, help="a preset name (python -m glasses_rag.policies.presets) or a preset YAML file"
    )
    p.add_argument(
        "--json", type=Path, default=None, help="where the table goes (default: <bench folder>/ablation.json)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    from glasses_rag.harness import run_scoring
    from glasses_rag.harness.benchmarks import benchmark_of

    mine, args = parse(argv, own_parser())
    try:
        base = base_config(args).model_copy(update={"preset": mine.preset})
        root = Path(args.out) / bench_id(f"ablate-{Path(mine.preset).stem}", args, base)
        todo = variants(mine.preset, args.task, base.tools, root, benchmark_of(args).tools)
        scoring = run_scoring.make_scoring(args)
    except (ValueError, FileNotFoundError, ImportError, OSError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(
        f"{mine.preset} ablation, task {args.task} on {args.data}; judge {scoring.describe()}; folder {root}",
        flush=True,
    )
    rows = run_variants(args, base, todo, root, scoring)
    text, out = table(todo, rows)
    print()
    print(text)
    print(
        f"\nchange = row minus the full preset on the same questions; 95% CI: paired bootstrap over questions "
        f"({N_RESAMPLES} resamples, seed {SEED}); policy: {rows[0].policy or '?'}"
    )
    path = mine.json or root / "ablation.json"
    from glasses_rag.core.files import write_atomic

    write_atomic(
        path,
        json.dumps(
            {
                "preset": mine.preset,
                "task": args.task,
                "data": str(args.data),
                "judge": scoring.judge_name,
                "rows": out,
            },
            indent=2,
            default=str,
        )
        + "\n",
    )
    print(f"wrote {path}")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())
