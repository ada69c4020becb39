"""The project installs like a library (issue 38): a wheel built from this checkout, installed without -e into a
fresh environment, runs `python -m graph.run --task 1 --limit 2` from another folder, reads its prompts and
templates as package data, and writes its demo data and runs under that folder, never inside the package.

The fresh environment takes its dependencies from this one through a .pth file naming this environment's
site-packages: Python reads .pth files only in an environment's own site-packages, so this environment's editable
install hook (its `__editable__*.pth`) is not loaded, and `glasses_rag` can only come from the wheel. CI runs the
same steps in `.ci/run`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("glasses_rag", "graph", "tools", "traces", "prompts")

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("build") is None, reason="needs the `build` package (the test extra has it)"
)


def _source_copy(dest: Path) -> Path:
    """What a wheel is built from: pyproject, README and the packages (no caches, no run folders)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=lambda d, names: {*skip(d, names), *_runs(d, names)})
    return dest


def _runs(folder: str, names: list[str]) -> set[str]:
    return {"runs"} if Path(folder) == ROOT / "traces" and "runs" in names else set()


def _env() -> dict[str, str]:
    """This process's environment without what would import the checkout or move the demo's folder."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLASSES_DEMO_DIR", "PYTHONSAFEPATH")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = _source_copy(tmp / "src")
    cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp / "dist"), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (found,) = (tmp / "dist").glob("*.whl")
    return found


@pytest.fixture(scope="module")
def fresh(wheel, tmp_path_factory) -> Path:
    """A new environment with the wheel installed (not editable); its python."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q"]
    r = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "ci-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return python


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_the_wheel_holds_every_data_file_of_the_packages(wheel, tmp_path):
    src = _source_copy(tmp_path / "src")
    data = {f for pkg in PACKAGES for f in _files(src) if f.startswith(pkg + "/") and not f.endswith(".py")}
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if ".dist-info/" not in n}
    assert {"prompts/vlm_system.txt", "prompts/profiles.yaml", "traces/turn_trace.schema.json"} <= shipped
    assert not data - shipped, f"package data left out of the wheel: {sorted(data - shipped)}"


def test_the_installed_wheel_runs_task_1_from_another_folder(fresh, tmp_path):
    prefix = fresh.parent.parent
    site = next(prefix.glob("lib/python*/site-packages"))
    before = _files(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [str(fresh), "-c", "import glasses_rag, graph; print(glasses_rag.__file__, graph.__file__)"],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0 and where.stdout.count(str(site)) == 2, where.stdout + where.stderr[-2000:]

    run = [str(fresh), "-m", "graph.run", "--task", "1", "--limit", "2", "--no-progress", "--no-plot"]
    r = subprocess.run(run, cwd=work, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not sorted(_files(site) - before), "the run wrote inside the installed package"
    (run_dir,) = (work / "traces" / "runs").iterdir()  # runs under the working directory
    assert len(list(run_dir.glob("*__*.json"))) == 2 and (run_dir / "report.json").is_file()
    assert (work / "data" / "demo" / "manifest.json").is_file()  # the demo built under the working directory

    # prompts, judge prompts, chat templates and the viewer's templates are read as package data
    check = (
        "from glasses_rag.policies.model.prompts import load_prompt, prompt_profile\n"
        "from glasses_rag.crag_mm.scoring.llm_judge import load_prompts\n"
        "from glasses_rag.models.vlm.base import bundled_chat_templates, load_chat_template\n"
        "from glasses_rag.policies.presets.routers import domain_guideline\n"
        "assert 'tool' in load_prompt('vlm_system').template and prompt_profile('compact').name == 'compact'\n"
        "assert all(load_prompts('kddcup2025')) and domain_guideline('Other')\n"
        "assert bundled_chat_templates() == ['chatml', 'gemma', 'llama3'] and load_chat_template('gemma')\n"
    )
    r = subprocess.run([str(fresh), "-c", check], cwd=work, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    viewer = [str(fresh), "-m", "glasses_rag.frontends.viewer", str(run_dir), "--no-images"]
    r = subprocess.run(viewer, cwd=work, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run_dir / "index.html").read_text(encoding="utf-8").count('<article class="turn') == 2
