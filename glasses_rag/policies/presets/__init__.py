"""Presets: published agent designs as data (one YAML file each, beside this module), run by the same graph.

`AgentConfig.preset` names one (or gives the path of a preset YAML file); `graph.build.build_agent` applies it
through `PresetBuild`: the preset's tools narrow the allow-list, its verification and thresholds set the
self-check, and its policy kind picks the policy (the rule planner, the model loop, or a `PipelinePolicy` over
the preset's steps). Steps that need a model use the configured one (`AgentConfig.policy`); offline they fall back
to named stand-ins, listed in the policy's name (CLI header, every trace's `policy`) and in each step's rationale.

    python -m glasses_rag.policies.presets            # the presets, what each follows and what is a stand-in offline
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from glasses_rag.core.files import read_bounded
from glasses_rag.core.registry import Registry, closest
from glasses_rag.core.yaml_data import read_yaml
from glasses_rag.policies.presets.schema import Preset

PRESETS_DIR = Path(__file__).resolve().parent
RETRIEVAL_TAGS = frozenset({"finds_entity", "searches_web", "reads_page"})
MAX_PRESET_BYTES = 1 << 20  # a preset is a few KB; a file is looked at before it is read


# the order the benchmark table shows them in; a YAML file beside this module not listed here comes after them
ORDER = ("react", "rule", "mmrag-baseline", "superlens", "unsw-verify", "eurecom", "no-retrieval")


def bundled_presets() -> Registry[Path]:
    """The bundled presets' files by name (the YAML files beside this module), in the benchmark table's order.

    Example: `bundled_presets().lookup("superlens")` -> .../presets/superlens.yaml."""
    found = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
    names = [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]
    return Registry("preset", [(n, PRESETS_DIR / f"{n}.yaml") for n in names])


def preset_names() -> list[str]:
    """The bundled presets, in the order the benchmark table shows them."""
    return list(bundled_presets())


def load_preset(spec: str | Path, tool_modules: Iterable[str] = ()) -> Preset:
    """A bundled preset by name, or a preset YAML file by path; a one-line ValueError for anything else (an unknown
    tool or router names the closest known one). `tool_modules`: modules whose tools a preset may also name.

    Example: `load_preset("superlens")`, `load_preset("my_preset.yaml")`."""
    path = Path(spec)
    if path.suffix not in (".yaml", ".yml"):
        bundled = bundled_presets()
        if str(spec) not in bundled:
            raise ValueError(
                f"unknown preset {str(spec)!r}{closest(str(spec), bundled)}; bundled presets: "
                f"{', '.join(bundled)} (or give the path of a preset .yaml file)"
            )
        path = bundled[str(spec)]
    data: Any = None
    try:
        data = read_yaml(path, MAX_PRESET_BYTES, f"preset file {path}")  # no aliases, bounded depth and size
        preset = Preset.model_validate(data)
    except FileNotFoundError:
        raise ValueError(f"preset file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"preset file {path} cannot be read: {e}") from None
    except ValidationError as e:
        raise ValueError(f"preset file {path} is not a valid preset: {one_line(e, data)}") from None
    unknown = unknown_tools(preset, tool_modules)
    if unknown:
        hint = "" if tool_modules else " (a tool of your own: name its module with --tools-module)"
        raise ValueError(f"preset file {path}: {unknown}{hint}")
    return preset


def one_line(error: ValidationError, data: Any) -> str:
    """A validation error as one line: where (the step's id when it is a step) and what."""
    parts = []
    for e in error.errors():
        loc = list(e["loc"])
        where = ".".join(str(x) for x in loc) or "the file"
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int) and isinstance(data, dict):
            step = (data.get("steps") or [{}])[loc[1]] if loc[1] < len(data.get("steps") or []) else {}
            sid = step.get("id") if isinstance(step, dict) else None
            where = (
                f"step {sid!r}" + (f" field {'.'.join(str(x) for x in loc[2:])}" if loc[2:] else "") if sid else where
            )
        parts.append(f"{where}: {' '.join(str(e['msg']).split()).removeprefix('Value error, ')}")
    return "; ".join(parts)


def unknown_tools(preset: Preset, tool_modules: Iterable[str] = ()) -> str:
    """'' when every tool the preset names exists, else which do not (and the closest known names)."""
    from tools import default_registry

    registry = default_registry(tool_modules)
    known = registry.names()
    bad = [(f"step {s.id!r}", t) for s in preset.steps for t in s.tools if t not in known]
    bad += [("tools", t) for t in preset.tools or [] if t not in known]
    bad += [
        (f"ablation row {r.title!r}", t)
        for r in (preset.ablation.rows if preset.ablation else [])
        for t in r.without
        if t not in known
    ]
    errors = [f"{where}: unknown tool {t!r}{closest(t, known)}" for where, t in bad]
    return "; ".join(errors + unknown_arguments(preset, registry))


def unknown_arguments(preset: Preset, registry: Any) -> list[str]:
    """A step argument that none of the step's tools takes (a misspelling would otherwise be left out of every
    call), one line each with the closest argument name."""
    out = []
    for s in preset.steps:
        tools = [t for t in (registry.get(n) for n in s.tools) if t is not None]
        if not tools:
            continue
        taken = {a for t in tools for a in t.args_model.model_fields}
        for arg in s.args:
            if arg not in taken:
                out.append(
                    f"step {s.id!r}: unknown argument {arg!r} for {' / '.join(t.name for t in tools)}"
                    f"{closest(arg, taken)}; arguments: {', '.join(sorted(taken))}"
                )
    return out


def preset_digest(spec: str | Path) -> str:
    """A short hash of the preset's file content (part of AgentConfig.fingerprint: an edited preset is another
    configuration, so a resumed run never mixes its traces with the old ones)."""
    import hashlib

    path = Path(spec) if Path(spec).suffix in (".yaml", ".yml") else PRESETS_DIR / f"{spec}.yaml"
    try:
        return hashlib.sha256(read_bounded(path, MAX_PRESET_BYTES)).hexdigest()[:12]
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
        preset = load_preset(spec, config.tools.modules)
        return cls(apply_to_config(preset, config), preset)

    def policy(self, resources: Any, default: Callable[[Any, Any], Any]) -> Any:
        """The preset's policy; `default(config, resources)` is build_agent's (rule planner or model policy)."""
        if self.preset is None:
            return default(self.config, resources)
        from glasses_rag.policies.presets.assemble import make_preset_policy

        return make_preset_policy(self.preset, self.config, resources, default)

    def verifier(self, policy: Any, resources: Any, default: Callable[[Any, Any], Any]) -> Any:
        """The preset's self-check (None when it has none); `default(config, policy)` is build_agent's."""
        if self.preset is None:
            return default(self.config, policy)
        from glasses_rag.policies.presets.assemble import make_preset_verifier

        return make_preset_verifier(self.preset, self.config, policy, resources)


def apply_to_config(preset: Preset, config: Any) -> Any:
    """The configuration as the preset sets it: its tools (narrowed further by the configuration's own allow-list),
    its self-check, abstention floor and step limit. Everything else (model, search, budget) stays the caller's."""
    allowed = preset.tools
    if config.tools.allowed is not None:
        base = allowed if allowed is not None else config.tools.allowed
        allowed = [t for t in base if t in set(config.tools.allowed)]
    mode = preset.verification_mode()
    update: dict[str, Any] = {
        "tools": config.tools.model_copy(update={"allowed": allowed}),
        "self_check": "off" if mode == "none" else "on",
    }
    if mode in ("model-single", "model-dual-cove"):
        update["verify_mode"] = "single" if mode == "model-single" else "dual-cove"
    if preset.abstain_below is not None:
        update["abstain_below"] = preset.abstain_below
    if preset.max_steps is not None:
        update["budget"] = config.budget.model_copy(update={"max_steps": preset.max_steps})
    device = preset_reranker_device(preset, config)
    if device is not None:
        update["models"] = config.models.model_copy(update={"reranker_device": device})
    return config.model_copy(update=update)


def preset_reranker_device(preset: Preset, config: Any) -> str | None:
    """The device of a preset's reranker (None when it has none): --reranker-device, else the rerank step's
    `device:`, else the model backend's (glasses_rag.models.reranker.reranker_device)."""
    from glasses_rag.models.reranker import reranker_device

    steps = [s for s in preset.active_steps() if "reranker" in s.tools]
    if not steps:
        return None
    configured = getattr(config.models, "reranker_device", None) or next((s.device for s in steps if s.device), None)
    return reranker_device(configured, model_config_of(config))[0]


def model_config_of(config: Any) -> Any:
    """The configuration's model (a ModelConfig), None for the rule planner or a spec that does not parse."""
    from glasses_rag.models.vlm import parse_spec

    policy = config.policy
    if not isinstance(policy, str):
        return policy
    if policy == "rule":
        return None
    try:
        return parse_spec(policy)
    except ValueError:
        return None  # build_agent reports the bad spec itself


def main(argv: list[str] | None = None) -> int:
    """`python -m glasses_rag.policies.presets [NAME_OR_FILE ...] [--tools-module MODULE ...]`: each preset described
    (every bundled one without names); a preset file may use the tools of the --tools-module modules, as a run
    given the same option does. A file that is not a valid preset prints its one-line error and exits 2."""
    import argparse
    import sys

    from glasses_rag.policies.presets.assemble import describe

    p = argparse.ArgumentParser(prog="python -m glasses_rag.policies.presets", description=main.__doc__)
    p.add_argument("presets", nargs="*", metavar="NAME_OR_FILE", help="bundled names or preset YAML files")
    p.add_argument("--tools-module", action="append", default=[], metavar="MODULE", help="a module of @tool functions")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    failed = False
    for spec in args.presets or preset_names():
        try:
            print(describe(load_preset(spec, args.tools_module)) + "\n")
        except (ValueError, ImportError) as e:  # an invalid preset, a --tools-module that does not import
            print(f"error: {e}", file=sys.stderr)
            failed = True
    return 2 if failed else 0
