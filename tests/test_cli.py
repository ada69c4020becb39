"""The command line is generated from the configuration models: one default per option, the field's; bad values
are usage errors; the environment variables are listed; -v raises only this project's loggers."""

from __future__ import annotations

import logging
import re

import pytest

from glasses_rag.frontends.run import build_parser, configure_logging
from glasses_rag.harness.cli import field_at
from glasses_rag.harness.run_options import ROOTS, options
from glasses_rag.harness.session import agent_config_from_args
from graph.config import AgentConfig


def test_help_prints_each_default_once_and_the_environment_variables(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    flat = re.sub(r"\s+", " ", text)
    for opt in options():
        start = flat.index(f"{opt.flag} ") if f"{opt.flag} " in flat else flat.index(opt.flag)
        nxt = min((flat.find(" --", start + len(opt.flag) + 1) % (len(flat) + 1)), len(flat))
        assert flat[start:nxt].count("(default:") <= 1, opt.flag
    for var in ("GLASSES_WEB_ALLOW", "SERPAPI_API_KEY", "GLASSES_WEB_CACHE", "GLASSES_IMAGE_DIR"):
        assert var in text


def test_every_option_sets_an_existing_field_and_shows_its_default():
    for opt in options():
        info = field_at(ROOTS, opt.path)  # raises for a field that does not exist
        if opt.kind == "value" and info.default not in (None, False) and info.default_factory is None:
            assert opt.flag in build_parser().format_help()


def test_no_option_means_the_library_default_agent_and_options_reach_their_fields():
    p = build_parser()
    assert agent_config_from_args(p.parse_args(["--task", "2"])) == AgentConfig(tools={"profile": "crag-mm"})
    cfg = agent_config_from_args(
        p.parse_args(
            [
                "--task",
                "2",
                "--budget",
                "3",
                "--image-tie-margin",
                "0.02",
                "--tools",
                "ocr, image_search",
                "--tools-module",
                "a",
                "--tools-module",
                "b",
                "--search",
                "none",
            ]
        )
    )
    assert cfg.budget.budget_s == 3.0 and cfg.planner.image_tie_margin == 0.02
    assert cfg.tools.allowed == ["ocr", "image_search"] and cfg.tools.modules == ["a", "b"]
    assert cfg.search.backend == "none"


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--budget", "0"], "--budget"),
        (["--budget", "inf"], "--budget"),
        (["--abstain-below", "2"], "--abstain-below"),
        (["--limit", "0"], "--limit"),
        (["--max-steps", "-1"], "--max-steps"),
        (["--task", "4"], "--task"),
    ],
)
def test_a_bad_value_is_a_one_line_usage_error(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--task", "1", *argv] if "--task" not in argv else argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_verbose_raises_our_loggers_only():
    try:
        configure_logging(True)
        assert logging.getLogger("graph.nodes").getEffectiveLevel() == logging.DEBUG
        assert logging.getLogger("glasses_rag.web.serpapi").getEffectiveLevel() == logging.DEBUG
        assert logging.getLogger("httpx").getEffectiveLevel() >= logging.WARNING
        assert logging.getLogger("urllib3").getEffectiveLevel() >= logging.WARNING
    finally:
        configure_logging(False)


def test_a_negated_flag_says_what_it_does_not_what_the_field_does(capsys):
    """--no-stream used to show the `stream` field's own text ("stream replies"): the opposite of the flag."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    flat = re.sub(r"\s+", " ", capsys.readouterr().out)
    negated = [opt for opt in options() if opt.kind == "negate"]
    assert negated
    for opt in negated:
        assert opt.help, opt.flag  # the field's description describes the field, not its negation
        words = re.sub(r"\s+", " ", opt.help)
        assert f"{opt.flag} {words}" in flat
    assert "--no-stream openai: ask for whole replies" in flat


def test_the_environment_variables_show_their_units_and_defaults():
    from glasses_rag.frontends.run import environment_help

    flat = re.sub(r"\s+", " ", environment_help())
    assert "GLASSES_WEB_TIMEOUT Total seconds per request" in flat and "(default 15)" in flat
    assert "(KiB; default 2048)" in flat and "(hours; default 24)" in flat  # written in KiB and hours, not bytes
    assert "(default ~/.cache/glasses-rag/web)" in flat and "GLASSES_DEMO_DIR" in flat
