"""Presets: published agent designs as data (one YAML file each, beside this module), run by the same graph.

`AgentConfig.preset` names one (or gives the path of a preset YAML file); `graph.build.build_agent` applies it
through `PresetBuild`: the preset's tools narrow the allow-list, its verification and thresholds set the
self-check, and its policy kind picks the policy (the rule planner, the model loop, or a `PipelinePolicy` over
the preset's steps). Steps that need a model use the configured one (`AgentConfig.policy`); offline they fall back
to named stand-ins, listed in the policy's name (CLI header, every trace's `policy`) and in each step's rationale.

    python -m graph.presets            # the presets, what each follows and what is a stand-in offline
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from graph.presets.schema import Preset

PRESETS_DIR = Path(__file__).resolve().parent
RETRIEVAL_TAGS = frozenset({"finds_entity", "searches_web", "reads_page"})


def preset_names() -> list[str]:
    """The bundled presets, in the order the benchmark table shows them."""
    order = ["react", "rule", "mmrag-baseline", "superlens", "unsw-verify", "eurecom", "no-retrieval"]
    found = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
    return [n for n in order if n in found] + [n for n in found if n not in order]


def load_preset(spec: str | Path) -> Preset:
    """A bundled preset by name, or a preset YAML file by path; a clear ValueError for anything else."""
    path = Path(spec)
    if path.suffix not in (".yaml", ".yml"):
        path = PRESETS_DIR / f"{spec}.yaml"
        if not path.is_file():
            raise ValueError(f"unknown preset {str(spec)!r}; bundled presets: {', '.join(preset_names())} (or give "
                             "the path of a preset .yaml file)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Preset.model_validate(data)
    except FileNotFoundError:
        raise ValueError(f"preset file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"preset file {path} cannot be read: {e}") from None
    except (yaml.YAMLError, ValidationError) as e:
        raise ValueError(f"preset file {path} is not a valid preset: {e}") from None


def preset_digest(spec: str | Path) -> str:
    """A short hash of the preset's file content (part of AgentConfig.fingerprint: an edited preset is another
    configuration, so a resumed run never mixes its traces with the old ones)."""
    import hashlib

    path = Path(spec) if Path(spec).suffix in (".yaml", ".yml") else PRESETS_DIR / f"{spec}.yaml"
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "missing"


@dataclass
class PresetBuild:
    """A configuration with its preset applied, and how to make the preset's policy and self-check.

    Without a preset it passes everything through to build_agent's own defaults."""

    config: Any  # graph.config.AgentConfig
    preset: Preset | None = None

    @classmethod
    def of(cls, config: Any) -> PresetBuild:
        spec = getattr(config, "preset", None)
        if not spec:
            return cls(config)
        preset = load_preset(spec)
        return cls(apply_to_config(preset, config), preset)

    def policy(self, resources: Any, default: Callable[[Any, Any], Any]) -> Any:
        """The preset's policy; `default(config, resources)` is build_agent's (rule planner or model policy)."""
        if self.preset is None:
            return default(self.config, resources)
        from graph.presets.assemble import make_preset_policy

        return make_preset_policy(self.preset, self.config, resources, default)

    def verifier(self, policy: Any, resources: Any, default: Callable[[Any, Any], Any]) -> Any:
        """The preset's self-check (None when it has none); `default(config, policy)` is build_agent's."""
        if self.preset is None:
            return default(self.config, policy)
        from graph.presets.assemble import make_preset_verifier

        return make_preset_verifier(self.preset, self.config, policy, resources)


def apply_to_config(preset: Preset, config: Any) -> Any:
    """The configuration as the preset sets it: its tools (narrowed further by the configuration's own allow-list),
    its self-check, abstention floor and step limit. Everything else (model, search, budget) stays the caller's."""
    allowed = preset.tools
    if config.tools.allowed is not None:
        base = allowed if allowed is not None else config.tools.allowed
        allowed = [t for t in base if t in set(config.tools.allowed)]
    mode = preset.verification_mode()
    update: dict[str, Any] = {"tools": config.tools.model_copy(update={"allowed": allowed}),
                              "self_check": "off" if mode == "none" else "on"}
    if mode in ("model-single", "model-dual-cove"):
        update["verify_mode"] = "single" if mode == "model-single" else "dual-cove"
    if preset.abstain_below is not None:
        update["abstain_below"] = preset.abstain_below
    if preset.max_steps is not None:
        update["budget"] = config.budget.model_copy(update={"max_steps": preset.max_steps})
    return config.model_copy(update=update)


def main() -> int:
    from graph.presets.assemble import describe

    for name in preset_names():
        print(describe(load_preset(name)))
        print()
    return 0
