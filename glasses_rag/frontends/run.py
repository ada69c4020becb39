"""Run a CRAG-MM task end to end: `python -m graph.run --task {1,2,3}`.

By default everything is offline and embedded: the demo benchmark (generated on first use), the local
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

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        from glasses_rag.harness.cli import convert
        from glasses_rag.harness.run_options import ROOTS, options

        args = task_alias(list(sys.argv[1:] if args is None else args))
        parsed = convert(self, super().parse_args(args, namespace), options(), ROOTS)
        for opt in options():
            if opt.path.startswith("run.") and getattr(parsed, opt.name) is None:
                info = ROOTS["run"].model_fields[opt.path.split(".")[1]]
                setattr(parsed, opt.name, info.get_default(call_default_factory=True))
        return parsed

    def error(self, message: str) -> Any:  # type: ignore[override]
        """One line, not the 45-line usage: what was wrong and where the options are listed."""
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists every option)\n")


def task_alias(argv: list[str]) -> list[str]:
    """`--task superglasses` is read as `--benchmark superglasses` (SuperGlasses has one task of its own)."""
    out: list[str] = []
    for i, a in enumerate(argv):
        if a == "--task=superglasses" or (a == "superglasses" and i > 0 and argv[i - 1] == "--task"):
            if out and out[-1] == "--task":
                out.pop()
            out += ["--benchmark", "superglasses"]
        else:
            out.append(a)
    return out


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
        ("GLASSES_DEMO_DIR", "Where the demo benchmark is generated (default data/demo under the working directory)."),
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


def build_parser() -> argparse.ArgumentParser:
    from glasses_rag.harness.cli import add_options
    from glasses_rag.harness.run_options import ROOTS, options

    description = textwrap.fill(
        "Run the agent on a CRAG-MM task (or SuperGlasses) and score it. Defaults are fully offline: the embedded "
        "demo benchmark, the embedded local search index, the rule-based planner (heuristic) and the rule judge "
        "(approximate). Every agent option is a field of graph.config.AgentConfig (its model options of "
        "glasses_rag.models.vlm.ModelConfig): help and defaults come from there.",
        100,
    )
    p = _Parser(
        prog="python -m graph.run",
        description=description,
        epilog=environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(p, options(), ROOTS)
    return p


def resolve_benchmark(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on the benchmark (SuperGlasses: task 2, no local index, native images)."""
    sg = args.benchmark == "superglasses"
    if args.task is None:
        if not sg:
            p.error("--task is required: --task 1, 2 or 3 (CRAG-MM), or --benchmark superglasses")
        args.task = 2
    if args.search is None:
        args.search = "none" if sg else "local"
    if args.image_prep is None:
        args.image_prep = "native" if sg else "harness"
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
