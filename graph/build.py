"""`build_agent`: the one place an agent is wired from its configuration.

The CLI (graph/run.py), the starter-kit adapter (glasses_rag/frontends/starter_kit.py), the benchmarks and the tests all
build their agent with `build_agent(AgentConfig)`, so the same question gets the same answer everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glasses_rag.core.registry import Registry
from graph.agent import Agent
from graph.config import DEFAULT_TOOL_PROFILE, AgentConfig
from graph.state import tool_spec
from tools.registry import ToolProfile, ToolRegistry

log = logging.getLogger(__name__)


def load_tools(config: AgentConfig) -> ToolRegistry:
    """The agent's tools: the built-in ones plus those of `config.tools.modules`, passed explicitly."""
    from tools import default_registry

    return default_registry(config.tools.modules)


def rule_planner(config: AgentConfig, resources: Any) -> Any:
    """The rule-based planner (image-match floor from the config, else the search backend's)."""
    from glasses_rag.policies.rules.rule_planner import RuleBasedPlanner

    planner = config.planner
    if planner.min_image_score is None:
        floor = getattr(resources.search, "image_score_floor", None)
        planner = planner.model_copy(update={"min_image_score": 0.6 if floor is None else floor})
    return RuleBasedPlanner(resources.text_embedder, planner)


def model_policy(config: AgentConfig, resources: Any) -> Any:
    """The model loop over the configured model (`config.policy`: a spec string or a ModelConfig)."""
    from glasses_rag.policies.model.policy import make_model_policy

    return make_model_policy(config.policy)


# The policy kinds, listed here and read by name (glasses_rag/core/registry.py): `AgentConfig.policy` "rule" names
# the rule planner, anything else configures a model; a preset's policy kind wraps one of them (presets/assemble.py).
POLICIES: Registry[Callable[[AgentConfig, Any], Any]] = Registry(
    "policy", [("rule", rule_planner), ("model", model_policy)]
)


def make_policy(config: AgentConfig, resources: Any) -> Any:
    """The configured policy: `POLICIES["rule"]` for `policy="rule"`, else `POLICIES["model"]`."""
    return POLICIES.lookup("rule" if config.policy == "rule" else "model")(config, resources)


def make_verifier(config: AgentConfig, policy: Any) -> Any:
    """The policy's own verifier when it has one (a model self-check), else the named heuristic; None when off."""
    if config.self_check == "off":
        return None
    from glasses_rag.policies.self_check import EvidenceSupportVerifier

    own = getattr(policy, "verifier", None)
    return own(config.verify_mode) if callable(own) else EvidenceSupportVerifier()


def tool_profile_for(config: AgentConfig, given: ToolProfile | None) -> ToolProfile:
    """The tool profile `config.tools.profile` names: `given` (a benchmark's, from the caller that knows it), else
    the default one; a ValueError when the names differ or a benchmark's profile was not handed over."""
    profile = given if given is not None else DEFAULT_TOOL_PROFILE
    if profile.name != config.tools.profile:
        raise ValueError(
            f"the configuration names the tool profile {config.tools.profile!r}, but the agent was given "
            f"{profile.name!r}: build it with that benchmark's profile, build_agent(config, "
            f"tool_profile=<its Benchmark>.tools) (the harness does)"
        )
    return profile


def search_backend(config: AgentConfig, search: Any, task: int | None, index_dir: Path | None) -> Any:
    """The agent's search backend: `search` (wrapped in the search cache unless it is off), else the one
    `config.search` configures over data already prepared (`index_dir`: the index the run's data comes with)."""
    from glasses_rag.retrieval.cache import CachedSearch
    from glasses_rag.retrieval.search import as_search_backend, make_search

    if search is None:
        return make_search(config.search, config.models, web=task != 1, index_dir=index_dir)
    backend = as_search_backend(search)
    if config.search.cache and not isinstance(backend, CachedSearch):
        backend = CachedSearch(backend, max_entries=config.search.cache_entries)
    return backend


def build_agent(
    config: AgentConfig | None = None,
    *,
    search: Any = None,
    policy: Any = None,
    registry: ToolRegistry | None = None,
    run_id: str | None = None,
    task: int | None = None,
    index_dir: Path | None = None,
    tool_profile: ToolProfile | None = None,
) -> Agent:
    """An Agent from one configuration: the preset applied, the tools, the search backend over data already prepared
    (building an agent never writes data), the policy (`POLICIES`, by name) and its check of the tools, the self-check.

    Args:
        config: the whole configuration (`AgentConfig()`: the defaults of the CLI; its preset, if any, applied).
        search: a backend overriding `config.search` (the starter kit's official pipeline), cached unless it is off.
        policy: a policy that overrides the configured one (tests, scripted policies).
        registry: the tools, overriding the configured ones (default: the built-in ones and `config.tools.modules`').
        run_id: the run's id, written into every trace (default: a fresh one).
        task: 1 builds the search backend without web search.
        index_dir: the index the run's data comes with, when `config.search.index_dir` names none (prepared before).
        tool_profile: the benchmark's profile `config.tools.profile` names (default: `DEFAULT_TOOL_PROFILE`).

    Example:
        >>> from glasses_rag.policies.protocol import ScriptedPolicy
        >>> from glasses_rag.retrieval.search import NullSearch
        >>> from graph.agent import TurnInput
        >>> from graph.build import AgentConfig, ToolRegistry, build_agent
        >>> from tools import Fact, ToolContext, ToolOutput, tool
        >>> @tool(writes={"facts"})
        ... def echo(ctx: ToolContext, text: str) -> ToolOutput:
        ...     '''Repeat a text.'''
        ...     return ToolOutput(summary=text, update={"facts": [Fact(text=text, source="echo")]})
        >>> policy = ScriptedPolicy([{"action": "call_tool", "tool": "echo", "arguments": {"text": "hi"}}],
        ...                         answer={"answer": "hi", "confidence": 0.9})
        >>> agent = build_agent(AgentConfig(warm_up=False, self_check="off"), search=NullSearch(), policy=policy,
        ...                     registry=ToolRegistry([echo.__tool__]), run_id="example")
        >>> trace = agent.run_turn(TurnInput(task=1, session_id="s1", interaction_id="s1-0", question="say hi"))
        >>> [c.tool for c in trace.tool_calls()], trace.answer, trace.ended_by
        (['echo'], 'hi', 'answer')
    """
    from glasses_rag.models.resources import Resources, limit_cpu_threads
    from glasses_rag.policies.presets import PresetBuild

    config = (preset := PresetBuild.of(config or AgentConfig())).config  # its tools, self-check, thresholds applied
    profile = tool_profile_for(config, tool_profile)
    limit_cpu_threads(config.cpu_threads)
    if registry is None:  # built from the configuration: a tool that lacks a key or a setting here is not offered
        registry = load_tools(config).offering_available(profile)
    resources = Resources(search_backend(config, search, task, index_dir), config.models)
    policy = policy if policy is not None else preset.policy(resources, make_policy)
    check = getattr(policy, "check_tools", None)  # e.g. the rule planner: a tool it could never call is an error
    if callable(check):
        check(registry)
    verifier, llm = preset.verifier(policy, resources, make_verifier), getattr(policy, "backend", None)
    agent = Agent(policy, resources, config, registry, verifier, llm=llm, run_id=run_id, tool_profile=profile)
    if config.warm_up:
        warm_up(agent, task)
    return agent


def warm_up(agent: Agent, task: int | None) -> None:
    """Models loaded and, for a policy that can, its first decision's grammar compiled (for every task when `task`
    is None): start-up work that must not come out of the first turn's budget."""
    agent.resources.warm_up()
    warm = getattr(agent.policy, "warm_up", None)
    if callable(warm):
        used = agent.config.tools
        # no task given (a run over several tasks): every task's first decision, each task's tools differ
        tasks = [task] if task is not None else sorted({k for t in agent.registry for k in t.tasks})
        offered = [agent.registry.for_task(k, used.allowed, agent.tool_profile) for k in tasks]
        warm(tool_sets=[[tool_spec(t) for t in tools] for tools in offered if tools])
