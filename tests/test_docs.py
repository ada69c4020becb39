"""README and docs/ stay true: every test they name exists, every relative link resolves (anchors included), the
set-up commands are the ones CI runs, and the sample run in README is what the default run prints."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TESTS = ROOT / "tests"


def _test_functions() -> dict[str, set[str]]:
    """test file name -> the test functions it defines."""
    return {
        p.name: set(re.findall(r"^(?:async )?def (test_\w+)", p.read_text(encoding="utf-8"), re.M))
        for p in TESTS.glob("test_*.py")
    }


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _named_tests(text: str) -> list[tuple[str | None, str]]:
    """(file or None, test name) for every test named in a code span: `test_x.py::test_y`, `::test_y` after a
    file named in the same span, or a bare `test_y`."""
    out: list[tuple[str | None, str]] = []
    for span in _code_spans(text):
        for m in re.finditer(r"(?:(?:tests/)?(test_\w+\.py))?::(test_\w+\*?)", span):
            out.append((m.group(1), m.group(2)))
        if "::" not in span:
            out += [(None, name) for name in re.findall(r"^(test_\w+\*?)$", span.strip())]
    return out


def _exists(name: str, functions: set[str]) -> bool:
    return any(f.startswith(name[:-1]) for f in functions) if name.endswith("*") else name in functions


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_test_the_docs_name_exists(doc):
    text = doc.read_text(encoding="utf-8")
    by_file = _test_functions()
    every = set().union(*by_file.values())
    missing = []
    for file, name in _named_tests(text):
        if file is not None and file not in by_file:
            missing.append(f"{file} (no such file)")
        elif not _exists(name, by_file[file] if file else every):
            missing.append(f"{file or '<any>'}::{name}")
    for file in set(re.findall(r"\b(test_\w+\.py)\b", text)):
        if file not in by_file:
            missing.append(f"{file} (no such file)")
    assert not missing, missing


def test_the_readme_guarantees_name_a_test_on_every_row():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Guarantees", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| situation")]
    assert len(rows) >= 40
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert len(cells) == 3 and _named_tests(cells[2]), row  # file::test in the last column


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (except - and _), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, broken


def test_the_readme_set_up_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    set_up = readme.split("\n## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in ci.splitlines() if line.startswith((".venv/bin/python -m pytest", "python3 -m venv"))]
    assert len(commands) == 2
    for command in commands:
        assert f"```bash\n{command}\n```" in set_up, command
    assert readme.index("## Set up") < 40 * 80  # on the first screen


def _sample(readme: str) -> list[str]:
    block = readme.split("What `python -m graph.run --task 1` printed", 1)[1].split("```\n", 2)[1]
    return block.splitlines()


def test_the_readme_sample_is_the_default_run(tmp_path, capsys, monkeypatch):
    """The sample's header and summary lines are what `python -m graph.run --task 1` prints now (the default
    concurrency included), in that order; only paths, timings and counts of a shorter run may differ."""
    from glasses_rag.frontends.run import main
    from glasses_rag.harness.run_options import RunOptions

    sample = _sample((ROOT / "README.md").read_text(encoding="utf-8"))
    assert f"concurrency: {RunOptions.model_fields['concurrency'].default}" in sample
    monkeypatch.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))
    assert (
        main(["--task", "1", "--limit", "2", "--out", str(tmp_path), "--run-id", "r", "--no-progress", "--no-plot"])
        == 0
    )
    printed = capsys.readouterr().out.splitlines()

    def fixed(lines: list[str]) -> list[str]:  # the lines that do not depend on paths, timings or the run's size
        keep = (
            "policy:",
            "search:",
            "tools:  ",
            "self-check:",
            "judge:",
            "concurrency:",
            "CRAG-MM evaluation",
            "slice ",
        )
        return [line for line in lines if line.startswith(keep) and not re.match(r"tools:\s+\d", line)]

    def labels(lines: list[str]) -> list[str]:  # header and summary, in order, up to the report
        head = lines[: next(i for i, line in enumerate(lines) if line.startswith("CRAG-MM evaluation"))]
        return [re.split(r"[: ]", line)[0] for line in head]

    assert fixed(sample) == fixed(printed)
    assert labels(sample) == labels(printed)


def test_the_install_command_gets_torch_from_the_cpu_index_and_says_python_3_11():
    """A fresh machine has no local wheel folder: the pinned CPU torch must come from PyTorch's index, given inside
    the command (not in a sentence above it), and the Python version is said next to the command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    set_up = readme.split("\n## Set up", 1)[1].split("\n## ", 1)[0]
    install = next(line for line in set_up.splitlines() if line.startswith("python3 -m venv"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    torch = next(d for d in project["dependencies"] if d.startswith("torch=="))
    assert f'--no-deps --extra-index-url https://download.pytorch.org/whl/cpu "{torch}"' in install  # torch alone
    assert install.endswith('.venv/bin/pip install -e ".[test]"')  # the project itself without the extra index
    assert project["requires-python"] == ">=3.11,<3.12" and "Python 3.11" in set_up.split("```", 1)[0]


def _error_examples(readme: str) -> list[tuple[list[str], str]]:
    block = readme.split("A mistake is one line on stderr", 1)[1].split("```\n", 2)[1]
    lines = block.splitlines()
    return [(shlex.split(cmd[2:])[3:], out) for cmd, out in zip(lines[::2], lines[1::2], strict=True)]


def test_the_readme_error_examples_are_what_the_cli_prints(tmp_path, capsys, monkeypatch):
    """Each `$ python -m graph.run ...` line of README's error sample prints exactly the line under it, alone."""
    from glasses_rag.frontends.run import main

    monkeypatch.setenv("GLASSES_DEMO_DIR", str(ROOT / "data" / "demo"))
    examples = _error_examples((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(examples) == 4
    for argv, expected in examples:
        try:
            rc = main([*argv, "--no-progress", "--out", str(tmp_path)])
        except SystemExit as e:  # argparse's own exit
            rc = e.code
        out = capsys.readouterr()
        assert rc == 2 and not out.out, argv
        assert out.err.splitlines() == [expected], argv
