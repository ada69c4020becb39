"""The model backends are one registry with per-backend option models (issue 38 item 5): each backend is built by
its own factory from its own configuration, and an option its backend does not read is a one-line error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from glasses_rag.frontends.run import main
from glasses_rag.models.vlm import ModelConfig, model_config_from_options, parse_spec
from glasses_rag.models.vlm.backends import BACKENDS
from glasses_rag.models.vlm.options import CommonOptions, LlamaCppConfig, OpenAIConfig, TransformersConfig

ROOT = Path(__file__).resolve().parents[1]


def test_every_backend_is_a_registry_entry_with_its_own_configuration():
    assert list(BACKENDS) == ["openai", "transformers", "llamacpp"]
    configs = {name: kind.config for name, kind in BACKENDS.items()}
    assert configs == {"openai": OpenAIConfig, "transformers": TransformersConfig, "llamacpp": LlamaCppConfig}
    # ModelConfig, the file's shape, is exactly the union of what the backends read
    assert set(ModelConfig.model_fields) == set().union(*(k.fields() for k in BACKENDS.values()))
    common = set(CommonOptions.model_fields)
    assert all(common < k.fields() for k in BACKENDS.values())
    assert "prefix_cache_mb" in TransformersConfig.model_fields and "prefix_cache_mb" not in OpenAIConfig.model_fields
    assert "base_url" not in LlamaCppConfig.model_fields and "chat_format" not in TransformersConfig.model_fields
    with pytest.raises(ValueError, match=r"unknown model backend 'openia' \(did you mean 'openai'\?\)"):
        ModelConfig(backend="openia", base_url="http://h/v1")
    # the factory is given its backend's configuration, nothing of another backend's
    cfg = parse_spec("openai:http://h1:8000/v1,http://h2:8000/v1#m").backend_config()
    assert isinstance(cfg, OpenAIConfig) and cfg.base_urls() == ["http://h1:8000/v1", "http://h2:8000/v1"]
    assert isinstance(parse_spec("llamacpp:/m/x.gguf").backend_config(), LlamaCppConfig)


def test_an_option_of_another_backend_is_refused_with_the_backend_that_reads_it():
    with pytest.raises(ValueError, match=r"openai backend does not read: n_threads \(transformers/llamacpp\), "):
        ModelConfig(backend="openai", base_url="http://h/v1", n_threads=2, prefix_cache_mb=0)
    with pytest.raises(ValueError, match=r"llamacpp backend does not read: base_url \(openai\)"):
        ModelConfig.model_validate({"backend": "llamacpp", "path": "m.gguf", "base_url": "http://h/v1"})
    with pytest.raises(ValueError, match=r"transformers backend does not read: stream \(openai\)"):
        model_config_from_options("transformers:/m/x", stream=False)
    # the run's connection pool size goes to the backends that have one, and only there
    local = model_config_from_options("transformers:/m/x", pool_size=64, max_tokens=8)
    assert local is not None and "pool_size" not in local.model_fields_set and local.max_tokens == 8
    server = model_config_from_options("openai:http://h/v1#m", pool_size=64)
    assert server is not None and server.pool_size == 64


def test_the_command_line_says_in_one_line_which_backend_an_option_belongs_to(tmp_path, capsys):
    argv = [
        "--task",
        "1",
        "--model",
        "openai:http://127.0.0.1:9/v1#m",
        "--prefix-cache-mb",
        "0",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "prefix_cache_mb (transformers)" in err[0] and "openai backend does not read" in err[0]
    conf = tmp_path / "m.toml"
    conf.write_text('[model]\nbackend = "llamacpp"\npath = "m.gguf"\ntimeout_s = 5\n', encoding="utf-8")
    assert main(["--task", "1", "--model-config", str(conf), "--out", str(tmp_path)]) == 2
    assert "timeout_s (openai)" in capsys.readouterr().err


def test_the_docs_table_of_backend_options_is_the_option_models():
    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    table = text.split("<!-- backend options:", 1)[1].split("\n\n", 1)[0]
    header, *rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert set(re.findall(r"`(\w+)`", header)) == set(CommonOptions.model_fields)
    documented = {re.findall(r"`(\w+)`", row)[0]: set(re.findall(r"`(\w+)`", row)[1:]) - {"adapter"} for row in rows}
    own = {name: set(k.fields()) - set(CommonOptions.model_fields) - {"backend"} for name, k in BACKENDS.items()}
    assert documented == own


def test_a_model_runs_configuration_reads_back_from_its_run_json():
    """run.json holds every model option, other backends' at their defaults: it reads back, to the same fingerprint;
    another backend's option set to something else is still refused."""
    from graph.config import AgentConfig

    for policy in (
        ModelConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="m"),
        ModelConfig(backend="transformers", path="m.gguf", prefix_cache_mb=0),
        ModelConfig(backend="llamacpp", path="m.gguf", n_gpu_layers=-1),
    ):
        written = AgentConfig(policy=policy)
        back = AgentConfig.model_validate(written.model_dump(mode="json"))
        assert back == written and back.fingerprint() == written.fingerprint(), policy.backend
    cfg = AgentConfig(policy=ModelConfig(backend="openai", base_url="http://127.0.0.1:8000/v1", model="m"))
    dumped = cfg.model_dump(mode="json")
    dumped["policy"]["prefix_cache_mb"] = 0
    with pytest.raises(ValueError, match=r"prefix_cache_mb \(transformers\)"):
        AgentConfig.model_validate(dumped)
