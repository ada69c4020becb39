"""Compiled grammars kept on disk (glasses_rag/models/vlm/grammar_store.py): a later process reads the grammar an
earlier one compiled, with the same token masks; a damaged, foreign or oversized file is never used."""

from __future__ import annotations

import json
import zlib

import pytest

pytest.importorskip("xgrammar")
torch = pytest.importorskip("torch")

from glasses_rag.models.vlm import grammar_store  # noqa: E402
from glasses_rag.models.vlm.grammar import SchemaGrammars  # noqa: E402
from glasses_rag.models.vlm.grammar_store import SUFFIX, GrammarStore  # noqa: E402
from glasses_rag.testing.tiny_models import byte_tokenizer  # noqa: E402

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["answer", "ok"],
    "properties": {"answer": {"type": "string", "maxLength": 12}, "ok": {"type": "boolean"}},
}
OTHER = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
CHAT = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer(["<s>", "</s>"], "<s>", "</s>", CHAT)


def _grammars(tokenizer, folder) -> SchemaGrammars:
    return SchemaGrammars(tokenizer, len(tokenizer), [tokenizer.eos_token_id], store=GrammarStore(folder))


def _masks(grammar, tokenizer, text: str) -> list[torch.Tensor]:
    """The grammar's token bitmask before each token of `text`."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(grammar)
    out = []
    for tok in tokenizer.encode(text, add_special_tokens=False):
        mask = xgr.allocate_token_bitmask(1, len(tokenizer))
        matcher.fill_next_token_bitmask(mask)
        out.append(mask.clone())
        assert matcher.accept_token(tok)
    return out


def test_a_later_process_reads_the_grammar_with_the_same_masks(tokenizer, tmp_path):
    first = _grammars(tokenizer, tmp_path)
    compiled = first.compiled(SCHEMA)
    assert (first.compiles, first.loaded) == (1, 0)
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 1

    later = _grammars(tokenizer, tmp_path)  # a new process: nothing in memory
    loaded = later.compiled(json.loads(json.dumps(SCHEMA)))
    assert (later.compiles, later.loaded) == (0, 1)
    text = '{"answer": "Falcon 9", "ok": true}'
    assert all(torch.equal(a, b) for a, b in zip(_masks(compiled, tokenizer, text), _masks(loaded, tokenizer, text)))

    later.compiled(OTHER)  # another schema is another file
    assert later.compiles == 1 and len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2


def test_the_key_changes_with_the_tokenizer_schema_and_options(tokenizer, tmp_path):
    import xgrammar as xgr

    store = GrammarStore(tmp_path)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[2])
    other = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[1])
    base = store.key(info, json.dumps(SCHEMA), "a")
    assert base == store.key(info, json.dumps(SCHEMA), "a")
    assert len({base, store.key(other, json.dumps(SCHEMA), "a"), store.key(info, json.dumps(OTHER), "a")}) == 3
    assert store.key(info, json.dumps(SCHEMA), "b") != base


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # torn
        lambda raw: b"not compressed",
        lambda raw: zlib.compress(b'{"grammar": "edited"}'),
        lambda raw: b"",
    ],
)
def test_a_damaged_file_is_removed_and_the_schema_compiled_again(tokenizer, tmp_path, damage, caplog):
    _grammars(tokenizer, tmp_path).compiled(SCHEMA)
    (path,) = tmp_path.glob(f"*{SUFFIX}")
    path.write_bytes(damage(path.read_bytes()))

    later = _grammars(tokenizer, tmp_path)
    grammar = later.compiled(SCHEMA)
    assert (later.compiles, later.loaded) == (1, 0) and "damaged" in caplog.text
    assert _masks(grammar, tokenizer, '{"answer": "x", "ok": false}')  # usable
    third = _grammars(tokenizer, tmp_path)  # stored again, whole
    third.compiled(SCHEMA)
    assert (third.compiles, third.loaded) == (0, 1)


def test_an_oversized_file_is_refused_before_it_is_inflated(tokenizer, tmp_path, monkeypatch, caplog):
    _grammars(tokenizer, tmp_path).compiled(SCHEMA)
    (path,) = tmp_path.glob(f"*{SUFFIX}")
    monkeypatch.setattr(grammar_store, "MAX_BYTES", 100_000)
    head = grammar_store.HEADER + path.name.removesuffix(SUFFIX).encode() + b"\n"  # the key it is stored under
    path.write_bytes(head + zlib.compress(b" " * 10_000_000))  # 10 MB of spaces in ~10 KB
    later = _grammars(tokenizer, tmp_path)
    later.compiled(SCHEMA)
    assert later.compiles == 1 and "at most 100000 bytes" in caplog.text


def test_the_folder_keeps_the_most_recently_used_files(tokenizer, tmp_path):
    import os

    def schema(n: int) -> dict:
        return {"type": "object", "required": [f"k{n}"], "properties": {f"k{n}": {"type": "integer"}}}

    def grammars() -> SchemaGrammars:
        return SchemaGrammars(tokenizer, len(tokenizer), [tokenizer.eos_token_id], store=GrammarStore(tmp_path, 2))

    first = grammars()
    first.compiled(schema(0))
    first.compiled(schema(1))
    for age, path in enumerate(sorted(tmp_path.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime)):
        os.utime(path, (1000 + age, 1000 + age))  # k0's file the older
    later = grammars()
    later.compiled(schema(0))  # read: now the most recently used
    later.compiled(schema(2))  # a third file: the least recently used one (k1's) goes
    assert later.loaded == 1 and len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2
    last = grammars()
    last.compiled(schema(0))
    last.compiled(schema(1))
    assert (last.loaded, last.compiles) == (1, 1)


def test_a_passing_read_error_keeps_the_file(tokenizer, tmp_path, monkeypatch, caplog):
    _grammars(tokenizer, tmp_path).compiled(SCHEMA)
    (path,) = tmp_path.glob(f"*{SUFFIX}")

    def busy(self):
        raise OSError(24, "Too many open files")

    with monkeypatch.context() as m:
        m.setattr(type(path), "read_bytes", busy)
        later = _grammars(tokenizer, tmp_path)
        later.compiled(SCHEMA)
    assert later.compiles == 1 and "not readable" in caplog.text and path.exists()
    again = _grammars(tokenizer, tmp_path)
    again.compiled(SCHEMA)
    assert again.loaded == 1


def test_a_folder_that_cannot_be_written_costs_only_the_next_compile(tokenizer, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    g = _grammars(tokenizer, blocker / "grammars")
    assert g.compiled(SCHEMA) is not None and g.compiles == 1
    assert "not stored" in caplog.text


def test_the_backend_reads_what_an_earlier_backend_compiled(tmp_path, monkeypatch):
    """Two backends over the same model, as two processes: the second compiles nothing and writes the same reply."""
    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend
    from glasses_rag.testing.tiny_models import save_tiny_gemma3

    monkeypatch.setenv("GLASSES_GRAMMAR_CACHE", str(tmp_path / "grammars"))
    model = save_tiny_gemma3(tmp_path / "m")
    msgs = [{"role": "user", "content": "Who makes this?"}]
    schema = {"name": "reply", "schema": SCHEMA}
    texts = []
    for expected in ((1, 0), (0, 1)):
        backend = TransformersVLMBackend(model)
        texts.append(backend.complete(msgs, response_schema=schema, max_tokens=60).text)
        assert (backend.grammars.compiles, backend.grammars.loaded) == expected
    assert texts[0] == texts[1]
    assert list((tmp_path / "grammars").glob(f"*{SUFFIX}"))
    monkeypatch.delenv("GLASSES_GRAMMAR_CACHE")  # else: under the folder of derived files
    monkeypatch.setenv("GLASSES_CACHE_DIR", str(tmp_path / "cache"))
    assert grammar_store.default_folder() == tmp_path / "cache" / "grammars"


def test_warm_up_without_a_task_prepares_the_first_decision_of_every_task():
    """A run over several tasks (benchmarks.latency --task 1 2 3) builds its agent with no task: the warm-up then
    prepares each task's first decision, so no turn pays a compile (~15 s against Gemma's vocabulary)."""
    from glasses_rag.policies.protocol import ScriptedPolicy
    from glasses_rag.retrieval.search import NullSearch
    from graph.build import build_agent, warm_up
    from graph.config import AgentConfig
    from tools import ToolContext, ToolOutput, ToolRegistry, tool

    @tool(tasks={1, 2, 3})
    def look(ctx: ToolContext) -> ToolOutput:
        """Look."""
        return ToolOutput(summary="seen")

    @tool(tasks={2, 3})
    def search_web(ctx: ToolContext, query: str) -> ToolOutput:
        """Search the web."""
        return ToolOutput(summary=query)

    class Recording(ScriptedPolicy):
        def warm_up(self, tool_sets=()):
            self.sets = [[t.name for t in tools] for tools in tool_sets]

    registry = ToolRegistry([look.__tool__, search_web.__tool__])
    for task, expected in ((None, [["look"], ["look", "search_web"], ["look", "search_web"]]), (1, [["look"]])):
        policy = Recording([])
        agent = build_agent(AgentConfig(warm_up=False), search=NullSearch(), policy=policy, registry=registry)
        warm_up(agent, task)
        assert policy.sets == expected


def test_a_file_larger_than_the_bound_is_not_read(tokenizer, tmp_path, monkeypatch, caplog):
    _grammars(tokenizer, tmp_path).compiled(SCHEMA)
    (path,) = tmp_path.glob(f"*{SUFFIX}")
    monkeypatch.setattr(grammar_store, "MAX_BYTES", path.stat().st_size - 1)
    monkeypatch.setattr(type(path), "read_bytes", lambda self: pytest.fail("read a file over the bound"))
    later = _grammars(tokenizer, tmp_path)
    later.compiled(SCHEMA)
    assert (later.compiles, later.loaded) == (1, 0) and "larger than" in caplog.text


def test_a_grammar_copied_under_another_key_is_not_used(tokenizer, tmp_path, caplog):
    """issue 40 item 7: the store trusted a file's name. In a shared folder, another schema's grammar copied (or
    renamed) under this schema's key was used for it; the key written inside the file refuses it."""
    first = _grammars(tokenizer, tmp_path)
    first.compiled(OTHER)
    (other,) = tmp_path.glob(f"*{SUFFIX}")
    key = first._store_key(json.dumps(SCHEMA, ensure_ascii=False))  # the key SCHEMA's grammar is stored under
    (tmp_path / f"{key}{SUFFIX}").write_bytes(other.read_bytes())  # OTHER's grammar, named as SCHEMA's
    later = _grammars(tokenizer, tmp_path)
    grammar = later.compiled(SCHEMA)
    assert (later.compiles, later.loaded) == (1, 0) and "not stored under this key" in caplog.text
    assert _masks(grammar, tokenizer, '{"answer": "x", "ok": false}')  # SCHEMA's own grammar
