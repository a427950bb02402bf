"""What the file-system tests share: a real tmpfs mounted for a test (a small disk to fill, a
read-only folder), where the machine lets a test mount one."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted on `mount` with `options` ("size=2m", "ro,size=1m") for the block; the test
    is skipped where it cannot be mounted (not root, or forbidden)."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
