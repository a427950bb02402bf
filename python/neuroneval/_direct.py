"""Reads and writes that bypass the page cache (`O_DIRECT`), for files read or written once.

A file that is read once gains nothing from the page cache, and filling it costs CPU. On this
project's benchmark machine, a cold buffered read of the out-of-core workload's file cost 1.8 ns
of CPU per byte and a direct read 0.03; a buffered write of the scratch copy cost up to 2.6 ns
per byte and a direct write 0.04 (2 GiB and 1 GiB through 64 MiB and 16 MiB transfers). So `evaluate` reads
large row-major files and writes and reads back its scratch copy through these helpers.

`O_DIRECT` needs the buffer's address, the file offset and the length to be multiples of the
device's block size; everything here is kept at multiples of `ALIGN` (4096, a multiple of
every common block size). Where the filesystem refuses `O_DIRECT` (or the platform has none),
the same calls make plain reads and writes.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
>>> with AppendWriter(path) as w:
...     w.reserve(5)[:] = np.frombuffer(b"hello", dtype=np.uint8)
>>> out = aligned_bytes(5)
>>> read_file_into(path, out), bytes(out[:5])
(5, b'hello')
"""

from __future__ import annotations

import errno
import fcntl
import os
from types import TracebackType

import numpy as np

__all__ = ["ALIGN", "DIRECT_READ_BYTES", "AppendWriter", "SequentialReader", "aligned_bytes", "read_file_into"]

#: Alignment of every direct transfer's address, offset and length.
ALIGN = 4096
#: Files at least this large are read past the page cache (`SequentialReader`); smaller ones
#: may well be cached already, and a cached read costs less than a trip to the disk.
DIRECT_READ_BYTES = 256 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def aligned_bytes(nbytes: int) -> np.ndarray:
    """A uint8 array of `nbytes` rounded up to `ALIGN`, whose address is a multiple of `ALIGN`."""
    size = _round_up(max(nbytes, 1))
    raw = np.empty(size + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + size]


def _open(path: str | os.PathLike[str], flags: int, direct: bool) -> tuple[int, bool]:
    """Opens `path` with `O_DIRECT` when asked and the filesystem accepts it."""
    if direct and _O_DIRECT:
        try:
            return os.open(path, flags | _O_DIRECT | os.O_CLOEXEC, 0o644), True
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
    return os.open(path, flags | os.O_CLOEXEC, 0o644), False


def _go_buffered(fd: int) -> None:
    """Turns `O_DIRECT` off on an open file: for a filesystem that takes the flag at open
    time but refuses the transfers."""
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_DIRECT)


def _pread(fd: int, into: np.ndarray, offset: int, direct: bool) -> tuple[int, bool]:
    """One read into `into` at `offset`: (bytes read, whether the file is still direct)."""
    try:
        return os.preadv(fd, [into.data], offset), direct
    except OSError as e:
        if not direct or e.errno != errno.EINVAL:
            raise
        _go_buffered(fd)
        return os.preadv(fd, [into.data], offset), False


def _fill(fd: int, into: np.ndarray, offset: int, direct: bool) -> tuple[int, bool]:
    """Reads into `into` from file offset `offset` (aligned) until it is full or the file
    ends: (bytes read, whether the file is still direct). A read that stops short of a block
    (the end of the file, or a short read) turns O_DIRECT off, as the next offset is not
    aligned."""
    got = 0
    while got < len(into):
        r, direct = _pread(fd, into[got:], offset + got, direct)
        if r == 0:
            break
        got += r
        if got % ALIGN and direct:
            _go_buffered(fd)
            direct = False
    return got, direct


def read_file_into(path: str | os.PathLike[str], out: np.ndarray, direct: bool = True) -> int:
    """Reads the file at `path` from its start into `out` (from `aligned_bytes`, at least the
    file's size rounded up to `ALIGN`); returns the bytes read, the file's size unless it is
    larger than `out`."""
    fd, direct = _open(path, os.O_RDONLY, direct)
    try:
        return _fill(fd, out, 0, direct)[0]
    finally:
        os.close(fd)


class SequentialReader:
    """A file read front to back from `offset`, in pieces of any size, by aligned reads into
    one reused buffer: `take(n)` returns the next `n` bytes (fewer at the end of the file) as
    a view that is valid until the next call.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
    >>> _ = open(path, "wb").write(b"abcdefghij")
    >>> with SequentialReader(path, offset=3) as r:
    ...     bytes(r.take(4)), bytes(r.take(9))
    (b'defg', b'hij')
    """

    def __init__(self, path: str | os.PathLike[str], offset: int = 0, direct: bool = True) -> None:
        self.fd, self.direct = _open(path, os.O_RDONLY, direct)
        self.buffer = aligned_bytes(1)
        self.base = offset - offset % ALIGN  # the file offset of buffer[0]
        self.cur = offset % ALIGN  # the next byte to hand out, in the buffer
        self.filled = 0  # bytes of the buffer read from the file
        self.ended = False

    def take(self, n: int) -> np.ndarray:
        if self.cur + n > self.filled and not self.ended:
            keep = self.cur - self.cur % ALIGN  # the whole blocks already handed out
            tail = self.buffer[keep : self.filled].copy()
            if len(self.buffer) < _round_up(self.cur - keep + n):
                self.buffer = aligned_bytes(self.cur - keep + n)
            self.buffer[: len(tail)] = tail
            self.base, self.cur, self.filled = self.base + keep, self.cur - keep, len(tail)
            got, self.direct = _fill(self.fd, self.buffer[self.filled :], self.base + self.filled, self.direct)
            self.filled += got
            self.ended = self.filled < len(self.buffer)  # the file ended before the buffer
        view = self.buffer[self.cur : min(self.cur + n, self.filled)]
        self.cur += len(view)
        return view

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SequentialReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AppendWriter:
    """A new file written front to back through one aligned buffer: `reserve(n)` returns a
    view for the caller to fill with the next `n` bytes; whole blocks go to the file by
    direct writes, and `close` writes the last, partial block padded and truncates the file
    to the bytes reserved. An exception inside `with` closes the file without the tail."""

    def __init__(self, path: str | os.PathLike[str], buffer_bytes: int = 8 << 20, direct: bool = True) -> None:
        self.fd, self.direct = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, direct)
        self.buffer = aligned_bytes(buffer_bytes)
        self.used = 0  # bytes of the buffer reserved
        self.written = 0  # bytes of the file written (a multiple of ALIGN until the end)

    def reserve(self, n: int) -> np.ndarray:
        if self.used + n > len(self.buffer):
            self._write(self.used - self.used % ALIGN)
            if self.used + n > len(self.buffer):
                bigger = aligned_bytes(self.used + n)
                bigger[: self.used] = self.buffer[: self.used]
                self.buffer = bigger
        view = self.buffer[self.used : self.used + n]
        self.used += n
        return view

    def _write(self, size: int) -> None:
        """Writes the buffer's first `size` bytes (a multiple of ALIGN) and moves the rest
        of the reserved bytes to its front."""
        done = 0
        while done < size:
            chunk = self.buffer[done:size].data
            try:
                done += os.pwrite(self.fd, chunk, self.written + done)
            except OSError as e:
                if not self.direct or e.errno != errno.EINVAL:
                    raise
                _go_buffered(self.fd)
                self.direct = False
        self.written += size
        rest = self.used - size
        if rest:
            self.buffer[:rest] = self.buffer[size : self.used].copy()
        self.used = rest

    def close(self) -> None:
        """Writes what is left and closes the file."""
        if self.fd < 0:
            return
        try:
            length = self.written + self.used
            self.used = _round_up(self.used) if self.direct else self.used  # pad the last block
            self._write(self.used)
            os.ftruncate(self.fd, length)
        finally:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> AppendWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        elif self.fd >= 0:  # an error: the file is left as it is, its tail not written
            os.close(self.fd)
            self.fd = -1
