"""Preparing data is a step of its own: constructing a search backend reads a folder and never builds one."""

from __future__ import annotations

import pytest

from glasses_rag.retrieval.local_search import LocalSearchIndex
from glasses_rag.retrieval.search import NullSearch, SearchConfig, local_index_dir, make_search, prepare_search


def test_constructing_a_backend_over_a_missing_folder_is_a_clear_error_not_a_build(tmp_path):
    demo = tmp_path / "demo"
    with pytest.raises(FileNotFoundError, match=r"does not exist: prepare the data first"):
        make_search(SearchConfig(demo_dir=demo, cache=False))
    with pytest.raises(FileNotFoundError, match=r"does not exist: prepare the data first"):
        LocalSearchIndex(tmp_path / "index")
    assert not demo.exists() and not (tmp_path / "index").exists()  # nothing was built


def test_only_the_local_backend_without_an_index_folder_has_data_to_prepare(tmp_path):
    assert prepare_search(SearchConfig(backend="none")) is None
    assert prepare_search(SearchConfig(index_dir=tmp_path / "mine")) is None
    assert not (tmp_path / "mine").exists()
    assert isinstance(make_search(SearchConfig(backend="none")), NullSearch)


def test_prepare_then_construct(tmp_path):
    cfg = SearchConfig(demo_dir=tmp_path / "demo", cache=False)
    root = prepare_search(cfg)
    assert root == local_index_dir(cfg) == tmp_path / "demo" and (root / "kg.json").is_file()
    backend = make_search(cfg)
    assert isinstance(backend, LocalSearchIndex) and backend.root == root
