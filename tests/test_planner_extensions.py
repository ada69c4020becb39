"""Four tools added as ONE new file each (written here, loaded with ToolsConfig.modules), used by the rule-based planner
with no plan-table row and no other edit: a unit converter with a new capability, a currency converter (new
capability, a currency the planner does not know built in), an image captioner whose fact the planner answers from,
and a new web search that the SuperGlasses export labels "Text Search" from its capability."""

from __future__ import annotations

import sys
import textwrap

import pytest
from test_planner import IDK, LIGHTHOUSE, PAGES, FakeSearch, ask

from glasses_rag.crag_mm.dataset import decode_image, load_all
from glasses_rag.crag_mm.demo import ensure_demo
from glasses_rag.policies.rules.answer_types import expected_answer
from glasses_rag.superglasses.logs import TEXT, hop_tool, to_superglasses
from graph.agent import TurnInput
from graph.build import build_agent
from graph.config import AgentConfig, ToolsConfig
from traces.schema import AnswerEvent, ToolCallEvent, VerdictEvent

LENGTH_CONVERTER = '''
    """A length converter with a capability of its own (not the built-in converts_units)."""
    from tools.base import Fact, ToolOutput
    from tools.capability import AnswerUse, Capability
    from tools.registry import tool

    TO_M = {"m": 1.0, "ft": 0.3048, "km": 1000.0, "mi": 1609.344}
    # inputs named like the planner's own slots: it offers the quantity to convert and the unit asked for
    CONVERTS_LENGTH = Capability(
        name="converts_length", description="converts a length to another unit (writes facts)",
        inputs=("value", "from_unit", "to_unit"), due=lambda r: r.question_type == "conversion",
        answer=AnswerUse(kind="quantity", question_types=("conversion",)))


    @tool(tags={CONVERTS_LENGTH}, writes={"facts"}, blocking=False)
    def length_converter(value: float, from_unit: str, to_unit: str) -> ToolOutput:
        """Convert a length.

        Args:
            value: the length
            from_unit: its unit (m, ft, km, mi)
            to_unit: the unit wanted
        """
        out = value * TO_M[from_unit] / TO_M[to_unit]
        fact = Fact(text=f"{value:g} {from_unit} is {out:.1f} {to_unit}", value=f"{out:.1f} {to_unit}",
                    source="length_converter")
        return ToolOutput(summary=fact.text, update={"facts": [fact]}, method="test-length")
'''

CURRENCY_CONVERTER = r'''
    """A currency converter: a new capability whose answers carry a currency the planner does not know built in."""
    import re

    from tools.base import Fact, ToolOutput
    from tools.capability import AnswerUse, Capability
    from tools.registry import tool

    PER_DOLLAR = {"USD": 1.0, "EUR": 0.92, "CHF": 0.88}
    SHOWN = {"USD": "${:.2f}", "EUR": "€{:.2f}", "CHF": "CHF {:.2f}"}
    ASKED = {"euro": "EUR", "euros": "EUR", "swiss franc": "CHF", "swiss francs": "CHF",
             "franc": "CHF", "francs": "CHF"}


    def asked_currency(r):
        m = re.search(r"\bin (swiss francs?|francs?|euros?)\b", r.question, re.I)
        return ASKED[m.group(1).lower()] if m else None


    def price_amount(r):
        price = r.answer_of("money") or ""
        m = re.search(r"\d+(?:\.\d+)?", price.replace(",", ""))
        return float(m.group(0)) if m else None


    def price_currency(r):
        price = r.answer_of("money") or ""
        return "USD" if "$" in price or "dollar" in price.lower() else None


    CONVERTS_CURRENCY = Capability(
        name="converts_currency", description="converts a price into another currency (writes facts)",
        inputs=("amount", "from_currency", "to_currency"),
        slots={"amount": price_amount, "from_currency": price_currency, "to_currency": asked_currency},
        due=lambda r: asked_currency(r) is not None and r.answer_of("money") is not None,
        answer=AnswerUse(kind="money", units=("CHF", "franc", "francs", "Swiss franc", "Swiss francs"), first=True))


    @tool(tags={CONVERTS_CURRENCY}, writes={"facts"}, blocking=False)
    def currency_convert(amount: float, from_currency: str, to_currency: str) -> ToolOutput:
        """Convert an amount of money.

        Args:
            amount: the amount
            from_currency: its currency code (USD, EUR, CHF)
            to_currency: the currency wanted
        """
        shown = SHOWN[to_currency].format(amount / PER_DOLLAR[from_currency] * PER_DOLLAR[to_currency])
        fact = Fact(text=f"{SHOWN[from_currency].format(amount)} is {shown}", value=shown, source="currency_convert")
        return ToolOutput(summary=fact.text, update={"facts": [fact]}, method="test-rates")
'''

CAPTIONER = '''
    """An image captioner: its caption (a Fact) answers what the photo shows when no image match is confident."""
    from tools.base import Fact, ToolContext, ToolOutput
    from tools.capability import AnswerUse, Capability
    from tools.registry import tool

    CAPTIONS_IMAGE = Capability(
        name="captions_image", description="describes the photo in words (writes facts)",
        due=lambda r: r.has_image and r.ran("finds_entity") and r.entity is None,
        answer=AnswerUse(first=False, question_types=("recognition",)))


    @tool(tags={CAPTIONS_IMAGE}, writes={"facts"}, blocking=False)
    def reverse_image_caption(ctx: ToolContext) -> ToolOutput:
        """Describe the photo in one sentence."""
        caption = "a white lighthouse on a stone pier"
        fact = Fact(text=f"The photo shows {caption}.", value=caption, source="reverse_image_caption", confidence=0.9)
        return ToolOutput(summary=fact.text, update={"facts": [fact]}, method="test-captioner")
'''

SEARCH = '''
    """Another web search, with the built-in searches_web capability."""
    from tools.base import Hit, ToolContext, ToolOutput
    from tools.registry import tool


    @tool(tasks={2, 3}, tags={"searches_web"}, writes={"evidence"}, blocking=False)
    def almanac_search(ctx: ToolContext, query: str) -> ToolOutput:
        """Search an offline almanac.

        Args:
            query: search keywords
        """
        hits = [Hit(source="web", score=0.9, url="https://almanac.test/harbor", title="Harbor Lighthouse almanac",
                    snippet="The Harbor Lighthouse was painted white in 1901.", query=query)]
        return ToolOutput(summary="1 entry", update={"evidence": hits}, keywords=query, method="almanac-test")
'''


@pytest.fixture()
def plugin(tmp_path, monkeypatch):
    """Writes one tool file and returns its module name (removed from sys.modules afterwards)."""
    names = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for n in names:
        sys.modules.pop(n, None)


def with_module(module: str) -> AgentConfig:
    return AgentConfig(warm_up=False, tools=ToolsConfig(modules=[module]))


# ---- (a) a unit converter with a capability of its own ------------------------------------------------------


def test_a_converter_with_a_new_capability_is_called_and_answers(plugin):
    config = with_module(plugin("length_plugin", LENGTH_CONVERTER))
    tr = ask("what is that in feet?", history=[("how tall is this lighthouse?", "31 meters")], config=config)
    call = next(s for s in tr.tool_calls() if s.tool == "length_converter")
    assert call.arguments == {"value": 31.0, "from_unit": "m", "to_unit": "ft"} and call.error is None
    assert call.capabilities == ["converts_length"]
    assert tr.answer == "101.7 ft"
    assert (
        ask("how many feet tall is this lighthouse?", config=config).answer == "101.7 ft"
    )  # the quantity from the web
    assert ask("what is that in feet?", history=[("how tall is this lighthouse?", "31 meters")]).answer == IDK


# ---- (b) a currency converter: new capability, new answer unit ------------------------------------------------


@pytest.fixture(scope="module")
def zephyr():
    """The demo's photo of a drink whose price ($1.49) a demo web page gives."""
    demo = ensure_demo()
    conv = next(c for c in load_all(demo.single_turn)[0] if c.answers[0] == "$1.49")
    return decode_image(conv.image)[0]


def ask_demo(question: str, image, config: AgentConfig):
    agent = build_agent(config, task=2, index_dir=ensure_demo().root)  # the data prepared first
    return agent.run_turn(TurnInput(task=2, session_id="cur", interaction_id="cur-0", question=question, image=image))


def test_a_price_asked_in_euros_is_converted_by_a_currency_tool(plugin, zephyr):
    config = with_module(plugin("currency_plugin", CURRENCY_CONVERTER))
    base = ask_demo("how much does a bottle of this cost?", zephyr, AgentConfig(warm_up=False))
    assert base.answer == "$1.49"  # the price the demo's web page gives
    tr = ask_demo("how much does a bottle of this cost in euros?", zephyr, config)
    call = next(s for s in tr.tool_calls() if s.tool == "currency_convert")
    assert call.arguments == {"amount": 1.49, "from_currency": "USD", "to_currency": "EUR"}
    assert tr.answer == "€1.37"


def test_a_currency_the_planner_does_not_know_is_accepted_from_the_tool_that_declares_it(plugin, zephyr):
    config = with_module(plugin("currency_plugin", CURRENCY_CONVERTER))
    tr = ask_demo("how much does a bottle of this cost in Swiss francs?", zephyr, config)
    assert tr.answer == "CHF 1.31"
    # the unit is this planner's only: the built-in reading of the question knows no franc
    assert expected_answer("how much does it cost in swiss francs?").unit is None
    assert expected_answer("how much does it cost in euros?").unit == "€"


def test_without_a_converter_a_price_in_dollars_does_not_answer_a_question_in_euros(zephyr):
    tr = ask_demo("how much does a bottle of this cost in euros?", zephyr, AgentConfig(warm_up=False))
    assert tr.answer == IDK
    assert "$1.49" not in tr.answer


# ---- (c) an image captioner ---------------------------------------------------------------------------------


def test_the_planner_answers_from_a_captioners_fact_when_no_match_is_confident(plugin):
    """The draft is the caption; the self-check does not let the captioner vouch for its own answer (issue 41: a
    tool's own output is no evidence for what it claims), so the turn abstains unless the self-check is off."""
    config = with_module(plugin("caption_plugin", CAPTIONER))
    tr = ask("what is this?", FakeSearch(score=0.4), config=config)  # no confident image match
    assert "reverse_image_caption" in {s.tool for s in tr.tool_calls()}
    drafts = [s.answer for s in tr.steps if isinstance(s, AnswerEvent)]
    assert drafts == ["a white lighthouse on a stone pier"] and tr.answer == IDK
    (verdict,) = [s for s in tr.steps if isinstance(s, VerdictEvent)]
    assert verdict.decision == "abstain" and "reverse_image_caption's own output left out" in verdict.reason
    unchecked = config.model_copy(update={"self_check": "off"})
    assert ask("what is this?", FakeSearch(score=0.4), config=unchecked).answer == "a white lighthouse on a stone pier"
    confident = ask("what is this?", config=config)  # a confident match: the name, and no caption asked for
    assert confident.answer == LIGHTHOUSE
    assert "reverse_image_caption" not in {s.tool for s in confident.tool_calls()}
    assert ask("what is this?", FakeSearch(score=0.4)).answer == IDK  # without the captioner


# ---- (d) a new web search, exported as SuperGlasses "Text Search" ---------------------------------------------


def test_a_new_search_tool_is_exported_as_text_search_from_its_capability(plugin):
    config = with_module(plugin("almanac_plugin", SEARCH))
    tr = ask(
        "when was this lighthouse painted white?",
        FakeSearch(pages={k: PAGES[k] for k in ("port-aven",)}),
        config=config,
    )
    call = next(s for s in tr.tool_calls() if s.tool == "almanac_search")
    assert call.search == "text"
    assert tr.answer == "1901"
    log = to_superglasses(tr)
    assert TEXT in log.tool_decision and "almanac_search" not in log.extra["other_tools"]
    assert any(h.tool_used == TEXT and h.search_url == "https://almanac.test/harbor" for h in log.hops)


def test_an_old_trace_without_a_hop_kind_falls_back_to_the_tool_name():
    assert hop_tool(ToolCallEvent(index=0, tool="web_search")) == TEXT
    assert hop_tool(ToolCallEvent(index=0, tool="almanac_search")) == "almanac_search"


def test_the_currency_example_in_docs_tools_md_works_as_one_file(plugin, zephyr):
    """The example a newcomer copies from docs/tools.md, as printed there."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "tools.md").read_text(encoding="utf-8")
    source = next(block.split("\n", 1)[1] for block in doc.split("```python")[1:] if "tools/currency.py" in block)
    config = with_module(plugin("docs_currency", source.split("```")[0]))
    tr = ask_demo("how much does a bottle of this cost in euros?", zephyr, config)
    call = next(s for s in tr.tool_calls() if s.tool == "currency_convert")
    assert call.arguments == {"amount": 1.49, "from_currency": "USD", "to_currency": "EUR"} and call.error is None
    assert tr.answer == "1.37 EUR"
