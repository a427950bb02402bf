"""A GGUF model read by transformers once, then from a folder of float32 safetensors.

transformers reads a GGUF file by dequantizing every tensor, which takes about 18 s for
SmolLM2-135M-Instruct on two cores; the folder it can be saved to loads in under a second. The
first `load_gguf` of a file converts it into the model cache (`model_cache_dir`); the next ones,
in any process, read the folder. The folder is named by the file's content (a hash) and the
versions of transformers and gguf that converted it, so a changed file or another converter
gets its own folder. The tensors are the ones the GGUF reading gives, saved as they are: a model
loaded from the folder equals the one read from the file, parameter for parameter.

The folder is written under a temporary name and renamed into place when complete, so a
folder under its final name is always whole. A process converting holds a lock file beside the
folder: another one converting the same file at the same time waits, then reads the folder
(without POSIX locks each converts, and one folder is kept). A folder that cannot be read (a
damaged file) is converted again; a cache that cannot be written (no space, no permission)
leaves the model read from the file, with a warning. ``NEURONEVAL_MODEL_CACHE`` names the
cache's folder; set to an empty string it turns the cache off.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cache import user_cache_dir

__all__ = ["gguf_folder", "load_gguf", "model_cache_dir"]

#: What the folder holds once complete (written last, checked first).
_DONE = "converted.txt"


def model_cache_dir() -> Path | None:
    """`NEURONEVAL_MODEL_CACHE`, else ``$XDG_CACHE_HOME/neuroneval/models`` (``~/.cache`` by
    default); None when the variable is set to an empty string (no cache)."""
    explicit = os.environ.get("NEURONEVAL_MODEL_CACHE")
    if explicit is not None:
        return Path(explicit) if explicit else None
    return user_cache_dir() / "models"


def _content_key(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=12)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_folder(path: Path) -> Path | None:
    """Where `load_gguf` keeps the conversion of the GGUF file `path` (None with no cache)."""
    from importlib.metadata import version

    root = model_cache_dir()
    if root is None:
        return None
    stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in path.stem)
    return root / f"{stem}-{_content_key(path)}-tf{version('transformers')}-gguf{version('gguf')}"


def _read_gguf(path: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": path.name, "local_files_only": True}
    # the GGUF reader draws its own progress bars on stderr
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **kwargs)
    return tokenizer, model


def _read_folder(folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    return tokenizer, model


def _write_folder(folder: Path, tokenizer: Any, model: Any) -> None:
    """The model's tensors, config and tokenizer into `folder`, atomically (see the module)."""
    from safetensors.torch import save_model

    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        config = copy.deepcopy(model.config)
        # the tensors are saved dequantized: the folder is a plain float32 model
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(partial)
        save_model(model, str(partial / "model.safetensors"))  # tied tensors saved once
        tokenizer.save_pretrained(partial)
        (partial / _DONE).write_text("complete\n")
        try:
            partial.rename(folder)
        except OSError:
            if not (folder / _DONE).is_file():  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _read_cached(folder: Path, path: Path) -> tuple[Any, Any] | None:
    """The model from its complete `folder`; None when there is none or it cannot be read (then
    removed, with a warning, to be converted again)."""
    if not (folder / _DONE).is_file():
        return None
    try:
        tokenizer, model = _read_folder(folder)
        return tokenizer, model.eval()
    except Exception as e:  # a damaged folder (safetensors raises its own error type): convert again
        warnings.warn(f"the model cache's {folder} cannot be read ({e}); converting {path.name} again", stacklevel=3)
        shutil.rmtree(folder, ignore_errors=True)
        return None


@contextlib.contextmanager
def _converting(folder: Path) -> Iterator[None]:
    """An exclusive lock on `folder`'s lock file while this process converts, so that a process
    converting the same file at the same time waits and then reads the folder rather than
    converting it too. Where no lock can be taken (no POSIX locks, a cache that cannot be
    written), each process converts on its own, as the atomic rename allows."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        handle = open(folder.parent / f".{folder.name}.lock", "ab")  # noqa: SIM115 (closed below)
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_gguf(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """The tokenizer and float32 model (eval mode) that transformers reads from the GGUF file
    `path`, from the model cache when converted before (see the module).

    Raises
    ------
    OSError, ValueError
        transformers cannot read the file.
    """
    path = Path(path)
    folder = gguf_folder(path)
    if folder is None:
        tokenizer, model = _read_gguf(path)
        return tokenizer, model.eval()
    found = _read_cached(folder, path)
    if found is not None:
        return found
    with _converting(folder):
        found = _read_cached(folder, path)  # converted by another process while this one waited
        if found is not None:
            return found
        tokenizer, model = _read_gguf(path)
        try:
            _write_folder(folder, tokenizer, model)
        except OSError as e:
            warnings.warn(f"cannot keep {path.name}'s conversion in the model cache {folder.parent}: {e}", stacklevel=2)
    return tokenizer, model.eval()
