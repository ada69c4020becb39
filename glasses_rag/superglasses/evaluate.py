"""SuperGlasses evaluation: the judge, accuracy sliced as the paper's tables, and the trajectory comparison.

- Judge. The paper judges each answer with an LLM that replies `{"accuracy": true|false}` (its Fig. 16).
  `make_superglasses_judge("openai:<url>#<model>")` sends prompts/judge_superglasses_*.txt to any
  OpenAI-compatible server through the project's one client (glasses_rag.crag_mm.scoring.LLMJudge: JSON-schema response
  format, retries, an unusable reply counted as wrong). The prompt is the exact text of Fig. 16
  (prompts/README_superglasses_judge.md says where it comes from). `"rule"` is the
  offline "superglasses rule judge (approximate)" (glasses_rag.crag_mm.scoring.RuleJudge's matching rules); it is not
  the paper's metric. SuperGlasses scores accuracy only: the whole answer is judged (no 75-token cut), and
  "I don't know" is not correct (it is listed as `missing`).
- Slices, after the paper's Tables 3/5/6/7: difficulty; hops (1, 2, 3, 4, and 5+) and hop group (1, >=2);
  information seeking (None / Image / Text / Both, from the annotated sub-questions' tools); domain; category
  (a question counts under each of its categories); dynamism; glasses; plus use_image and image_quality.
  The hop count is the annotated `hops`, else the number of annotated sub-questions.
- Comparison with the annotated trajectories (glasses_rag.superglasses.compare), and the annotation statistics the
  paper quotes (sub-questions and tool uses per question) recomputed on the questions run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import replace
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from glasses_rag.core.credentials import public_url
from glasses_rag.crag_mm.scoring import MODES, PROMPTS_DIR, LLMJudge, RuleJudge, TurnScore, make_judge, score_turn
from glasses_rag.superglasses.compare import CompareReport, compare, format_report, references_from_traces
from glasses_rag.superglasses.logs import SGLog, information_seeking, parse_log, to_superglasses, write_logs
from traces.schema import TurnTrace
from traces.store import write_json_atomic

# prompts/judge_superglasses_*.txt hold the exact text of the paper's Fig. 16 (Appendix E.1).
SUPERGLASSES_PROMPT_VERIFIED = True
SYSTEM_PROMPT = "judge_superglasses_system.txt"
USER_PROMPT = "judge_superglasses_user.txt"
SUPERGLASSES_JUDGE = replace(
    MODES["kddcup2025"],
    name="superglasses",
    reproduces='SuperGlasses (arXiv 2602.22683) LLM judge replying {"accuracy": true|false} (Fig. 16); '
    + ("prompt text of Fig. 16" if SUPERGLASSES_PROMPT_VERIFIED else "prompt wording approximate"),
    judge_model="Qwen2.5-32B-Instruct",
    judge_system_prompt=SYSTEM_PROMPT,
    judge_user_prompt=USER_PROMPT,
    judge_temperature=0.0,
    unparseable_verdict="no verdict: counted as wrong",
)
SLICES = (
    "difficulty",
    "hops",
    "hop_group",
    "information_seeking",
    "domain",
    "category",
    "dynamism",
    "glasses",
    "use_image",
    "image_quality",
)


def read_prompt(name: str, folder: Path | Traversable = PROMPTS_DIR) -> str:
    """A prompt file without its leading '#' note lines."""
    lines = (folder / name).read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


class SuperGlassesRuleJudge(RuleJudge):
    """Offline stand-in for the paper's LLM judge: glasses_rag.crag_mm.scoring.RuleJudge's rules. NOT the paper's
    metric."""

    name = "superglasses rule judge (approximate)"


class NoTruncation:
    name = "none (SuperGlasses judges the whole answer)"

    def truncate(self, text: str) -> str:
        return text


NO_TRUNCATION = NoTruncation()


def make_superglasses_judge(spec: str, api_key: str | None = None, **kw: Any):
    """'rule' (offline, approximate), 'none' (exact match only) or 'openai:<base_url>#<model>' (the LLM judge)."""
    if spec == "rule":
        return SuperGlassesRuleJudge()
    judge = make_judge(spec, mode=SUPERGLASSES_JUDGE, api_key=api_key, **kw)
    if isinstance(judge, LLMJudge):
        judge.system_prompt, judge.user_template = read_prompt(SYSTEM_PROMPT), read_prompt(USER_PROMPT)
        wording = "" if SUPERGLASSES_PROMPT_VERIFIED else ", approximate wording"
        judge.name = f"llm-judge:{judge.model} (SuperGlasses prompt{wording})"
    return judge


def score_superglasses(question: str, answer: str | None, ground_truth: str, judge: Any) -> TurnScore:
    """correct (exact match or the judge says so) / missing ("I don't know") / incorrect; no truncation."""
    return score_turn(question, answer, ground_truth, judge=judge, truncator=NO_TRUNCATION, mode=SUPERGLASSES_JUDGE)


def open_web_line() -> str:
    """One line for the run header: where the open-web tools search and cache, whether a key is set, and what the
    page reader may reach."""
    from glasses_rag.web.config import WebConfig

    try:
        c = WebConfig.from_env()
    except ValueError as e:
        return f"open-web settings invalid: {e} (open-web tools will fail)"
    key = "set" if os.environ.get(c.key_env) else f"NOT SET ({c.key_env}): searches will fail as tool errors"
    lens = "on" if c.image_dir and c.image_base_url else "off (GLASSES_IMAGE_DIR / GLASSES_IMAGE_BASE_URL unset)"
    reach = "public addresses only" + (f" + GLASSES_WEB_ALLOW {','.join(c.allow)}" if c.allow else "")
    return (
        f"SerpApi-compatible API at {c.serpapi_base_url}, key {key}; Google Lens {lens}; pages: {reach}, "
        f"{c.timeout_s:g}s per request; cache {c.cache_dir}"
    )


def open_web_stats() -> dict[str, Any] | None:
    """The disk cache's hit/miss counts of this process (None when no open-web tool ran)."""
    from glasses_rag.web import open_web

    return open_web.current_stats()


# ---------------------------------------------------------------------------------------------------------------
# slices


def annotation(labels: dict[str, Any], sid: str = "") -> SGLog | None:
    """The annotated trajectory in a SuperGlasses row's labels (None when it has no `sub_questions`)."""
    if "sub_questions" not in labels:
        return None
    return parse_log({"id": sid or labels.get("sg_id") or "?", "sub_questions": labels.get("sub_questions")})


def slice_values(labels: dict[str, Any]) -> dict[str, list[str]]:
    """Slice name -> the values a question counts under (several for `category`)."""
    ann = annotation(labels)
    hops = labels.get("hops")
    if not isinstance(hops, int) and ann is not None and ann.hops:
        hops = len(ann.hops)
    out: dict[str, list[str]] = {}
    if isinstance(hops, int) and hops > 0:
        out["hops"] = [str(hops) if hops <= 4 else "5+"]
        out["hop_group"] = ["1" if hops == 1 else ">=2"]
    if ann is not None:
        out["information_seeking"] = [information_seeking(ann.search_tools())]
    cats = labels.get("category")
    if isinstance(cats, (list, tuple)):
        out["category"] = [str(c) for c in cats if c is not None] or ["(none)"]
    elif cats is not None:
        out["category"] = [str(cats)]
    for k in ("difficulty", "domain", "dynamism", "glasses", "use_image", "image_quality"):
        if labels.get(k) is not None:
            out[k] = [str(labels[k])]
    return out


class SliceStats(BaseModel):
    n: int = 0
    correct: int = 0
    missing: int = 0
    accuracy: float = 0.0


class QuestionRow(BaseModel):
    id: str
    question: str
    answer: str
    ground_truth: str | None
    result: str | None
    judge: str | None
    slices: dict[str, list[str]]


class SuperGlassesReport(BaseModel):
    benchmark: str = "SuperGlasses (arXiv 2602.22683)"
    judge: str
    judge_note: str
    overall: SliceStats
    unscored: int = Field(0, description="Questions without a ground truth or a score: left out of the accuracy.")
    slices: dict[str, dict[str, SliceStats]] = Field(default_factory=dict)
    annotation_stats: dict[str, float | int] = Field(default_factory=dict)
    comparison: CompareReport | None = None
    notes: list[str] = Field(default_factory=list)
    questions: list[QuestionRow] = Field(default_factory=list)


def _add(s: SliceStats, result: str) -> None:
    s.n += 1
    s.correct += result == "correct"
    s.missing += result == "missing"
    s.accuracy = round(s.correct / s.n, 6)


def evaluate_superglasses(
    traces: Iterable[TurnTrace], judge_name: str, embedder: Any = "auto", problems: list[str] | None = None
) -> tuple[SuperGlassesReport, list[SGLog]]:
    """The report over scored traces (their `score` set by the run's scorer), and the traces as SGLogs."""
    traces = list(traces)
    overall, slices, rows, unscored = _tally(traces)
    refs = references_from_traces(traces, problems)
    logs = [to_superglasses(t) for t in traces]
    comparison = compare(logs, refs, embedder=embedder) if refs else None
    stats: dict[str, float | int] = {}
    if refs:
        stats = {
            "questions": len(refs),
            "mean_sub_questions": round(sum(len(r.hops) for r in refs) / len(refs), 4),
            "mean_tool_uses": round(sum(sum(h.uses_tool for h in r.hops) for r in refs) / len(refs), 4),
        }
    return SuperGlassesReport(
        judge=judge_name,
        judge_note=SUPERGLASSES_JUDGE.reproduces,
        overall=overall,
        unscored=unscored,
        slices={k: dict(sorted(v.items())) for k, v in slices.items() if v},
        annotation_stats=stats,
        comparison=comparison,
        notes=_notes(judge_name, comparison is not None),
        questions=rows,
    ), logs


def _tally(traces: list[TurnTrace]) -> tuple[SliceStats, dict[str, dict[str, SliceStats]], list[QuestionRow], int]:
    """Accuracy overall and by slice over the scored traces, a row per question, and how many were not scored."""
    overall = SliceStats()
    slices: dict[str, dict[str, SliceStats]] = {k: {} for k in SLICES}
    rows: list[QuestionRow] = []
    unscored = 0
    for t in traces:
        values = slice_values(t.labels)
        rows.append(
            QuestionRow(
                id=str(t.labels.get("sg_id") or t.interaction_id),
                question=t.question,
                answer=t.answer,
                ground_truth=t.ground_truth,
                result=t.score,
                judge=t.judge,
                slices=values,
            )
        )
        if t.score is None:
            unscored += 1
            continue
        _add(overall, t.score)
        for name, vals in values.items():
            for v in vals:
                _add(slices[name].setdefault(v, SliceStats()), t.score)
    return overall, slices, rows, unscored


def _notes(judge_name: str, compared: bool) -> list[str]:
    """What the report's figures mean, which judge gave them, and where error types are defined."""
    notes = ["Accuracy = correct / scored questions; 'I don't know' is not correct. The whole answer is judged."]
    if not SUPERGLASSES_PROMPT_VERIFIED and judge_name.startswith("llm-judge"):
        notes.append(
            'The judge prompt follows the paper\'s description of Fig. 16 ({"accuracy": true|false}); its '
            "exact wording could not be checked offline (prompts/README_superglasses_judge.md)."
        )
    if "approximate" in judge_name and not judge_name.startswith("llm-judge"):
        notes.append("Offline rule judge: an approximation of the paper's LLM judge, not its metric.")
    if compared:
        notes.append(
            "Error types are counted over wrong answers only, as defined in this project after the paper's "
            "description (glasses_rag/superglasses/compare.py)."
        )
    return notes


def format_superglasses(rep: SuperGlassesReport) -> str:
    o = rep.overall
    L = [
        f"SuperGlasses accuracy: {100 * o.accuracy:.2f}% ({o.correct}/{o.n}; {o.missing} 'I don't know'"
        + (f"; {rep.unscored} not scored" if rep.unscored else "")
        + f") judge: {rep.judge}"
    ]
    for name, vals in rep.slices.items():
        L.append(f"  {name}: " + ", ".join(f"{v} {100 * s.accuracy:.1f}% (n={s.n})" for v, s in vals.items()))
    if rep.annotation_stats:
        a = rep.annotation_stats
        L.append(
            f"annotations: {a['mean_sub_questions']} sub-questions and {a['mean_tool_uses']} tool uses per "
            f"question ({a['questions']} questions)"
        )
    if rep.comparison is not None:
        L += ["", "trajectories vs annotations:", format_report(rep.comparison, max_turns=20)]
    L += [f"note: {n}" for n in rep.notes]
    return "\n".join(L)


def plot_superglasses(rep: SuperGlassesReport, path: str | Path) -> Path:
    """SuperGlasses accuracy (correct / scored questions, in [0, 1]) by slice as a PNG, written atomically."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from glasses_rag.core.files import write_atomic
    from glasses_rag.evaluation.charts import mark_bars

    keys = [k for k, v in rep.slices.items() if v]
    fig, axes = plt.subplots(
        max(1, len(keys)), 1, squeeze=False, figsize=(8, 1.2 + sum(len(rep.slices[k]) * 0.35 + 0.6 for k in keys))
    )
    for ax, key in zip(axes[:, 0], keys):
        names = list(rep.slices[key])
        accuracy = [rep.slices[key][v].accuracy for v in names]
        ax.barh(range(len(names)), accuracy, color="tab:blue")
        mark_bars(ax, accuracy)  # a slice at 0 is seen
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels([f"{v} (n={rep.slices[key][v].n})" for v in names], fontsize=8)
        ax.axvline(rep.overall.accuracy, color="k", linestyle="--", linewidth=0.8)
        ax.set_xlim(0, 1)
        ax.set_title(f"accuracy by {key}", fontsize=9)
        ax.invert_yaxis()
    fig.suptitle(
        f"SuperGlasses accuracy (overall {rep.overall.accuracy:.3f}, {rep.overall.correct}/"
        f"{rep.overall.n}); judge: {rep.judge}",
        fontsize=9,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


def write_superglasses_report(rep: SuperGlassesReport, logs: list[SGLog], out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    files = {
        "superglasses_json": out / "superglasses_report.json",
        "superglasses_txt": out / "superglasses_report.txt",
        "superglasses_logs": out / "superglasses_logs.jsonl",
    }
    # without URL userinfo (a judge named openai:http://alice:pw@host/v1#m)
    write_json_atomic(
        files["superglasses_json"], public_url(json.dumps(rep.model_dump(mode="json"), indent=2, ensure_ascii=False))
    )
    write_json_atomic(files["superglasses_txt"], public_url(format_superglasses(rep) + "\n"))
    write_logs(logs, files["superglasses_logs"])
    return files
