"""Does vLLM serve the adapter that was evaluated in-process? Greedy decisions of vLLM (`--enable-lora --lora-modules
tuned=<adapter>`) against the in-process model with the adapter merged, token for token.

    python -m benchmarks.vllm_parity prepare --out /tmp/parity          # here (CPU): model, adapter, reference
    python -m benchmarks.vllm_parity gpu --dir /tmp/parity --install    # a GPU machine: install vLLM, serve, compare
    python -m benchmarks.vllm_parity compare --dir /tmp/parity --base-url http://host:8000/v1   # a running server

`prepare` builds a tiny random Gemma 3 text model (glasses_rag.testing.tiny_models; an architecture vLLM serves with
LoRA), trains a LoRA adapter on the language model (glasses_rag.training.finetune, `--steps` steps at a high
learning rate on fixed decisions, so that greedy choices have margins and a tie does not decide the comparison),
renders decision requests with the model policy's own prompt code, and records the in-process greedy reply of
base + merged adapter to each: prompt token ids, completion token ids, text. `gpu` starts `vllm serve` on that
folder (float32, eager) with the adapter as LoRA module `tuned`, then runs `compare`: each request sent with
`model: tuned`, temperature 0, `return_token_ids` (vLLM >= 0.11 returns `prompt_token_ids` and each choice's
`token_ids`), and the ids compared with the reference: the printed table says, per request, whether the prompt
and the completion are identical and where they first differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)

QUESTIONS = [
    ("Who makes this rocket?", "SpaceX"),
    ("What year was this bridge opened?", "1937"),
    ("Which company built this car?", "Toyota"),
    ("What is the name of this lighthouse?", "Fastnet"),
]
LORA_NAME = "tuned"


def decision_requests(max_tokens: int) -> list[dict[str, Any]]:
    """One decision request per question, rendered by the model policy as a text-only model gets it."""
    from glasses_rag.policies.model.policy import ModelPolicy
    from glasses_rag.policies.protocol import PolicyView
    from graph.state import tool_spec
    from tools import default_registry

    class Renderer:  # a backend that is never called: the policy renders its prompts for a text-only model
        name, supports_native_tools, supports_structured, supports_images = "render", False, True, False

    policy = ModelPolicy(Renderer())  # type: ignore[arg-type]
    tools = [tool_spec(t) for t in default_registry().for_task(2, ["image_search", "web_search"])]
    out = []
    for question, _ in QUESTIONS:
        view = PolicyView(task=2, question=question, has_image=True, tools=tools, remaining_steps=2, remaining_s=60.0)
        out.append({"messages": policy.decide_messages(view, None, "json"), "max_tokens": max_tokens})
    return out


def training_rows(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fixed decisions the adapter learns: each question answered with its answer."""
    rows = []
    for req, (_, answer) in zip(requests, QUESTIONS):
        text = json.dumps({"action": "answer", "answer": answer, "confidence": 0.9, "entity": "", "rationale": ""})
        rows.append({"prompt": req["messages"], "completion": [{"role": "assistant", "content": text}]})
    return rows


def greedy_reference(model_dir: Path, adapter: Path, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The in-process greedy reply (base + merged adapter, float32) to each request, in token ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from glasses_rag.models.vlm.transformers_local import merged_adapter

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = merged_adapter(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), adapter).eval()
    out = []
    for req in requests:
        ids = tok.apply_chat_template(req["messages"], add_generation_prompt=True, return_tensors="pt")
        with torch.inference_mode():
            gen = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=req["max_tokens"], do_sample=False
            )
        new = gen[0, ids.shape[1] :].tolist()
        out.append({**req, "prompt_ids": ids[0].tolist(), "completion_ids": new, "text": tok.decode(new)})
    return out


def prepare(out: Path, steps: int, max_tokens: int) -> Path:
    """The model, the adapter and the reference under `out`; returns the reference file."""
    from glasses_rag.testing.tiny_models import save_tiny_gemma3
    from glasses_rag.training.finetune import FinetuneConfig, finetune

    out.mkdir(parents=True, exist_ok=True)
    model = save_tiny_gemma3(out / "model")
    requests = decision_requests(max_tokens)
    data = out / "decisions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in training_rows(requests)))
    cfg = FinetuneConfig(
        data=str(data), model=str(model), out=str(out / "adapter"), max_steps=steps, learning_rate=5e-3
    )
    finetune(cfg.model_copy(update={"grad_accum": 1, "max_length": 16384, "lora_dropout": 0.0, "save_steps": 10**6}))
    ref = greedy_reference(model, out / "adapter", requests)
    path = out / "reference.json"
    path.write_text(json.dumps({"model": str(model), "adapter": str(out / "adapter"), "requests": ref}, indent=1))
    return path


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where `a` and `b` differ (the shorter one's length when one is a prefix), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(reference: dict[str, Any], base_url: str, model: str = LORA_NAME) -> list[dict[str, Any]]:
    """Each reference request sent to the server greedily; per request, whether prompt and completion ids match."""
    import httpx

    rows = []
    for i, req in enumerate(reference["requests"]):
        body = {"model": model, "messages": req["messages"], "max_tokens": req["max_tokens"], "temperature": 0.0}
        body |= {"return_token_ids": True, "top_p": 1.0, "top_k": -1, "seed": 0}
        data = httpx.post(f"{base_url.rstrip('/')}/chat/completions", json=body, timeout=300.0).json()
        choice = data["choices"][0]
        got = list(choice.get("token_ids") or [])
        rows.append(
            {
                "request": i,
                "prompt_same": data.get("prompt_token_ids") == req["prompt_ids"],
                "completion_same": got == req["completion_ids"],
                "first_difference": first_difference(got, req["completion_ids"]),
                "tokens": len(req["completion_ids"]),
                "text": choice["message"].get("content"),
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'request':>8} {'prompt ids':>11} {'completion ids':>15} {'first diff':>11} {'tokens':>7}"]
    for r in rows:
        same = lambda ok: "same" if ok else "DIFFERENT"  # noqa: E731
        diff = "-" if r["first_difference"] is None else str(r["first_difference"])
        lines.append(
            f"{r['request']:>8} {same(r['prompt_same']):>11} {same(r['completion_same']):>15} {diff:>11} "
            f"{r['tokens']:>7}"
        )
    n = sum(r["completion_same"] and r["prompt_same"] for r in rows)
    lines.append(f"{n}/{len(rows)} decisions identical token for token")
    return "\n".join(lines)


def vllm_command(model: str, adapter: str, port: int) -> list[str]:
    """`vllm serve` for the parity run: the adapter as LoRA module `tuned`, float32 and eager (no CUDA graphs), so
    that the comparison is of the weights and not of a lower precision."""
    return [
        *("vllm", "serve", model, "--port", str(port), "--dtype", "float32", "--enforce-eager"),
        *("--enable-lora", "--lora-modules", f"{LORA_NAME}={adapter}", "--max-lora-rank", "16"),
        *("--max-model-len", "16384", "--gpu-memory-utilization", "0.3", "--seed", "0"),
    ]


def serve_and_compare(folder: Path, port: int, install: bool) -> list[dict[str, Any]]:
    """On a GPU machine: (pip install vllm,) start vLLM on the prepared folder, compare, stop it."""
    import httpx

    if install:
        subprocess.run([sys.executable, "-m", "pip", "install", "vllm"], check=True)
    reference = json.loads((folder / "reference.json").read_text())
    proc = subprocess.Popen(vllm_command(reference["model"], reference["adapter"], port))
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"vllm serve exited with {proc.returncode}")
            time.sleep(1)
        return compare(reference, url)
    finally:
        proc.terminate()
        proc.wait(60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vllm_parity", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="the tiny model, its adapter and the in-process reference (CPU)")
    prep.add_argument("--out", type=Path, required=True)
    prep.add_argument("--steps", type=int, default=30)
    prep.add_argument("--max-tokens", type=int, default=48)
    cmp_ = sub.add_parser("compare", help="compare with a running server that serves the adapter as 'tuned'")
    cmp_.add_argument("--dir", type=Path, required=True)
    cmp_.add_argument("--base-url", required=True)
    gpu = sub.add_parser("gpu", help="on a GPU machine: serve with vLLM and compare")
    gpu.add_argument("--dir", type=Path, required=True)
    gpu.add_argument("--port", type=int, default=8000)
    gpu.add_argument("--install", action="store_true", help="pip install vllm first")
    args = p.parse_args(argv)
    if args.command == "prepare":
        print(f"reference: {prepare(args.out, args.steps, args.max_tokens)}")
        return 0
    if args.command == "compare":
        rows = compare(json.loads((args.dir / "reference.json").read_text()), args.base_url)
    else:
        rows = serve_and_compare(args.dir, args.port, args.install)
    print(table(rows))
    return 0 if all(r["completion_same"] and r["prompt_same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
