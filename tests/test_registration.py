"""One registration rule (glasses_rag/core/registry.py): named lookups filled by explicit calls, read by name; and the
rule planner refuses, when the agent is built, a tool whose capability has an input nothing fills."""

from __future__ import annotations

import pytest
from support import make_agent

from glasses_rag.core.registry import Registry
from glasses_rag.policies.presets import bundled_presets, load_preset
from glasses_rag.policies.presets.routers import ROUTERS
from glasses_rag.policies.protocol import PolicyView
from glasses_rag.policies.rules import catalog
from glasses_rag.policies.rules.catalog import planner_catalog
from glasses_rag.policies.rules.named_parts import Catalog
from glasses_rag.policies.rules.rule_planner import RuleBasedPlanner
from graph.build import POLICIES
from graph.state import tool_spec
from tools import ToolOutput, default_registry
from tools.capability import BUILTIN, Capability
from tools.registry import ToolRegistry, tool


def test_a_registry_refuses_two_items_under_one_name_and_keeps_one_item_added_twice():
    reg: Registry[object] = Registry("widget")
    a, b = object(), object()
    reg.add("a", a)
    reg.add("a", a)  # the same object again: one entry
    assert list(reg) == ["a"] and reg["a"] is a
    with pytest.raises(ValueError, match="two widgets are named 'a'"):
        reg.add("a", b)


def test_a_lookup_by_an_unknown_name_is_one_line_naming_the_closest():
    reg = Registry("router", [("superlens-demand", 1), ("unsw-route", 2)])
    with pytest.raises(ValueError) as e:
        reg.lookup("superlens-demnd")
    assert str(e.value) == (
        "unknown router 'superlens-demnd' (did you mean 'superlens-demand'?); known: superlens-demand, unsw-route"
    )


def test_every_family_is_a_registry_read_by_name():
    for family in (
        BUILTIN,
        ROUTERS,
        POLICIES,
        bundled_presets(),
        default_registry()._tools,
        *vars(planner_catalog()).values(),
    ):
        assert isinstance(family, Registry), family
    assert list(POLICIES) == ["rule", "model"]
    assert load_preset("superlens").name and bundled_presets()["superlens"].name == "superlens.yaml"


def test_the_planner_catalog_holds_exactly_what_catalog_py_lists():
    cat = planner_catalog()
    listed = {"conditions": catalog.CONDITIONS, "slots": catalog.SLOTS, "queries": catalog.QUERIES}
    for kind, entries in listed.items():
        assert list(getattr(cat, kind)) == [n for n, _ in entries]
        assert all(getattr(cat, kind)[n] is fn for n, fn in entries)
    assert set(cat.sources) == {n for n, _ in catalog.SOURCES} | {"compare", "bridge"}
    assert not cat.sources["bridge"].final and not cat.sources["compare"].checked
    assert len(Catalog().conditions) == 0  # a new catalog is empty: importing the part modules filled nothing


# ---- a capability input nothing fills --------------------------------------------------------------------

LOOKS_UP = Capability("looks_up", "looks a name up (writes facts)", inputs=("name",), due=lambda r: True)


@tool(tags={LOOKS_UP}, writes={"facts"}, blocking=False)
def lookup(name: str) -> ToolOutput:
    """Look a name up."""
    return ToolOutput(text=name)


def test_the_rule_planner_refuses_at_build_a_capability_input_that_no_slot_fills():
    registry = ToolRegistry([*default_registry(), lookup.__tool__])
    with pytest.raises(ValueError, match=r"tool 'lookup': capability 'looks_up' passes 'name', which no planner slot"):
        make_agent(registry=registry)


def test_an_input_filled_by_the_capabilitys_own_hook_or_a_planner_slot_is_accepted():
    hooked = Capability(
        "looks_up", "looks a name up", inputs=("name",), slots={"name": lambda r: r.entity}, due=lambda r: True
    )
    by_slot = Capability("looks_up_entity", "looks the entity up", inputs=("entity",), due=lambda r: True)

    @tool(name="lookup", tags={hooked}, blocking=False)
    def hooked_tool(name: str) -> ToolOutput:
        """Look a name up."""
        return ToolOutput(text=name)

    @tool(name="lookup_entity", tags={by_slot}, blocking=False)
    def slot_tool(entity: str) -> ToolOutput:
        """Look the entity up."""
        return ToolOutput(text=entity)

    agent = make_agent(registry=ToolRegistry([*default_registry(), hooked_tool.__tool__, slot_tool.__tool__]))
    assert {"lookup", "lookup_entity"} <= set(agent.registry.names())


def test_a_view_built_by_hand_with_such_a_tool_is_an_error_not_a_silent_skip():
    planner = RuleBasedPlanner(embedder=None)
    view = PolicyView(
        task=2,
        question="who is Ada Lovelace?",
        has_image=False,
        tools=[tool_spec(lookup.__tool__)],
        remaining_steps=4,
        remaining_s=5.0,
    )
    with pytest.raises(ValueError, match="capability 'looks_up': no provider for its input 'name'"):
        planner.decide(view)
