"""Paths a user or a stranger hands over: the one place that decides where the project may read, write and delete.

- `folder_name(name)`: a name that is one folder inside another (not '', '.', '..', no separator, no NUL).
- `named_folder(path)`: a folder the project will write into or replace, as named by the user: its last part must
  name a folder (`--demo-dir .` would name the working directory itself, `..` its parent).
- `remove_build(folder, parent, is_ours)`: deletes a folder the project built, and only that: a real directory (not
  a link), a direct child of `parent`, that holds the project's own build manifest (`is_ours`) or nothing at all.
- `confine(path, roots)` / `inside(path, roots)`: a path that must resolve (symlinks followed) into one of `roots`,
  as a dataset's image paths, a training example's photos, an export's files.
- `file_in(folder, name)`: a file named by data (a session id) inside `folder`: one plain name, never a path.
- `refuse_links(folder, names)`: a folder the project writes into again (a resumed run, an adapter folder) holds no
  symbolic link where it will write (a planted link would have the write land on its target).

    folder = named_folder(args.demo_dir, "--demo-dir")          # PathRefused for '.', '..', ''
    real = inside("img/a.jpg", [Path("/data/sg")], "image path")  # PathRefused outside /data/sg
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

NOT_NAMES = ("", ".", "..")
IMAGE_ROOT_ENV = "GLASSES_IMAGE_ROOT"  # a folder the user names, where dataset image paths may also point


class PathRefused(ValueError):
    """A path the project will not read, write or delete: it leaves its folder, names no folder, or is a link
    where a file is written. A ValueError: front ends print it as one line."""


def folder_name(name: str, what: str = "folder name") -> str:
    """`name` when it is one folder inside another; PathRefused (saying why) otherwise.

    Example: `folder_name("heldout")` -> "heldout"; `folder_name("..")` raises."""
    bad = [c for c in ("/", "\\", "\0") if c in name]
    if name in NOT_NAMES or bad or os.sep in name or (os.altsep and os.altsep in name):
        why = f" (it contains {bad[0]!r})" if bad else ""
        raise PathRefused(f"{what} must be a single folder name, not '.', '..', empty or a path: {name!r}{why}")
    return name


def named_folder(path: str | Path, what: str = "folder") -> Path:
    """The folder `path` names, absolute (symlinks of its parents kept as they are), when its last part names a
    folder; PathRefused for '', '.', '..' and a root (`--demo-dir .` would have the working directory replaced).

    Example: `named_folder("data/demo")` -> /cwd/data/demo; `named_folder(".")` raises."""
    text = os.fspath(path)
    last = text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    absolute = Path(os.path.abspath(text)) if text else Path()
    if not text or last in NOT_NAMES or absolute.name in NOT_NAMES:
        raise PathRefused(f"{what} must name a folder of its own, not '.', '..', empty or a root: {text!r}")
    return absolute


def is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def check_removable(folder: Path, parent: Path, is_ours: Callable[[Path], bool], what: str = "folder") -> bool:
    """Whether `remove_build` would delete something (False: nothing there); PathRefused when it would refuse."""
    folder, parent = Path(folder), Path(parent)
    if not os.path.lexists(folder):
        return False
    if is_link(folder) or not folder.is_dir():
        raise PathRefused(f"{folder} is a link or a file, not a {what} this project built: nothing was replaced")
    if folder.resolve().parent != parent.resolve() or folder.name in NOT_NAMES:
        raise PathRefused(f"{folder} is not a folder directly inside {parent}: nothing was replaced")
    if any(folder.iterdir()) and not is_ours(folder):
        raise PathRefused(
            f"{folder} exists and is not a {what} this project built (it has no build manifest of ours): nothing "
            "was replaced; move it away or name another folder"
        )
    return True


def remove_build(folder: Path, parent: Path, is_ours: Callable[[Path], bool], what: str = "folder") -> None:
    """Delete `folder`, a build of the project's, before a new build takes its place. Refused (PathRefused, nothing
    deleted) unless it is a real directory (not a link), a direct child of `parent` (both resolved: `data/..` is
    not) and `is_ours(folder)` says it holds the project's build manifest, or it is empty."""
    if check_removable(folder, parent, is_ours, what):
        shutil.rmtree(folder)


HINT = f"the dataset's folder {{root}} (name another folder with --image-root or {IMAGE_ROOT_ENV} to allow it)"


def confine(
    path: str | Path, roots: list[Path], what: str = "image path", hint: str = HINT
) -> tuple[str | None, str | None]:
    """(the real path, None) when `path` (a relative one taken from the first root) resolves inside one of `roots`,
    symlinks resolved; (None, why) otherwise.

    Example: `confine("img/a.jpg", [Path("/data/sg")])` -> ("/data/sg/img/a.jpg", None);
    `confine("../secret.png", [Path("/data/sg")])` -> (None, "image path '../secret.png' refused: ...")."""
    shown = str(path)[:200]
    if not roots:
        return None, f"{what} {shown!r} refused: no dataset folder to read it from"
    try:
        p = Path(path)
        real = Path(os.path.realpath(p if p.is_absolute() else roots[0] / p))
    except (OSError, ValueError) as e:  # NUL bytes, a symlink loop
        return None, f"{what} {shown!r} refused: {type(e).__name__}"
    if any(real.is_relative_to(r) for r in roots):
        return str(real), None
    return None, f"{what} {shown!r} refused: it resolves outside " + hint.format(root=roots[0])


def inside(path: str | Path, roots: list[Path], what: str = "path", hint: str = HINT) -> Path:
    """The real path of `path` when it resolves inside one of `roots` (see `confine`); PathRefused otherwise."""
    real, why = confine(path, [Path(os.path.realpath(r)) for r in roots], what, hint)
    if real is None:
        raise PathRefused(why or f"{what} {path!r} refused")
    return Path(real)


def file_in(folder: str | Path, name: str, suffix: str = "", what: str = "file name") -> Path:
    """`folder/<name><suffix>` when `name` is one plain file name (no separator, not '.' or '..', no NUL) and that
    path is not a symbolic link; PathRefused otherwise (a session id `../../x` or `/tmp/x` names no file in
    `folder`)."""
    path = Path(folder) / (folder_name(name, what) + suffix)
    if is_link(path):
        raise PathRefused(f"{path} is a symbolic link: not written through")
    return path


def refuse_links(folder: str | Path, names: Iterable[str] | None = None, what: str = "folder") -> None:
    """PathRefused when `folder` is a link, or holds one: at `names` when given, else anywhere inside it (the walk
    follows no link). A folder the project writes into again must not send a write to a link's target."""
    folder = Path(folder)
    if is_link(folder):
        raise PathRefused(f"the {what} {folder} is a symbolic link: refused (name the real folder)")
    if names is not None:
        found = [folder / n for n in names if is_link(folder / n)]
    elif folder.is_dir():
        found = []
        for top, dirs, files in os.walk(folder):  # followlinks=False: a link to a folder is listed, not entered
            found += [Path(top, n) for n in (*dirs, *files) if is_link(Path(top, n))]
            if len(found) > 0:
                break
    else:
        found = []
    if found:
        raise PathRefused(
            f"the {what} {folder} holds a symbolic link, {found[0]} -> {os.readlink(found[0])}: the project does "
            "not write through links; remove it"
        )


__all__ = [
    "IMAGE_ROOT_ENV",
    "PathRefused",
    "check_removable",
    "confine",
    "file_in",
    "folder_name",
    "inside",
    "is_link",
    "named_folder",
    "refuse_links",
    "remove_build",
]
