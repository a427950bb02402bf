"""Files: the one home of the rules for reading JSON and the paths that files name, and for writing outputs.

- A JSON file is read by `read_json` (a string or line by `parse_json`): whatever is wrong with
  it (missing, unreadable, too large, not UTF-8, not JSON, nested deeper than the parser goes)
  is one `SourceError` naming the file, never a traceback.
- A path read from a file stays inside its folder: `inside` resolves it and refuses (with a
  `SourceError` naming the file that named it) an absolute path, `..`, or a link leading out.
- A reader never sees half a file: `write_atomic` writes aside, syncs and renames into place.
- A failed write says what failed: any I/O error (a full disk, a read-only directory) becomes
  one `OutputWriteError` naming the path and the step, and nothing half-written stays behind.
- One writer per output: `output_lock` holds an exclusive lock on `<out>.lock` for the whole
  run, so a second run on the same output fails at once, naming the holder (pid and host); a
  lock left by a killed process is released by the kernel and taken over.
- Writing never touches an input: `check_output` refuses an output path (or its `.partial`,
  `.lock` and temporary companions) that is, or holds, one of the run's input files.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import OutputError, OutputLockedError, OutputWriteError, SourceError

__all__ = [
    "MAX_JSON_BYTES",
    "OutputLock",
    "check_output",
    "check_writable",
    "companions",
    "inside",
    "output_lock",
    "parse_json",
    "read_bytes",
    "read_json",
    "remove_stale_temporaries",
    "write_atomic",
    "write_files_atomic",
    "writing",
]


#: The largest JSON file `read_json` reads (a larger one is refused before it is read): the
#: biggest JSON files of this field (a large model's circuit scores) are some hundred MB.
MAX_JSON_BYTES = 1 << 30


def parse_json(text: str | bytes, where: str) -> Any:
    """The JSON value in `text`; a `SourceError` that starts with `where` (a file, a line of one)
    when `text` is not UTF-8, not JSON, or nests deeper than Python's parser goes.

    Examples
    --------
    >>> parse_json('{"a": [1, 2]}', "x.json")
    {'a': [1, 2]}
    >>> parse_json("[" * 100000, "x.json")
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: x.json is not valid JSON: it nests deeper than ... levels
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise SourceError(f"{where} is not valid JSON: it nests deeper than {sys.getrecursionlimit()} levels") from None
    except UnicodeDecodeError as e:
        raise SourceError(f"{where} is not UTF-8 text: {_reason(e)}") from None
    except ValueError as e:  # JSONDecodeError, and integers longer than Python converts
        raise SourceError(f"{where} is not valid JSON: {_reason(e)}") from None


def read_json(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in the file `path`: one `SourceError` naming it for every failure (it is
    missing or a directory, cannot be read, is over `max_bytes`, or is not JSON).

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "deep.json").write_text("[" * 100000)
    >>> read_json(d / "deep.json")
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: .../deep.json is not valid JSON: it nests deeper than ... levels
    >>> read_json(d / "missing.json")
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: cannot read .../missing.json: No such file or directory
    """
    return parse_json(read_bytes(path, max_bytes=max_bytes), str(Path(path)))


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a JSON file (whole, or JSON lines), read only when it holds at most
    `max_bytes`: a `SourceError` naming it when it cannot be read or is larger."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise SourceError(f"{path} holds {size:,} bytes; a JSON file may hold at most {max_bytes:,}")
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise SourceError(f"cannot read {path}: {_reason(e)}") from None
    if len(data) > max_bytes:  # a file that grew, or a device without a size
        raise SourceError(f"{path} holds over {max_bytes:,} bytes; a JSON file may hold at most {max_bytes:,}")
    return data


def inside(directory: str | os.PathLike[str], name: object, *, named_in: str | os.PathLike[str]) -> Path:
    """`directory / name` for a path `name` read from the file `named_in`, checked to stay inside
    `directory` once resolved (links followed): an absolute path, `..` or a link that leads out
    is a `SourceError` naming `named_in`, so that a file's content cannot make a reader open (or
    a report show) a file elsewhere.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> inside(d, "shard-0.npy", named_in=d / "manifest.json") == d / "shard-0.npy"
    True
    >>> inside(d, "../../etc/passwd", named_in=d / "manifest.json")
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: .../manifest.json names '../../etc/passwd', which is outside ...; a path named in a file must stay inside its folder
    """
    directory = Path(directory)
    if not isinstance(name, str) or not name or "\0" in name:
        raise SourceError(f"{named_in} names {name!r} where a relative file name is expected")
    path = directory / name
    root = _resolved(directory)
    target = _resolved(path)
    if Path(name).is_absolute() or (target != root and root not in target.parents):
        raise SourceError(
            f"{named_in} names {name!r}, which is outside {directory}; a path named in a file must stay inside its folder"
        )
    return path


def _reason(e: BaseException) -> str:
    """The operating system's words for an I/O failure, on one line."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = " ".join(str(e).split())
    return text or type(e).__name__


def _is_write_failure(e: BaseException) -> bool:
    """An I/O failure while writing: an OSError, or a polars error (polars reports a full
    disk as a ComputeError that wraps the OS error)."""
    if isinstance(e, OutputWriteError):
        return False
    return isinstance(e, OSError) or type(e).__module__.startswith("polars")


@contextmanager
def writing(path: str | os.PathLike[str], step: str) -> Iterator[None]:
    """Turns an I/O failure inside the block into one `OutputWriteError` that names `path`
    and the `step` ("writing part 3", "merging the parts").

    Examples
    --------
    >>> with writing("/no/such/dir/x", "writing the table"):
    ...     open("/no/such/dir/x", "w")
    Traceback (most recent call last):
    ...
    neuroneval.errors.OutputWriteError: cannot write /no/such/dir/x (writing the table): No such file or directory
    """
    try:
        yield
    except BaseException as e:
        if _is_write_failure(e):
            raise OutputWriteError(f"cannot write {path} ({step}): {_reason(e)}") from e
        raise


def write_atomic(path: str | os.PathLike[str], write: Callable[[Path], object], *, step: str = "writing it") -> Path:
    """`write(tmp)` to a fresh temporary file beside `path`, fsync it, then rename it over `path`.

    The rename is atomic on POSIX: `path` holds either its old content or the whole new one.
    On any failure the temporary file is removed and `path` is untouched; an I/O failure
    (a full disk) is raised as `OutputWriteError` naming `path` and `step`.

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
        raise OutputError(f"the output directory {path.parent} does not exist")
    if path.is_dir():
        raise OutputError(f"the output {path} is a directory; give a file path")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with writing(path, step):
            write(tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def remove_stale_temporaries(path: str | os.PathLike[str]) -> int:
    """Removes the temporary files that a killed `write_atomic` of `path` left beside it
    (`.<name>.<pid>.<hex>.tmp`) whose process is gone. Returns how many were removed."""
    path = Path(path)
    removed = 0
    if not path.parent.is_dir():
        return 0
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_files_atomic(directory: str | os.PathLike[str], files: Mapping[str, Callable[[Path], object]]) -> list[Path]:
    """Write several files into `directory`, all or none.

    Every file is first written into a hidden staging directory inside `directory`; only when
    all succeeded is each renamed into place. A failure (a chart that cannot be drawn, a full
    disk) leaves none of them, and removes the directories this call created.
    """
    directory = Path(directory)
    created = [d for d in (directory, *directory.parents) if not d.exists()]  # deepest first
    try:
        with writing(directory, "creating the directory"):
            directory.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".neuroneval-", dir=directory))
    except FileExistsError as e:
        raise OutputError(f"cannot write into {directory}: a file is in the way") from e
    try:
        for name, write in files.items():
            with writing(directory / name, f"writing {name}"):
                write(staging / name)
        final = []
        for name in files:
            with writing(directory / name, f"renaming {name} into place"):
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


# --------------------------------------------------------------------------- output paths


def companions(out: str | os.PathLike[str]) -> list[Path]:
    """The paths a run on `out` writes besides `out` itself: its unfinished-run directory
    `<out>.partial` and its lock `<out>.lock`."""
    out = Path(out)
    return [out.with_name(out.name + ".partial"), out.with_name(out.name + ".lock")]


def check_output(
    out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (), *, directory: bool = False
) -> Path:
    """`out` checked before anything is computed: its directory exists and is writable, it
    is not a directory (unless `directory`, for outputs that are directories), and neither
    it nor its companions (`companions`) is one of the `inputs` or holds one.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "acts.npy").write_bytes(b"")
    >>> check_output(d / "scores.parquet", [d / "acts.npy"]).name
    'scores.parquet'
    >>> check_output(d / "acts.npy", [d / "acts.npy"])
    Traceback (most recent call last):
    ...
    neuroneval.errors.OutputError: the output .../acts.npy is also an input of this run; choose another output path
    """
    out = Path(out)
    parent = out.parent
    if not parent.exists():
        raise OutputError(f"the output directory {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(f"the output's parent {parent} is not a directory")
    check_writable(out)
    if out.is_dir() and not directory:
        raise OutputError(f"the output {out} is a directory; give a file path")
    if out.exists() and not out.is_dir() and directory:
        raise OutputError(f"the output {out} is a file; give a directory")
    written = [_resolved(p) for p in (out, *companions(out))]
    for source in inputs:
        s = _resolved(Path(source))
        for w in written:
            if s == w or w in s.parents:
                which = "output" if w == written[0] else f"output's companion {w.name}"
                raise OutputError(
                    f"the {which} {out if w == written[0] else w} is also an input of this run"
                    + ("" if s == w else f" (it holds {source})")
                    + "; choose another output path"
                )
    return out


def check_writable(out: str | os.PathLike[str]) -> None:
    """Before the work: `out` (a file or directory to write), or the nearest of its parents that
    exists, is a directory this process may write into. A file in the way is an `OutputError`
    (bad usage); a directory that cannot be written (a read-only file system, no permission) is
    an `OutputWriteError`, an I/O failure like a full disk, found before anything is computed.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> check_writable(d / "new" / "scores.parquet")  # the nearest existing folder, d, is writable
    >>> _ = (d / "a-file").write_text("")
    >>> check_writable(d / "a-file" / "scores.parquet")
    Traceback (most recent call last):
    ...
    neuroneval.errors.OutputError: cannot write .../a-file/scores.parquet: .../a-file is a file
    """
    out = Path(out)
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if existing == out and not out.is_dir():
        existing = out.absolute().parent
    if not existing.is_dir():
        raise OutputError(f"cannot write {out}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        why = "a read-only file system" if read_only else "permission denied"
        raise OutputWriteError(f"cannot write {out}: {existing} is not writable ({why})")


def _resolved(p: Path) -> Path:
    try:
        return p.resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare the path as written
        return p.absolute()


# --------------------------------------------------------------------------- the lock


class OutputLock:
    """An exclusive lock on one output, held by this process (see `output_lock`)."""

    def __init__(self, out: Path, fd: int, path: Path, took_over: dict[str, object] | None) -> None:
        self.out, self.path, self._fd = out, path, fd
        #: The holder a killed run left recorded in the lock file, when this lock took it over.
        self.took_over = took_over

    def release(self) -> None:
        if self._fd < 0:
            return
        try:
            self.path.unlink(missing_ok=True)  # before unlocking: a waiter re-checks the inode
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _holder_of(fd: int) -> dict[str, object] | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
        holder = json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def acquire_output_lock(out: str | os.PathLike[str]) -> OutputLock:
    """Takes the lock on `out` (the file `<out>.lock`) or raises `OutputLockedError` at once,
    naming the process and host that hold it. `flock` locks die with their process, so a
    lock file left by a killed run is simply taken over."""
    out = Path(out)
    path = companions(out)[1]
    while True:
        try:
            with writing(path, "taking the output's lock"):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except IsADirectoryError as e:  # pragma: no cover - os.open reports EISDIR as OSError
            raise OutputError(f"the output's lock {path} is a directory; remove it") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder_of(fd)
            for _ in range(20):  # the holder writes its name just after taking the lock
                if holder is not None:
                    break
                time.sleep(0.005)
                holder = _holder_of(fd)
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise OutputWriteError(f"cannot lock {path}: {_reason(e)}") from e
            who = (
                f"process {holder.get('pid')} on host {holder.get('host')} (since {holder.get('since')})"
                if holder
                else "another process"
            )
            raise OutputLockedError(
                f"{out} is being written by {who}; wait for that run to finish or stop it (its lock: {path})"
            ) from None
        # The file may have been unlinked by its previous holder between our open and flock:
        # then our lock is on a dead inode, and we must start over on the new file.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        stale = _holder_of(fd)
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        with writing(path, "recording the lock's holder"):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode())
        return OutputLock(out, fd, path, stale)


@contextmanager
def output_lock(out: str | os.PathLike[str]) -> Iterator[OutputLock]:
    """Holds the exclusive lock on `out` for the block (`acquire_output_lock`).

    Examples
    --------
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "scores.parquet"
    >>> with output_lock(out):
    ...     with output_lock(out):
    ...         pass
    Traceback (most recent call last):
    ...
    neuroneval.errors.OutputLockedError: ... is being written by process ... on host ...
    """
    lock = acquire_output_lock(out)
    try:
        yield lock
    finally:
        lock.release()
