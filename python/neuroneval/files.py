"""Writing output files so that a reader never sees half of one: the one home of that rule."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["write_atomic", "write_files_atomic"]


def write_atomic(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """`write(tmp)` to a fresh temporary file beside `path`, fsync it, then rename it over `path`.

    The rename is atomic on POSIX: `path` holds either its old content or the whole new one.
    On any failure the temporary file is removed and `path` is untouched.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> write_atomic(d / "a.txt", lambda p: p.write_text("hello")).read_text()
    'hello'
    >>> sorted(p.name for p in d.iterdir())
    ['a.txt']
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the output directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_files_atomic(directory: str | os.PathLike[str], files: Mapping[str, Callable[[Path], object]]) -> list[Path]:
    """Write several files into `directory`, all or none.

    Every file is first written into a hidden staging directory inside `directory`; only when
    all succeeded is each renamed into place. A failure (a chart that cannot be drawn, a full
    disk) leaves none of them, and removes the directories this call created.
    """
    directory = Path(directory)
    created = [d for d in (directory, *directory.parents) if not d.exists()]  # deepest first
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".neuroneval-", dir=directory))
    try:
        for name, write in files.items():
            write(staging / name)
        final = []
        for name in files:
            os.replace(staging / name, directory / name)
            final.append(directory / name)
        return final
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for d in created:
            try:
                d.rmdir()  # only when empty
            except OSError:
                break
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
