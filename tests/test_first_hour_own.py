"""A researcher's first hour, round 2 (issue 41), continued: own data and own tools, the reply formats a small model
reads, run names, the run diff, the chart and the README's figures. Each test runs the command the user ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_first_hour import ENV, ROOT, _one_error_line, _run

# ---- item 9: own data ----------------------------------------------------------------------------------------------

QUESTION = """single_turn:
- entity: falcon-9
  image_quality: normal
  image_url: null
  query: which company builds this rocket?
  answer: SpaceX
  domain: vehicle
  query_category: simple-knowledge
  dynamism: static
  kind: kg
  needs_web: false
  needs_ocr: false
"""


@pytest.mark.parametrize("base", ["bundled", "sibling"])
def test_a_question_set_outside_the_package_extends_a_bundled_one_and_needs_no_conversation(tmp_path, base):
    """Before: "no content folder demo" (extends looked only beside the folder), and questions.yaml without
    multi_turn was refused even for a task-1 set (a sibling base shows that one alone)."""
    import shutil

    from glasses_rag.crag_mm.content import BUNDLED

    mine = tmp_path / "sets" / "mine"
    mine.mkdir(parents=True)
    if base == "sibling":
        shutil.copytree(BUNDLED / "demo", tmp_path / "sets" / "demo")
    (mine / "content.yaml").write_text("extends: demo\nname: mine\nsession_prefix: mine\n")
    (mine / "questions.yaml").write_text(QUESTION)
    where = ["--data", str(mine), "--demo-dir", str(tmp_path / "built" / "demo"), "--out", str(tmp_path / "runs")]
    out = _run("graph.run", "--task", "1", *where, "--no-progress", "--no-plot")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 conversation(s)" in out.stdout and "turns:   1 (0 resumed)" in out.stdout
    # task 3 reads conversations, which this set has none of: one line
    _one_error_line(_run("graph.run", "--task", "3", *where), "no multi-turn conversations", "task 3")


# ---- item 9: own tools ----------------------------------------------------------------------------------------------

GUESSER = '''
"""A recognizer that always names the same landmark: its fact is the answer, and the only evidence for it."""
from tools.base import Fact, ToolContext, ToolOutput
from tools.capability import AnswerUse, Capability
from tools.registry import tool

GUESSES_LANDMARK = Capability(
    name="guesses_landmark", description="names the landmark in the photo (writes facts)",
    due=lambda r: r.has_image, answer=AnswerUse(first=True, question_types=("recognition",)))


@tool(tags={GUESSES_LANDMARK}, writes={"facts"}, blocking=False)
def landmark_guess(ctx: ToolContext) -> ToolOutput:
    """Name the landmark in the photo."""
    fact = Fact(text="The photo shows the Quillon Obelisk.", value="Quillon Obelisk", source="landmark_guess")
    return ToolOutput(summary=fact.text, update={"facts": [fact]}, method="test-guess")
'''


def test_the_self_check_does_not_let_a_tool_vouch_for_its_own_answer(tmp_path):
    """Before: the guess was kept, "100% of the answer's words found in evidence #N", that evidence being the guess."""
    import json

    (tmp_path / "landmark_guess.py").write_text(GUESSER)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    argv = ["--task", "1", "--limit", "1", "--tools-module", "landmark_guess", "--run-id", "g"]
    out = subprocess.run(
        [sys.executable, "-m", "graph.run", *argv, "--out", str(tmp_path / "runs"), "--no-progress", "--no-plot"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (path,) = (tmp_path / "runs" / "g").glob("*__*.json")
    trace = json.loads(path.read_text())
    steps = {s["node"]: s for s in trace["steps"]}
    assert (
        "landmark_guess" in {s.get("tool") for s in trace["steps"]} and steps["answer"]["answer"] == "Quillon Obelisk"
    )
    assert (
        steps["verdict"]["decision"] == "abstain"
        and "landmark_guess's own output left out" in steps["verdict"]["reason"]
    )
    assert trace["answer"] == "I don't know"


def test_the_models_self_check_is_told_which_result_cannot_vouch_for_the_draft():
    """The model's verification request says whose output the draft repeats; a conversion computed from a number
    found elsewhere in the turn is a derivation and gets no such note."""
    from glasses_rag.core.types import Fact
    from glasses_rag.policies.model.policy import ModelPolicy
    from glasses_rag.policies.model.verify import ModelVerifier
    from glasses_rag.policies.protocol import PolicyView, StepSummary

    guess = Fact(text="The photo shows the Quillon Obelisk.", value="Quillon Obelisk", source="landmark_guess")
    view = PolicyView(
        task=1,
        question="what is this?",
        has_image=True,
        tools=[],
        done=[StepSummary(tool="landmark_guess")],
        remaining_steps=1,
        remaining_s=5.0,
        facts=[guess],
    )
    verifier = ModelVerifier(ModelPolicy(backend=None))
    assert "repeats what landmark_guess returned" in verifier.cove_messages(view, "Quillon Obelisk")[-1]["content"]
    converted = Fact(text="31 m is 101.7 ft", value="101.7 ft", source="length_converter")
    step = StepSummary(tool="length_converter", arguments={"value": 31.0, "from_unit": "m", "to_unit": "ft"})
    derived = view.model_copy(update={"facts": [converted], "done": [step], "question": "the 31 m tower in feet?"})
    assert "repeats what" not in verifier.cove_messages(derived, "101.7 ft")[-1]["content"]


def test_a_tool_beside_detect_crop_sees_the_whole_photo_and_after_it_the_crop():
    """What docs/tools.md now says: calls of one step see the state the step began with (no crop yet)."""
    from PIL import Image

    from glasses_rag.policies.protocol import ScriptedPolicy
    from glasses_rag.retrieval.search import NullSearch
    from graph.agent import TurnInput
    from graph.build import build_agent
    from graph.config import AgentConfig
    from tools import ToolContext, ToolOutput, tool
    from tools.detect_crop import detect_crop
    from tools.registry import ToolRegistry, tool_of

    seen = []

    @tool()
    def probe(ctx: ToolContext, when: str = "") -> ToolOutput:
        """Look at the photo.

        Args:
            when: which look this is
        """
        seen.append(ctx.focus_image().size)
        return ToolOutput(summary="looked")

    beside = {"action": "call_tool", "tool": "detect_crop", "parallel": [{"tool": "probe"}]}
    after = {"action": "call_tool", "tool": "probe", "arguments": {"when": "after"}}
    # ScriptedPolicy picks decision number len(view.done): the parallel step finishes two calls at once
    policy = ScriptedPolicy([beside, beside, after], answer={"answer": "x", "confidence": 0.9})
    registry = ToolRegistry([tool_of(detect_crop), probe.__tool__])
    agent = build_agent(AgentConfig(warm_up=False), search=NullSearch(), policy=policy, registry=registry)
    photo = Image.new("RGB", (640, 480), (200, 200, 200))
    photo.paste((20, 20, 160), (300, 200, 420, 300))
    trace = agent.run_turn(TurnInput(task=1, session_id="s", interaction_id="s-0", question="what is it?", image=photo))
    crop = next(s for s in trace.tool_calls() if s.tool == "detect_crop").update["crop"]
    assert seen == [(640, 480), (crop["x1"] - crop["x0"], crop["y1"] - crop["y0"])] and seen[1] != seen[0]
    docs = (ROOT / "docs" / "tools.md").read_text()
    assert "gets the **whole photo** from `ctx.focus_image()`" in docs


PRESET = """name: mine
title: Guess first
paper: "none: a test of this project"
summary: The model loop with a landmark guesser.
policy: model-loop
tools: [landmark_guess, image_search]
verification:
  mode: model-single
  follows: "chain-of-verification"
"""


def test_the_presets_command_checks_a_preset_that_uses_a_tools_module_tool(tmp_path):
    """Before: `--tools-module` was read as one more preset name, and the preset's own tool was unknown."""
    (tmp_path / "landmark_guess.py").write_text(GUESSER)
    (tmp_path / "mine.yaml").write_text(PRESET)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}

    def presets(*argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "glasses_rag.policies.presets", str(tmp_path / "mine.yaml"), *argv]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    out = presets("--tools-module", "landmark_guess")
    assert out.returncode == 0 and out.stdout.startswith("mine: Guess first") and not out.stderr, out.stderr
    _one_error_line(presets(), "unknown tool 'landmark_guess'", "--tools-module")


# ---- item 11: names, summaries, citations, charts ------------------------------------------------------------------


def test_preset_descriptions_cite_papers_by_title_and_arxiv_id_not_a_file_name():
    """(Fixed with issue 39; kept here as the first hour met it.) No `000_5e3067a69ddecf26.txt` in a description."""
    import re

    out = _run("glasses_rag.policies.presets")
    assert out.returncode == 0, out.stderr
    papers = [line.split("paper: ", 1)[1] for line in out.stdout.splitlines() if line.startswith("  paper: ")]
    assert len(papers) == 7 and not any(re.search(r"\d{3}_[0-9a-f]{16}", p) for p in papers), papers
    assert sum("arXiv 2510.26160" in p for p in papers) >= 2 and any("arXiv 2602.22683" in p for p in papers)


# ---- item 8: no placeholder in a reply-format example --------------------------------------------------------------

# "<entity name>", "<one sentence>", "<answer or $idk>" (not a paper's markup such as <DOC>)
PLACEHOLDER = r'"<[^"<>\n]{1,80}>"|<[a-z$][^<>\n]{0,80} [^<>\n]{0,80}>'


def _texts(message: dict) -> list[str]:
    content = message.get("content") or ""
    return [content] if isinstance(content, str) else [p.get("text", "") for p in content if isinstance(p, dict)]


def test_no_request_shows_a_placeholder_a_small_model_could_copy(tmp_path):
    """Before: Gemma 3 270M wrote `"entity": "<entity name>"` and rationale "<one sentence>" from the reply-format
    example (and, shown a made-up example instead, wrote its made-up answer into every turn). Every request of a
    model-loop run (decisions, answers, self-checks) and every bundled request template (the presets' too) names the
    keys in words and shows no example."""
    import re

    from support import model_loop_run

    from prompts import __file__ as prompts_init

    bodies = model_loop_run(tmp_path, "loop")
    shown = [text for body in bodies for message in body["messages"] for text in _texts(message)]
    for text in shown:
        assert not re.search(PLACEHOLDER, text), re.search(PLACEHOLDER, text)
    assert len(bodies) >= 8 and any("by chain of verification" in t for t in shown)  # decisions and self-checks
    folder = Path(prompts_init).parent
    templates = [p for p in folder.iterdir() if p.suffix in (".txt", ".yaml") and not p.name.startswith("judge_")]
    assert len(templates) > 20
    for p in templates:
        assert not re.search(PLACEHOLDER, p.read_text(encoding="utf-8")), (
            p.name,
            re.search(PLACEHOLDER, p.read_text()),
        )


def test_label_names_the_run_folder_and_a_bad_label_is_one_line(tmp_path):
    out = _run("graph.run", "--task", "1", "--limit", "1", "--label", "no-ocr", "--out", str(tmp_path), "--no-plot")
    assert out.returncode == 0, out.stderr[-2000:]
    (run,) = tmp_path.iterdir()
    assert run.name.startswith("task1-no-ocr-") and f"traces: {run}" in out.stdout
    _one_error_line(_run("graph.run", "--task", "1", "--label", "../x", "--out", str(tmp_path)), "--label")


def test_the_run_diff_shows_the_summary_and_what_differs_unless_asked_for_every_question(tmp_path):
    """Before: without --only, one block per question (every one of 48), the summary scrolled away."""
    runs = tmp_path / "runs"
    for run_id, tools in (("a", "image_search,ocr,detect_crop,query_decoupler,reranker"), ("b", "ocr")):
        done = _run(
            "graph.run", "--task", "1", "--limit", "8", "--tools", tools, "--run-id", run_id, "--out", str(runs)
        )
        assert done.returncode == 0, done.stderr[-2000:]
    default = _run("glasses_rag.frontends.diff", str(runs / "a"), str(runs / "b"))
    every = _run("glasses_rag.frontends.diff", str(runs / "a"), str(runs / "b"), "--all")
    assert default.returncode == every.returncode == 0, default.stderr
    blocks = [line for line in default.stdout.splitlines() if line.startswith("demo-st-")]
    assert "question(s) matching differ (the default" in default.stdout and 0 < len(blocks) < 8
    assert len([line for line in every.stdout.splitlines() if line.startswith("demo-st-")]) == 8


def test_a_slice_scoring_zero_has_a_visible_mark_on_the_chart(tmp_path, monkeypatch, capsys):
    """Before: a slice at 0 drew no bar, as if it had no data. Now each bar has its value, and a 0 a diamond."""
    import json

    import matplotlib.figure

    from glasses_rag.frontends.run import main

    monkeypatch.setenv("GLASSES_DEMO_DIR", ENV["GLASSES_DEMO_DIR"])
    figures = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k))
    )
    assert main(["--task", "1", "--limit", "6", "--out", str(tmp_path), "--run-id", "c", "--no-progress"]) == 0
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    (fig,) = figures
    zero = 0
    for ax, (key, groups) in zip(fig.axes, ((k, g) for k, g in report["slices"].items() if g)):
        marks = {round(y) for line in ax.lines for x, y in zip(line.get_xdata(), line.get_ydata()) if x == 0}
        texts = [t.get_text() for t in ax.texts]
        for i, name in enumerate(groups):
            value = groups[name]["truthfulness"]
            assert any(t.startswith(f" {value:+.3f}") for t in texts), (key, name, texts)
            if value == 0:
                zero += 1
                assert i in marks, (key, name)
    assert zero >= 1  # the test saw a slice at 0 (many one-turn slices are 0 by the official rule)
    capsys.readouterr()


def test_the_readme_says_the_planner_was_tuned_on_the_demo_next_to_its_figures():
    """Before: the Run section showed the demo's figures alone (docs/data.md said it was the tuning set)."""
    import re

    readme = (ROOT / "README.md").read_text()
    run = " ".join(readme.split("\n## Run\n", 1)[1].split("\n## ", 1)[0].split())
    assert "tuned on" in run and "docs/planner.md#figures" in run and "--data heldout" in run
    rows = {}
    for line in (ROOT / "docs" / "planner.md").read_text().splitlines():
        m = re.match(r"\| `(demo|heldout)` \| [^|]+ \| ([\d.]+) / [^|]+\| ([\d.]+) / [^|]+\| ([\d.]+) / ", line)
        if m:
            rows[m.group(1)] = m.group(2, 3, 4)
    assert " / ".join(rows["heldout"]) in run and " / ".join(rows["demo"]) in run
