"""The public entry points document their arguments (`Args:`) and carry a short example, and every example runs."""

from __future__ import annotations

import doctest

import pytest

from glasses_rag.policies.protocol import Policy
from graph.agent import Agent
from graph.build import build_agent
from tools.base import ToolOutput
from tools.capability import Capability
from tools.registry import tool
from traces.schema import TurnTrace

ENTRY_POINTS = {
    "tool": tool,
    "Capability": Capability,
    "ToolOutput": ToolOutput,
    "build_agent": build_agent,
    "Agent.run_turn": Agent.run_turn,
    "Policy": Policy,
    "TurnTrace": TurnTrace,
}
# where an entry point's example lives when not in its own docstring (a method's example in its class's, which keeps
# the method within the size limit of tests/test_architecture.py)
EXAMPLE_IN = {"Agent.run_turn": Agent}


def run_examples(name: str, obj: object) -> doctest.TestResults:
    """Run the doctest examples of `obj`'s own docstring (not its members'); failures are reported on stdout."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder(recurse=False).find(obj, name, globs={}):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_entry_point_has_args_and_an_example_that_runs(name):
    documented, example = ENTRY_POINTS[name], EXAMPLE_IN.get(name, ENTRY_POINTS[name])
    assert "Args:" in (documented.__doc__ or ""), f"{name}: no Args: section"
    assert ">>> " in (example.__doc__ or ""), f"{name}: no example"
    result = run_examples(name, example)
    assert result.attempted >= 2 and result.failed == 0, result


def test_a_wrong_example_fails():
    def wrong():
        """
        >>> 1 + 1
        3
        """

    assert run_examples("wrong", wrong).failed == 1
