"""Run a benchmark's task end to end: `python -m graph.run --task {1,2,3}` (CRAG-MM), `--benchmark superglasses`, or
`--benchmark-module MODULE --benchmark NAME` for one of your own (glasses_rag.evaluation.Benchmark).

By default everything is offline and embedded: the demo question set (generated on first use), the local
search index over it, the rule-based planner (a heuristic policy) and the rule judge (an approximate judge).
Every heuristic in use is named in the header this prints and in each trace. This module is the command line only:
its options are generated from the configuration models, and `glasses_rag.harness.session.run` does the run
(`graph.build.build_agent` wires the agent).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from glasses_rag.core.credentials import scrub_log_handlers, scrub_text
from glasses_rag.harness import session
from glasses_rag.harness.run_folder import RunRefused

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class _Parser(argparse.ArgumentParser):
    """Options are parsed as text, then validated by the configuration fields they set (glasses_rag/harness/cli.py); the
    run's own options get their defaults, and the benchmark's defaults are applied."""

    benchmarks: list[str] = []  # the names --task may give for --benchmark (benchmarks of one task)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        from glasses_rag.harness.cli import convert
        from glasses_rag.harness.run_options import ROOTS, options

        args = task_alias(list(sys.argv[1:] if args is None else args), self.benchmarks)
        parsed = convert(self, super().parse_args(args, namespace), options(), ROOTS)
        for opt in options():
            if opt.path.startswith("run.") and getattr(parsed, opt.name) is None:
                info = ROOTS["run"].model_fields[opt.path.split(".")[1]]
                setattr(parsed, opt.name, info.get_default(call_default_factory=True))
        return parsed

    def error(self, message: str) -> Any:  # type: ignore[override]
        """One line, not the 45-line usage: what was wrong and where the options are listed."""
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists every option)\n")


def task_alias(argv: list[str], benchmarks: list[str]) -> list[str]:
    """`--task NAME` is read as `--benchmark NAME` for a benchmark of one task of its own (`--task superglasses`)."""
    out: list[str] = []
    for i, a in enumerate(argv):
        name = a.split("=", 1)[1] if a.startswith("--task=") else a if i > 0 and argv[i - 1] == "--task" else None
        if name in benchmarks:
            if out and out[-1] == "--task":
                out.pop()
            out += ["--benchmark", name]
        else:
            out.append(a)
    return out


def benchmark_modules(argv: list[str] | None) -> list[str]:
    """The --benchmark-module options of a command line, read before the parser is built (their benchmarks are
    among --benchmark's choices)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # --benchmark is not --benchmark-module
    pre.add_argument("--benchmark-module", action="append", default=[])
    return pre.parse_known_args(list(sys.argv[1:] if argv is None else argv))[0].benchmark_module


def environment_help() -> str:
    """The environment variables the run reads, for --help."""
    from glasses_rag.web.config import ENV, KEY_ENV, MB, WebConfig

    rows = [
        (KEY_ENV, "SerpApi key for the SuperGlasses open-web tools (google_search, google_lens)."),
        ("OPENAI_API_KEY", "API key of an LLM judge (see --judge-api-key-env)."),
        ("GLASSES_CACHE_DIR", "Folder for derived files kept between runs (default ~/.cache/glasses-rag)."),
        (
            "GLASSES_GGUF_CACHE",
            "Folder for GGUF models converted for transformers (default ~/.cache/glasses-rag/gguf).",
        ),
        (
            "GLASSES_GRAMMAR_CACHE",
            "Folder for compiled reply grammars of the transformers backend (default grammars/ under "
            "GLASSES_CACHE_DIR).",
        ),
        (
            "GLASSES_DEMO_DIR",
            "Where the demo question set is generated (default data/demo under the working directory; see --demo-dir).",
        ),
        ("GLASSES_IMAGE_ROOT", "A folder a dataset's image paths may also point into (see --image-root)."),
    ]
    for field, (var, scale) in ENV.items():
        info = WebConfig.model_fields[field]
        rows.append(
            (var, (info.description or field) + _env_default(info.get_default(call_default_factory=True), scale, MB))
        )
    width = max(len(v) for v, _ in rows)
    lines = [
        textwrap.fill(d, 100, initial_indent=f"  {v.ljust(width)}  ", subsequent_indent=" " * (width + 4))
        for v, d in rows
    ]
    return "environment variables (open web: docs/open-web.md):\n" + "\n".join(lines)


def _env_default(value: Any, scale: float | None, mb: int) -> str:
    """' (KiB; default 2048)': the unit the variable is written in, and the default in that unit."""
    unit = {1024: "KiB", mb: "MiB", 3600: "hours"}.get(int(scale or 0))
    if value in (None, [], ""):
        return f" ({unit})" if unit else ""
    if scale:
        value = f"{value / scale:g}"
    elif isinstance(value, Path):
        value = str(value).replace(str(Path.home()), "~", 1)
    elif isinstance(value, float):
        value = f"{value:g}"
    return f" ({unit}; default {value})" if unit else f" (default {value})"


def build_parser(modules: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line, --benchmark choosing among the built-in benchmarks and those of `modules` (the
    --benchmark-module options)."""
    from glasses_rag.harness.benchmarks import benchmark_registry
    from glasses_rag.harness.cli import add_options
    from glasses_rag.harness.run_options import ROOTS, options

    registry = benchmark_registry(modules or [])
    description = textwrap.fill(
        "Run the agent on a benchmark's task (CRAG-MM's by default, or SuperGlasses, or one of your own) and score "
        "it. Defaults are fully offline: the embedded demo question set, the embedded local search index, the "
        "rule-based planner (heuristic) and the rule judge (approximate). Every agent option is a field of "
        "graph.config.AgentConfig (its model options of glasses_rag.models.vlm.ModelConfig): help and defaults "
        "come from there.",
        100,
    )
    p = _Parser(
        prog="python -m graph.run",
        description=description,
        epilog=environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.benchmarks = [b.name for b in registry.values() if len(b.tasks) == 1]
    tasks = sorted({t for b in registry.values() for t in b.tasks})
    add_options(p, options(), ROOTS, choices={"benchmark": list(registry), "task": tasks})
    return p


def resolve_benchmark(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that come from the benchmark (SuperGlasses: task 2, no local index, native images) and a --task it
    does not have as a usage error."""
    from glasses_rag.harness.benchmarks import benchmark_of, benchmark_registry

    spec = benchmark_of(args)
    if args.task is None:
        if spec.default_task is None:
            others = [b.name for b in benchmark_registry(args.benchmark_module).values() if b.default_task]
            alternatives = "".join(f", or --benchmark {name}" for name in others)
            p.error(f"--task is required: --task {spec.task_list()} ({spec.title}){alternatives}")
        args.task = spec.default_task
    elif args.task not in spec.tasks:
        p.error(f"--task {args.task}: {spec.title} has task {spec.task_list()}")
    args.data = spec.data if args.data is None else args.data
    args.search = spec.search if args.search is None else args.search
    args.image_prep = spec.image_prep if args.image_prep is None else args.image_prep
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser(benchmark_modules(argv))
    except (ValueError, ImportError) as e:  # a --benchmark-module that is not one
        print(f"error: {error_line(e)}", file=sys.stderr)
        return 2
    args = resolve_benchmark(parser, parser.parse_args(argv))
    configure_logging(args.verbose)
    if args.run_id is not None:
        from traces.store import check_run_id

        try:
            check_run_id(args.run_id)  # before anything is read or written: '..' would write outside --out
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    try:
        return session.run(args, argv)
    except RunRefused as e:
        print(f"error: {scrub_text(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the first turn (data, models); a run's own Ctrl-C prints its resume command
        print("interrupted before any turn ran", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, ImportError, OSError, RecursionError) as e:
        # bad paths, specs, data (nested too deeply, too) or missing optional packages: one line, no traceback
        print(f"error: {error_line(e)}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # after the clause above: RecursionError is a RuntimeError
        from glasses_rag.models.openai_client import BackendError

        if not isinstance(e, BackendError):
            raise
        print(f"error: {error_line(e)}", file=sys.stderr)  # e.g. /models asked at start-up and refused
        return 2


def error_line(e: BaseException) -> str:
    """`e` as one line, without the input a validation error quotes (a config file's api_key) and without
    credentials. Example: `error_line(ValueError("bad\nspec"))` -> "ValueError: bad spec"."""
    from pydantic import ValidationError

    if isinstance(e, ValidationError):
        found = e.errors(include_input=False, include_url=False)
        where = "; ".join(f"{'.'.join(map(str, d['loc'])) or '(top)'}: {d['msg']}" for d in found[:5])
        text = f"{e.error_count()} validation error(s) for {e.title}: {where}"
    elif isinstance(e, RecursionError):
        text = "the input is nested too deeply to read"
    else:
        text = str(e)
    return scrub_text(f"{type(e).__name__}: {' '.join(text.split())}")[:2000]


OUR_LOGGERS = ("glasses_rag", "tools", "traces", "graph")


def configure_logging(verbose: bool) -> None:
    """Warnings for everything; with -v, debug output from this project's own loggers only (a library at DEBUG
    logs request URLs, headers and payloads)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    scrub_log_handlers()  # every record, whichever logger: no URL userinfo, no key
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.NOTSET)


if __name__ == "__main__":
    from glasses_rag.core.calls import exit_process

    exit_process(main())  # cancels what is still in flight; never an abort in the interpreter's teardown
