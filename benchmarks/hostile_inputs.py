"""The audit's commands of issue 40 (items 1-4, 6 and 7 outside the viewer and the run diff), each on throwaway
copies in a temporary folder, each in a process of its own: its exit status, the last line it printed on stderr,
its CPU, wall time and peak resident memory, and whether anything outside the folders it was given changed
(measured on this machine: say its load beside the figures).

    python -m benchmarks.hostile_inputs                       # every case below
    python -m benchmarks.hostile_inputs --only sft-20mb --keep /tmp/hostile

The targets: a one-line error or a bounded run, each under 30 s and 1.5 GB, nothing outside the named folders
changed. Never run against real folders: `data-dot` and `data-dotdot` deleted whole folders before the fix.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from glasses_rag.crag_mm.content import BUNDLED

PY = [sys.executable, "-m"]
RUN = [*PY, "graph.run", "--no-progress", "--judge", "rule", "--no-plot", "--limit", "1"]
Case = tuple[list[str], Path, Callable[[], str]]  # the command, where it runs, what changed outside


TIME = "/usr/bin/time"  # GNU time -v: the command's own peak RSS (a forked child would count this process's too)
LIMIT_S = 300  # a command still running after this is killed (`timeout`), and its figures are those at that point


def measure(label: str, cmd: list[str], cwd: Path, check: Callable[[], str]) -> dict:
    """Runs `cmd` in `cwd` under GNU time: exit status, CPU seconds (user + system), wall seconds, peak RSS, the last
    stderr line, and `check()`, what changed outside the folders the command was given."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    limit = ["timeout", "-k", "5", str(LIMIT_S)]  # TERM, then KILL: timeout waits, so its child's usage counts
    out, pipe = subprocess.DEVNULL, subprocess.PIPE
    proc = subprocess.run([TIME, "-v", *limit, *cmd], cwd=cwd, env=env, stdout=out, stderr=pipe)
    err = proc.stderr.decode("utf-8", "replace")
    own, _, timed = err.rpartition("\tCommand being timed:")
    figures = dict(ln.strip().rsplit(": ", 1) for ln in timed.splitlines() if ": " in ln)
    wall = figures.get("Elapsed (wall clock) time (h:mm:ss or m:ss)", "0:0")
    lines = [ln for ln in own.strip().splitlines() if ln.strip() and not ln.startswith("Command exited")]
    row = {
        "case": label,
        "exit": int(figures.get("Exit status", proc.returncode)),
        "cpu_s": round(
            float(figures.get("User time (seconds)", 0)) + float(figures.get("System time (seconds)", 0)), 1
        ),
        "wall_s": round(sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":")))), 1),
        "peak_rss_mb": round(int(figures.get("Maximum resident set size (kbytes)", 0)) / 1024),
        "traceback": "Traceback" in own,
        "stderr": (lines[-1] if lines else "")[:240],
        "outside": check(),
    }
    print(json.dumps(row), flush=True)
    return row


def intact(*files: Path) -> Callable[[], str]:
    return lambda: "intact" if all(f.exists() for f in files) else "CHANGED: " + ", ".join(str(f) for f in files)


def same_text(path: Path, text: str) -> Callable[[], str]:
    return lambda: "intact" if path.read_text() == text else f"CHANGED: {path}"


def project(root: Path) -> Path:
    """A project: its data folder with an index, a thesis, and a question-set folder with a subfolder."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "crag-mm-index.bin").write_text("hours of indexing")
    (root / "thesis.tex").write_text("thesis")
    shutil.copytree(BUNDLED / "heldout", root / "src" / "heldout")
    (root / "src" / "heldout" / "sub").mkdir()
    return root


def data_cases(root: Path) -> dict[str, Callable[[], Case]]:
    def dot() -> Case:
        p = project(root / "dot")
        cmd = [*RUN, "--task", "1", "--data", ".", "--demo-dir", str(p / "data" / "demo"), "--out", str(p / "runs")]
        return cmd, p / "src" / "heldout", intact(p / "data" / "crag-mm-index.bin", p / "thesis.tex")

    def dotdot() -> Case:
        p = project(root / "dotdot")
        cmd = [*RUN, "--task", "1", "--data", "..", "--demo-dir", str(p / "data" / "demo"), "--out", str(p / "runs")]
        return cmd, p / "src" / "heldout" / "sub", intact(p / "thesis.tex", p / "src" / "heldout" / "questions.yaml")

    def demo_dot() -> Case:
        p = project(root / "demo-dot")
        (p / "src" / "notes.txt").write_text("mine")
        cmd = [*RUN, "--task", "1", "--demo-dir", ".", "--out", str(p / "runs")]
        return cmd, p / "src", intact(p / "src" / "notes.txt", p / "src" / "heldout" / "questions.yaml")

    def key_env() -> Case:
        (root / "key").mkdir()
        cfg = root / "key" / "model.json"
        cfg.write_text(
            json.dumps(
                {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "AWS_SECRET_ACCESS_KEY"}
            )
        )
        return [*RUN, "--task", "1", "--model-config", str(cfg), "--out", str(root / "key" / "runs")], root, lambda: ""

    def linked_pieces() -> Case:
        """A resumed run of a model policy (the fake model server) whose pieces file links to a shell start-up file,
        on a question holding `$(...)`: sourcing the file afterwards runs it."""
        folder = root / "link"
        (folder / "runs" / "r" / "requests").mkdir(parents=True)
        (folder / "bashrc").write_text("# mine\n")
        (folder / "runs" / "r" / "requests" / "pieces.jsonl").symlink_to(folder / "bashrc")
        data = write_dataset(folder / "ds", ["s"], question=f"what is $(touch {folder / 'PWNED'})?")
        server = subprocess.Popen([*PY, "glasses_rag.testing.fake_model_server"], stdout=subprocess.PIPE, text=True)
        url = server.stdout.readline().strip() if server.stdout else ""
        cmd = [*RUN, "--task", "1", "--data", str(data), "--model", f"openai:{url}#fake"]

        def check() -> str:
            server.terminate()
            server.wait()
            subprocess.run(["bash", "-c", f"source {folder / 'bashrc'}"], cwd=folder, capture_output=True)
            pwned = " (sourcing it ran the question's command)" if (folder / "PWNED").exists() else ""
            return same_text(folder / "bashrc", "# mine\n")() + pwned

        return [*cmd, "--out", str(folder / "runs"), "--run-id", "r"], folder, check

    return {"data-dot": dot, "data-dotdot": dotdot, "demo-dir-dot": demo_dot, "config-key-env": key_env,
            "linked-pieces": linked_pieces}  # fmt: skip


def write_dataset(folder: Path, session_ids: list[str], turns: int = 1, question: str = "what is this, {i}?") -> Path:
    """A CRAG-MM parquet of one-photo conversations with these session ids, each of `turns` turns."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(buf, format="JPEG")
    ids = [f"t{i}" for i in range(turns)]
    rows = [
        {
            "session_id": sid,
            "image": {"bytes": buf.getvalue(), "path": None},
            "image_url": None,
            "turns": {"interaction_id": ids, "query": [question.format(i=i) for i in range(turns)]},
            "answers": {"interaction_id": ids, "ans_full": ["x"] * turns},
        }
        for sid in session_ids
    ]
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "validation.parquet")
    return folder


def training_setup(root: Path) -> tuple[Path, Path]:
    """A tiny Gemma 3 (a byte tokenizer) and a LoRA adapter for it, built once."""
    from glasses_rag.testing.tiny_models import save_tiny_gemma3, save_tiny_lora

    model = root / "tiny" / "model"
    if not model.exists():
        save_tiny_gemma3(model)
        save_tiny_lora(model, root / "tiny" / "lora")
    return model, root / "tiny" / "lora"


EXAMPLE = {"prompt": [{"role": "user", "content": "q?"}], "completion": [{"role": "assistant", "content": "a"}]}


def bad_data_cases(root: Path, finetune: list[str]) -> dict[str, Callable[[], Case]]:
    """finetune on data that is not an export: each a one-line error before a model is loaded."""
    bad = {
        "sft-bad-json": json.dumps(EXAMPLE) + "\n{not json\n",
        "sft-empty": "",
        "sft-mixed": json.dumps(EXAMPLE) + "\n" + json.dumps({"messages": EXAMPLE["prompt"]}) + "\n",
        "sft-prompt-not-list": json.dumps({**EXAMPLE, "prompt": "q?"}) + "\n",
        "sft-tools-not-list": json.dumps({**EXAMPLE, "tools": {"a": 1}}) + "\n",
        "sft-images-any-file": json.dumps({**EXAMPLE, "images": ["/etc/hostname"]}) + "\n",
    }

    def sft_bad(text: str) -> Callable[[], Case]:
        def make() -> Case:
            model, _ = training_setup(root)
            folder = Path(tempfile.mkdtemp(prefix="sft-bad-", dir=root))
            (folder / "sft.jsonl").write_text(text)
            cmd = [*finetune, "--data", str(folder / "sft.jsonl"), "--model", str(model), "--out", str(folder / "o")]
            return cmd, folder, lambda: ""

        return make

    return {k: sft_bad(v) for k, v in bad.items()}


def adapter_case(root: Path, change: str) -> Callable[[], Case]:
    """graph.run with the tiny model and a hostile adapter: a rank of 100,000,000, or pickle-only weights."""

    def make() -> Case:
        model, lora = training_setup(root)
        bad = shutil.copytree(lora, root / f"adapter-{change}")
        if change == "huge-r":
            cfg = json.loads((bad / "adapter_config.json").read_text())
            (bad / "adapter_config.json").write_text(json.dumps({**cfg, "r": 100_000_000}))
        else:
            import torch

            (bad / "adapter_model.safetensors").unlink()
            torch.save({"x": print}, bad / "adapter_model.bin")
        cmd = [*RUN, "--task", "1", "--model", f"transformers:{model}", "--adapter", str(bad)]
        return [*cmd, "--chat-template", "gemma", "--out", str(root / "adapter-runs")], root, lambda: ""

    return make


def training_cases(root: Path) -> dict[str, Callable[[], Case]]:
    finetune = [*PY, "glasses_rag.training.finetune", "--max-steps", "1", "--chat-template", "gemma"]

    def export_ids() -> Case:
        folder = root / "export"
        data = write_dataset(folder / "ds", ["../../escaped", str(folder / "absolute"), "ok"])
        (folder / "run").mkdir()
        (folder / "a" / "b" / "photos").mkdir(parents=True)
        cmd = [*PY, "glasses_rag.training.export", "--run", str(folder / "run"), "--keep", "all", "--images"]
        cmd += ["--image-dir", str(folder / "a" / "b" / "photos"), "--images-from", str(data)]
        outside = [folder / "escaped.jpg", folder / "absolute.jpg"]
        return (
            [*cmd, "--out", str(folder / "sft.jsonl")],
            folder,
            lambda: "CHANGED: " + ", ".join(str(p) for p in outside) if any(p.exists() for p in outside) else "intact",
        )

    def out_links() -> Case:
        model, _ = training_setup(root)
        folder = root / "out-links"
        (folder / "out").mkdir(parents=True)
        (folder / "victim").write_text("precious")
        for name in ("adapter_config.json", "tokenizer_config.json", "special_tokens_map.json", "README.md"):
            (folder / "out" / name).symlink_to(folder / "victim")
        (folder / "sft.jsonl").write_text(json.dumps(EXAMPLE) + "\n")
        cmd = [*finetune, "--data", str(folder / "sft.jsonl"), "--model", str(model), "--out", str(folder / "out")]
        return cmd, folder, same_text(folder / "victim", "precious")

    def sft_20mb() -> Case:
        model, _ = training_setup(root)
        folder = root / "sft-20mb"
        folder.mkdir()
        huge = {**EXAMPLE, "prompt": [{"role": "user", "content": "x" * 20_000_000}]}
        (folder / "sft.jsonl").write_text(json.dumps(EXAMPLE) + "\n" + json.dumps(huge) + "\n")
        cmd = [*finetune, "--data", str(folder / "sft.jsonl"), "--model", str(model), "--out", str(folder / "out")]
        return cmd, folder, lambda: ""

    return {
        "export-session-ids": export_ids,
        "finetune-out-links": out_links,
        "sft-20mb": sft_20mb,
        **bad_data_cases(root, finetune),
        "adapter-huge-r": adapter_case(root, "huge-r"),
        "adapter-pickle-only": adapter_case(root, "pickle"),
    }


def alias_bomb() -> str:
    lines = ["x0: &a0 [xxxxxxxx, x, x, x, x, x, x, x, x]"]
    lines += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "{" + ", ".join(lines) + "}"


def bounds_cases(root: Path) -> dict[str, Callable[[], Case]]:
    from glasses_rag.policies.presets import PRESETS_DIR

    def sparse_log() -> Case:
        (root / "logs").mkdir()
        with open(root / "logs" / "sparse.jsonl", "wb") as f:
            f.truncate(1 << 30)
        return [*PY, "glasses_rag.superglasses.logs", "check", str(root / "logs" / "sparse.jsonl")], root, lambda: ""

    def preset(kind: str) -> Callable[[], Case]:
        def make() -> Case:
            path = root / f"preset-{kind}.yaml"
            if kind == "aliases":
                text = (PRESETS_DIR / "superlens.yaml").read_text()
                path.write_text(text.replace("args: {target: $object}", "args: {target: " + alias_bomb() + "}", 1))
            else:
                path.write_text("name: deep\nsteps: " + "[" * 100_000 + "]" * 100_000 + "\n")
            return [*RUN, "--task", "2", "--preset", str(path), "--out", str(root / "preset-runs")], root, lambda: ""

        return make

    def long_conversation() -> Case:
        data = write_dataset(root / "long", ["long"], turns=100_000)
        cmd = [*RUN, "--task", "3", "--data", str(data), "--out", str(root / "long-runs"), "--run-id", "long"]

        def written() -> str:
            sizes = [p.stat().st_size for p in (root / "long-runs" / "long").glob("*__*.json")]
            return f"{len(sizes)} traces, {sum(sizes) / 1e6:.1f} MB, the largest {max(sizes, default=0) / 1e3:.0f} KB"

        return cmd, root, written

    def surrogate() -> Case:
        log = root / "sg.json"
        log.write_text('[{"id": "a", "question": "what \\ud800 is it?", "ground_truth": "x"}]')
        return (
            [*PY, "glasses_rag.training.export", "--superglasses", str(log), "--out", str(root / "sg.jsonl")],
            root,
            (lambda: "written" if (root / "sg.jsonl").exists() else "NOT written"),
        )

    def presets_cli_deep() -> Case:
        path = root / "preset-cli-deep.yaml"
        path.write_text("name: deep\nsteps: " + "[" * 100_000 + "]" * 100_000 + "\n")
        return [*PY, "glasses_rag.policies.presets", str(path)], root, lambda: ""

    return {
        "logs-check-1gb-sparse": sparse_log,
        "presets-cli-deeply-nested": presets_cli_deep,
        "preset-yaml-aliases": preset("aliases"),
        "preset-deeply-nested": preset("deep"),
        "conversation-100k-turns": long_conversation,
        "sg-lone-surrogate": surrogate,
    }


def threshold_cpu(n: int) -> dict:
    """choose_threshold on `n` distinct confidences, in this process (it was quadratic: 10k points 11 s)."""
    from glasses_rag.training.calibrate import CalibrationPoint, choose_threshold

    pts = [CalibrationPoint(turn=str(i), confidence=i / n, answered=1 if i % 3 else -1, abstained=0) for i in range(n)]
    c0 = time.process_time()
    choose_threshold(pts)
    row = {"case": f"choose-threshold-{n}", "cpu_s": round(time.process_time() - c0, 3)}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.hostile_inputs", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", default=[], help="a case to run (repeatable; default: all)")
    p.add_argument("--keep", type=Path, default=None, help="build the cases' folders here and keep them")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print(f"load average before: {Path('/proc/loadavg').read_text().strip()} (a shared machine: CPU time counts)")
        every = {**data_cases(root), **training_cases(root), **bounds_cases(root)}
        for label, make in every.items():
            if not args.only or label in args.only:
                measure(label, *make())
        if not args.only or "choose-threshold" in args.only:
            threshold_cpu(10_000)
        print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
