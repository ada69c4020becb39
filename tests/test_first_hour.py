"""A researcher's first hour, round 2 (issue 41): each mistake met on the command line is one line on stderr and a
non-zero exit, never a run that "succeeds" without what was asked for. Each test runs the command the user ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GLASSES_DEMO_DIR": str(ROOT / "data" / "demo"),
}


def _run(module: str, *argv: str, timeout: float = 180, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _one_error_line(out: subprocess.CompletedProcess, *says: str) -> str:
    """The command failed with one line on stderr (no traceback) that says each of `says`."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0, out.stdout[-2000:]
    assert len(lines) == 1 and all(s in lines[0] for s in says), lines[-20:]
    return lines[0]


# ---- item 1: a tool name that is not one, or one the task does not allow ------------------------------------------


@pytest.mark.parametrize(
    "tools,says",
    [
        ("image_serch", ["unknown tool 'image_serch'", "did you mean 'image_search'"]),
        ("web_search", ["'web_search' is not allowed in task 1", "image_search"]),
        ("image_search,ocrr", ["unknown tool 'ocrr'", "did you mean 'ocr'"]),
    ],
)
def test_a_tool_name_the_task_does_not_offer_is_one_line_and_no_run(tmp_path, tools, says):
    """Before: an empty `tools:` line, every question run with 0 tool calls, exit 0 (an ablation silently ruined)."""
    out = _run("graph.run", "--task", "1", "--tools", tools, "--limit", "1", "--no-progress", "--out", str(tmp_path))
    _one_error_line(out, *says)
    assert not out.stdout and not list(tmp_path.glob("*/*__*.json"))


def test_a_preset_narrowed_to_tools_it_does_not_use_is_an_error(tmp_path):
    out = _run(
        "graph.run", "--task", "2", "--preset", "superlens", "--tools", "ocr", "--limit", "1", "--out", str(tmp_path)
    )
    _one_error_line(out, "--tools ocr", "superlens")
