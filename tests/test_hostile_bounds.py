"""Bounded work and one-line errors on what a stranger hands over (issue 40 items 4, 6 and 7, the parts outside the
viewer and the run diff), each as the audit ran it: fine-tuning data and folders, adapters, presets and question-set
files, SuperGlasses logs, a conversation of 100k turns, calibration on NaN, the threshold's cost."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from glasses_rag.crag_mm.content import BUNDLED

# ---- fine-tuning: its inputs and its output folder --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    from glasses_rag.testing.tiny_models import save_tiny_gemma3, save_tiny_lora

    root = tmp_path_factory.mktemp("tiny")
    model = save_tiny_gemma3(root / "model")
    return model, save_tiny_lora(model, root / "lora")


EXAMPLE = {"prompt": [{"role": "user", "content": "q?"}], "completion": [{"role": "assistant", "content": "a"}]}
MESSAGES = {"messages": [{"role": "user", "content": "q?"}, {"role": "assistant", "content": "a"}]}


def _finetune(data: Path, model: Path, out: Path, capsys) -> tuple[int, str]:
    from glasses_rag.training.finetune import main

    rc = main(["--data", str(data), "--model", str(model), "--out", str(out), "--max-steps", "1"])
    return rc, capsys.readouterr().err


def test_finetune_never_writes_through_links_in_its_out_folder(tiny, tmp_path, capsys):
    """An --out holding links named adapter_config.json, tokenizer_config.json, special_tokens_map.json,
    chat_template.jinja and README.md had all five targets overwritten by a resumed run."""
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(EXAMPLE) + "\n")
    out, victims = tmp_path / "adapter", tmp_path / "victims"
    out.mkdir()
    victims.mkdir()
    names = ["adapter_config.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"]
    for name in [*names, "README.md"]:
        (victims / name).write_text("precious")
        (out / name).symlink_to(victims / name)
    rc, err = _finetune(data, tiny[0], out, capsys)
    assert rc == 2 and "symbolic link" in err and "Traceback" not in err
    assert all((victims / n).read_text() == "precious" for n in [*names, "README.md"])


BAD_DATA = {
    "bad JSON line": (json.dumps(EXAMPLE) + "\n{not json\n", "line 2: not JSON"),
    "empty file": ("", "no example in it"),
    "mixed rows": (json.dumps(EXAMPLE) + "\n" + json.dumps(MESSAGES) + "\n", "a messages row in a file of prompt"),
    "prompt not a list": (json.dumps({**EXAMPLE, "prompt": "q?"}) + "\n", "'prompt' must be a non-empty list"),
    "tools not a list": (json.dumps({**EXAMPLE, "tools": {"a": 1}}) + "\n", "'tools' must be a list"),
    "images outside": (json.dumps({**EXAMPLE, "images": ["/etc/hostname"]}) + "\n", "'/etc/hostname' refused"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_finetune_says_in_one_line_what_is_wrong_with_its_data(tiny, tmp_path, capsys, monkeypatch, case):
    """A bad JSON line, an empty file, mixed prompt/messages rows, a non-list prompt, `tools` not a list gave
    tracebacks; an `images` column naming any local file had it opened. Checked before a model is loaded."""
    import glasses_rag.training.finetune as ft

    text, expected = BAD_DATA[case]
    data = tmp_path / "sft.jsonl"
    data.write_text(text)
    monkeypatch.setattr(ft, "load_model", lambda *a, **k: pytest.fail("a model was loaded for bad data"))
    rc, err = _finetune(data, tiny[0], tmp_path / "out", capsys)
    assert rc == 2 and expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_example_too_long_to_fit_is_left_out_before_it_is_tokenized(tmp_path, monkeypatch):
    """One 20 MB example (later dropped as too long) took finetune to 4.75 GB: it was rendered and tokenized."""
    import glasses_rag.training.sft_data as sft
    from glasses_rag.testing.tiny_models import gemma_tokenizer

    huge = {**EXAMPLE, "prompt": [{"role": "user", "content": "x" * 200_000}]}
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(EXAMPLE) + "\n" + json.dumps(huge) + "\n")
    measured: list[int] = []
    real = sft.example_length

    def recording(example, processing):
        measured.append(sum(len(m["content"]) for m in example["prompt"]))
        return real(example, processing)

    monkeypatch.setattr(sft, "example_length", recording)
    ds, too_long = sft.load_examples(data, 64, gemma_tokenizer())
    assert len(ds) == 1 and too_long == 1 and max(measured) < 1000


def test_an_adapter_is_checked_before_peft_allocates_or_unpickles(tiny, tmp_path, monkeypatch):
    """`r: 100000000` in adapter_config.json tried to allocate 25.6 GB; a pickle-only adapter (adapter_model.bin)
    gave a raw UnpicklingError. Both are one-line ValueErrors before peft reads anything."""
    import shutil

    import peft
    import torch

    from glasses_rag.models.vlm.transformers_local import TransformersVLMBackend

    model, lora = tiny
    monkeypatch.setattr(peft.PeftModel, "from_pretrained", lambda *a, **k: pytest.fail("peft read the adapter"))
    big = shutil.copytree(lora, tmp_path / "big-r")
    cfg = json.loads((big / "adapter_config.json").read_text())
    (big / "adapter_config.json").write_text(json.dumps({**cfg, "r": 100_000_000}))
    with pytest.raises(ValueError, match="LoRA rank 100000000 in adapter_config.json is not an integer from 1 to"):
        TransformersVLMBackend(model, adapter=big)
    pickled = shutil.copytree(lora, tmp_path / "pickled")
    (pickled / "adapter_model.safetensors").unlink()
    torch.save({"x": print}, pickled / "adapter_model.bin")  # torch.load(weights_only=True) refuses it
    with pytest.raises(ValueError, match="has no adapter_model.safetensors .it has adapter_model.bin: pickles"):
        TransformersVLMBackend(model, adapter=pickled)


# ---- presets and question-set files: YAML read as data ------------------------------------------------------------


def _alias_bomb() -> str:
    """Nine levels of nine aliases: 9^9 items once expanded, in about 500 bytes."""
    lines = ["x0: &a0 [xxxxxxxx, x, x, x, x, x, x, x, x]"]
    lines += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "{" + ", ".join(lines) + "}"


def test_a_preset_with_yaml_aliases_is_refused(tmp_path):
    """A 700-byte preset with YAML aliases (9^9 items) took 73 s and 4.4 GB, then a MemoryError turn."""
    from glasses_rag.policies.presets import PRESETS_DIR, load_preset

    text = (PRESETS_DIR / "superlens.yaml").read_text()
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text.replace("if_removed: {retrieve: true}", "if_removed: " + _alias_bomb(), 1))
    with pytest.raises(ValueError, match="anchors and aliases are not read"):
        load_preset(bomb)


def test_a_deeply_nested_preset_is_a_one_line_error(tmp_path, capsys):
    """`python -m glasses_rag.policies.presets FILE` on a deeply nested preset gave a RecursionError traceback."""
    from glasses_rag.policies.presets import main

    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nsteps: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert main([str(deep)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: preset file {deep}") and len(err.strip().splitlines()) == 1


def test_a_question_set_file_with_anchors_is_refused(tmp_path):
    import shutil

    from glasses_rag.crag_mm.content import ContentError, load_content

    folder = shutil.copytree(BUNDLED / "heldout", tmp_path / "heldout")
    info = folder / "content.yaml"
    text = (
        info.read_text()
        .replace("name: heldout", "name: &n heldout", 1)
        .replace("session_prefix: heldout", "session_prefix: *n")
    )
    assert "*n" in text
    info.write_text(text)
    with pytest.raises(ContentError, match="anchors and aliases are not read"):
        load_content(folder)


# ---- SuperGlasses logs -----------------------------------------------------------------------------------------


def test_logs_check_looks_at_a_file_before_reading_it(tmp_path, capsys):
    """`superglasses.logs check` on a 1 GB sparse file took 2.1 GB."""
    from glasses_rag.superglasses.logs import main

    sparse = tmp_path / "sparse.jsonl"
    with open(sparse, "wb") as f:
        f.truncate(100 << 20)  # past the 64 MB read at most: no byte of it is read
    assert main(["check", str(sparse)]) == 2
    assert "over the 64.0 MB read at most" in capsys.readouterr().err


def test_a_sparse_trace_file_is_skipped_from_its_size(tmp_path):
    """A 2 GB sparse trace file was read whole (4.2 GB) before it was skipped; the export, calibration and a resumed
    run read a run folder's traces too."""
    from test_training_export import _run

    from glasses_rag.superglasses.logs import read_run
    from traces.store import TraceStore

    run, _ = _run(tmp_path, ["SpaceX"], ["correct"])
    with open(run / "huge__00.json", "wb") as f:
        f.truncate(64 << 20)  # past the 32 MB a trace is read at most: no byte of it is read
    problems: list[str] = []
    assert len(read_run(run, problems)) == 1
    assert problems == ["huge__00.json: not a turn trace (TooLarge: 64.0 MB, over the 32.0 MB read at most)"]
    assert TraceStore(run.parent, run.name).read("huge", 0) is None


def test_a_lone_surrogate_in_a_superglasses_log_is_exported(tmp_path):
    """A lone surrogate in a SuperGlasses log crashed `export --superglasses` with nothing written."""
    from glasses_rag.training.export import main

    log = tmp_path / "sg.json"
    log.write_text(
        '[{"id": "a", "question": "what \\ud800 is it?", "ground_truth": "x", '
        '"hop 1": {"sub_question": "q \\udc00", "tool_used": "Text Search", "search_keywords": "k"}}]'
    )
    out = tmp_path / "sft.jsonl"
    assert main(["--superglasses", str(log), "--out", str(out)]) == 0
    assert "what \ufffd is it?" in out.read_text(encoding="utf-8")


# ---- a conversation of 100k turns ---------------------------------------------------------------------------------


def test_a_conversation_runs_at_most_max_turns(tmp_path):
    """One 100k-turn conversation wrote traces whose history grew each turn (trace 2,326 alone 330 KB, 382 MB in
    90 s): a conversation is cut to its first MAX_TURNS turns where the run reads it, and the load report says so."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glasses_rag.frontends.run import build_parser, resolve_benchmark
    from glasses_rag.harness import run_data

    n = 100_000
    turns = {"interaction_id": [f"t{i}" for i in range(n)], "query": [f"question {i}?" for i in range(n)]}
    answers = {"interaction_id": turns["interaction_id"], "ans_full": ["x"] * n}
    (tmp_path / "long").mkdir()
    row = {"session_id": "long", "image": None, "image_url": None, "turns": turns, "answers": answers}
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "long" / "validation.parquet")
    p = build_parser([])
    args = resolve_benchmark(p, p.parse_args(["--task", "3", "--data", str(tmp_path / "long")]))
    _, conversations = run_data.load_data(args)
    (conv,) = list(conversations)
    assert len(conv.turns) == 64 and len(conv.answers) == 64 and run_data.MAX_TURNS == 64
    assert any("100000 turns, only the first 64 are run" in m for m in conversations.report.messages)


# ---- calibration and confidences ---------------------------------------------------------------------------------


@pytest.mark.parametrize("written", [float("nan"), float("inf"), "NaN", "Infinity", 1e400])
def test_a_confidence_that_is_not_a_number_is_zero(written):
    """`replies.confidence(NaN)` returned 1.0 (NaN compares false, so the clamp kept it): above any threshold."""
    from glasses_rag.policies.model.replies import confidence

    assert confidence(written) == 0.0


def _calibration_run(tmp_path: Path, turns: list[tuple[str, str, object]]) -> Path:
    """A run whose turns (answer, score, the answer's confidence as JSON text) have SpaceX as ground truth."""
    from test_training_export import _run

    run, _ = _run(tmp_path, [a for a, _, _ in turns], [s for _, s, _ in turns])
    for path, (_, _, conf) in zip(sorted(run.glob("*__*.json")), turns, strict=True):
        trace = json.loads(path.read_text())
        trace["ground_truth"] = "SpaceX"
        for step in trace["steps"]:
            if step.get("node") == "answer":
                step["confidence"] = f"@{conf}@"
        path.write_text(json.dumps(trace).replace('"@', "").replace('@"', ""))
    return run


def test_calibration_leaves_out_confidences_that_are_not_numbers(tmp_path, capsys):
    """`calibrate` printed `abstain below inf` for NaN / Infinity confidences."""
    from glasses_rag.training.calibrate import main

    only = _calibration_run(tmp_path / "a", [("SpaceX", "correct", "Infinity"), ("SpaceX", "correct", "Infinity")])
    assert main(["--run", str(only)]) == 2  # no answer left with a confidence: nothing to choose from
    out = capsys.readouterr()
    assert "inf" not in out.out.lower() and "2 turn(s) whose confidence is not a number in [0, 1]" in out.err
    turns = [("SpaceX", "correct", "Infinity"), ("SpaceX", "correct", "NaN"), ("SpaceX", "correct", 0.9)]
    mixed = _calibration_run(tmp_path / "b", [*turns, ("Boeing", "incorrect", 0.5)])
    assert main(["--run", str(mixed)]) == 0
    out = capsys.readouterr()
    assert "abstain below 0.9000: keeps 1 of 2 answers on 2 turns" in out.out, out.out  # the kept answer's own


def test_choosing_the_threshold_looks_at_each_point_a_bounded_number_of_times():
    """choose_threshold was quadratic (10k points 11 s): it summed over every point for each distinct confidence.
    Counted, not timed: reads of the points' fields grow linearly with their number."""
    from glasses_rag.training.calibrate import CalibrationPoint, choose_threshold

    reads = {"n": 0}

    class Counted(CalibrationPoint):
        def __getattribute__(self, name):
            if name in ("confidence", "answered", "abstained"):
                reads["n"] += 1
            return super().__getattribute__(name)

    def cost(n: int) -> int:
        reads["n"] = 0
        pts = [Counted(turn=str(i), confidence=i / n, answered=1 if i % 3 else -1, abstained=0) for i in range(n)]
        th = choose_threshold(pts)
        assert math.isfinite(th.abstain_below) and th.turns == n
        return reads["n"]

    assert cost(800) < 2.5 * cost(400)  # linear (x2), where quadratic is x4


# ---- --tools-module says what it does --------------------------------------------------------------------------------


def test_the_docs_say_that_a_tools_module_runs_on_import():
    """Neither --tools-module's help nor docs/tools.md said that the module's code runs on import (and every file
    in tools/ is imported)."""
    from glasses_rag.frontends.run import build_parser

    tools_md = (Path(__file__).resolve().parents[1] / "docs" / "tools.md").read_text(encoding="utf-8")
    assert "runs its code" in tools_md and "every module in `tools/` is imported" in tools_md
    (action,) = [a for a in build_parser([])._actions if "--tools-module" in a.option_strings]
    assert "runs its code" in (action.help or "")
