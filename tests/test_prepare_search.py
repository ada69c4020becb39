"""Preparing data is a step of its own, the harness's: constructing a search backend reads a folder and never builds
one, building an agent never writes data, and the retrieval library knows no benchmark's data."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from glasses_rag.crag_mm.demo import ensure_demo
from glasses_rag.retrieval.local_search import LocalSearchIndex
from glasses_rag.retrieval.search import NullSearch, SearchConfig, make_search
from graph.build import build_agent
from graph.config import AgentConfig

ROOT = Path(__file__).resolve().parents[1]


def test_constructing_a_backend_over_a_missing_folder_is_a_clear_error_not_a_build(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist: prepare the data first"):
        make_search(SearchConfig(index_dir=tmp_path / "demo", cache=False))
    with pytest.raises(FileNotFoundError, match=r"does not exist: prepare the data first"):
        LocalSearchIndex(tmp_path / "index")
    assert not (tmp_path / "demo").exists() and not (tmp_path / "index").exists()  # nothing was built


def test_a_local_backend_without_a_folder_is_an_error_that_says_what_to_give():
    with pytest.raises(ValueError, match=r"no index folder: give one \(--index-dir"):
        make_search(SearchConfig(cache=False))
    assert isinstance(make_search(SearchConfig(backend="none")), NullSearch)


def test_building_an_agent_writes_no_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSES_DEMO_DIR", str(tmp_path / "demo"))  # where the demo would be built
    with pytest.raises(ValueError, match="no index folder"):
        build_agent(AgentConfig(warm_up=False), task=2)
    assert not (tmp_path / "demo").exists()


def test_the_index_the_data_comes_with_is_handed_to_the_agent(tmp_path):
    root = ensure_demo(tmp_path / "demo").root  # the harness's step (glasses_rag.harness.run_data.prepare_data)
    agent = build_agent(AgentConfig(warm_up=False), task=2, index_dir=root)
    backend = agent.resources.search.backend  # inside the search cache
    assert isinstance(backend, LocalSearchIndex) and backend.root == root
    assert agent.config.search.index_dir is None  # the configuration (and its fingerprint) as before


def test_the_retrieval_library_imports_no_benchmark():
    for f in sorted((ROOT / "glasses_rag" / "retrieval").glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        named = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        named |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in named if m.startswith(("glasses_rag.crag_mm", "glasses_rag.superglasses"))}, f


def test_the_configuration_keeps_its_fingerprint_and_reads_an_older_run_json():
    old = AgentConfig().model_dump(mode="json")  # as a run.json written before --demo-dir left the search settings
    search = old["search"]
    old["search"] = {**{k: search[k] for k in ("backend", "index_dir")}, "demo_dir": None, **search}
    config = AgentConfig.model_validate(old)
    assert "demo_dir" not in config.search.model_fields_set and config == AgentConfig()
    # the fingerprints of the default agent and of a SuperGlasses one, as runs made before recorded them
    assert AgentConfig().fingerprint() == "7ed658b4c5cd0b7c"
    sg = AgentConfig(tools={"profile": "superglasses"}, search={"backend": "none"})
    assert sg.fingerprint() == "e3bbb1fc213162bd"
