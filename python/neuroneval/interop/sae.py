"""SAE weights in SAELens's and sparsify's directory layouts, and their encoders.

A `SparseAutoencoder` holds the weights of one sparse autoencoder and encodes activations
into latents exactly as the library that trained it does:

- ``"standard"``: ``relu(x' @ W_enc + b_enc)``;
- ``"topk"``: the `k` largest pre-activations of each row, ReLU'd, the others 0 (SAELens takes
  the top k and then applies ReLU, sparsify applies ReLU and then takes the top k: the dense
  results are the same);
- ``"jumprelu"``: ``relu(h) * (h > threshold)``, a strict comparison (SAELens's JumpReLU SAE);

where ``x' = normalise(x) - b_dec`` when `apply_b_dec_to_input` (sparsify's SAEs always
subtract `b_dec`; its transcoders do not), and `normalise` is SAELens's run-time input
normalisation: ``"none"``, ``"constant_norm_rescale"`` (each row scaled to norm sqrt(d_in))
or ``"layer_norm"`` (each row centred and divided by its standard deviation (n - 1) plus
1e-5). Normalisations that need dataset statistics (``"expected_average_only_in"``,
``"covariance_whitening"``) are refused: fold them into the weights first.

Ties at the k-th place of a top-k are broken towards the lowest latent index (torch.topk, which
both libraries call, leaves that choice unspecified, so their encodings can differ from these
only in which of exactly equal pre-activations is kept).

The layouts, as the libraries write them (``SAE.save_model`` and ``SparseCoder.save_to_disk``):

- SAELens (version 6): ``cfg.json`` (``architecture``, ``d_in``, ``d_sae``, ``dtype``,
  ``apply_b_dec_to_input``, ``normalize_activations``, ``reshape_activations``, ``metadata``
  with ``hook_name`` and ``sae_lens_version``, and ``k`` for topk) and
  ``sae_weights.safetensors`` (``W_enc`` (d_in, d_sae), ``b_enc``, ``W_dec`` (d_sae, d_in),
  ``b_dec``, and ``threshold`` for jumprelu). Earlier configs (no ``sae_lens_version`` 6 or
  later: ``hook_point``, ``activation_fn_str``, ``activation_fn_kwargs.k``, a boolean
  ``normalize_activations``) are read the way SAELens converts them.
- sparsify, one directory per hookpoint (its name): ``cfg.json`` (``d_in``, ``k``,
  ``num_latents`` (0: ``d_in * expansion_factor``), ``activation``, ``transcode``,
  ``skip_connection``, ...) and ``sae.safetensors`` (``encoder.weight`` (num_latents, d_in),
  ``encoder.bias``, ``W_dec`` (num_latents, d_in), ``b_dec``).

Weights are rounded as the library rounds them on loading (SAELens casts every tensor to the
config's ``dtype``, sparsify to the dtype of the file's first tensor) and held in float32
(float64 when that dtype is float64; bfloat16 and float16 widen exactly). `encode` computes in
float32 (float64 for float64 input) whatever dtype the library would compute in; its matrix
product is numpy's, which may round the last bit differently from torch's, while
`neuroneval.torch.sae_module` makes the library's own torch calls. Not supported (a clear
error): gated, transcoder and other architectures, SAELens's ``hook_z`` reshaping and
``rescale_acts_by_decoder_norm``, sparsify's ``groupmax`` activation and skip connections.

Examples
--------
>>> import tempfile, numpy as np
>>> from neuroneval.interop.sae import SparseAutoencoder, read_saelens, write_saelens
>>> rng = np.random.default_rng(0)
>>> W = rng.normal(size=(4, 6)).astype(np.float32)
>>> sae = SparseAutoencoder("topk", 4, 6, W, np.zeros(6, np.float32), W.T.copy(), np.zeros(4, np.float32), k=2)
>>> d = tempfile.mkdtemp()
>>> write_saelens(sae, d)
>>> again = read_saelens(d)
>>> again
SparseAutoencoder(architecture='topk', d_in=4, d_sae=6, k=2, source='saelens', path=...)
>>> latents = again.encode(rng.normal(size=(3, 4)).astype(np.float32))
>>> latents.shape, (latents > 0).sum(axis=1).max() <= 2
((3, 6), np.True_)
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._coerce import as_matrix, check_flag, check_integer, is_torch_tensor
from ..errors import DTypeError, InvalidInputError, NonFiniteError, ParameterError, ShapeError, SourceError
from ..files import parse_json, read_json, write_files_atomic

__all__ = ["SparseAutoencoder", "read_saelens", "read_sparsify", "write_saelens", "write_sparsify"]

ARCHITECTURES = ("standard", "topk", "jumprelu")
NORMALIZATIONS = ("none", "constant_norm_rescale", "layer_norm")
SOURCES = ("saelens", "sparsify")
SAELENS_CFG, SAELENS_WEIGHTS = "cfg.json", "sae_weights.safetensors"
SPARSIFY_CFG, SPARSIFY_WEIGHTS = "cfg.json", "sae.safetensors"
#: Written as ``metadata.sae_lens_version``: the cfg layout is SAELens 6's, so that SAELens reads
#: it as it is (without this, it converts the config as a pre-6 one).
SAELENS_LAYOUT_VERSION = "6.0.0"
#: Added to the standard deviation by ``layer_norm`` (SAELens's run_time_activation_ln_in).
LAYER_NORM_EPS = 1e-5
_DATA_NORMALIZATIONS = ("expected_average_only_in", "covariance_whitening")
_SAELENS_DTYPES = ("float32", "float64", "float16", "bfloat16")
_SAFETENSORS_FLOATS = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16"}

Array = npt.NDArray[np.floating[Any]]


@dataclass(frozen=True, eq=False, repr=False)
class SparseAutoencoder:
    """The weights of one sparse autoencoder, and its encoder.

    Parameters
    ----------
    architecture : {"standard", "topk", "jumprelu"}
        The activation: ReLU, top-k of the ReLU'd pre-activations, or JumpReLU.
    d_in, d_sae : int
        Input width and number of latents.
    W_enc : array (d_in, d_sae)
    b_enc : array (d_sae,)
    W_dec : array (d_sae, d_in)
    b_dec : array (d_in,)
        The weights (float16 widens to float32; float32 and float64 are kept; torch tensors are
        read too). Held as read-only arrays.
    threshold : array (d_sae,), optional
        JumpReLU's thresholds: required for "jumprelu", refused otherwise.
    k : int, optional
        Latents kept per row: required for "topk" (1 <= k <= d_sae), refused otherwise.
    apply_b_dec_to_input : bool
        Subtract `b_dec` from the input before encoding (SAELens's default; sparsify's SAEs do,
        its transcoders do not).
    normalize_activations : {"none", "constant_norm_rescale", "layer_norm"}
        SAELens's run-time input normalisation (see the module's notes).
    hook_name : str, optional
        Where the SAE reads its input (SAELens's ``metadata.hook_name``; a sparsify
        directory's name).
    source : {"saelens", "sparsify"}
        The library whose arithmetic `encode` follows (sparsify: top-k only, no normalisation).
    path : path, optional
        The directory it was read from.

    Raises
    ------
    ParameterError
        An unknown architecture or normalisation, a missing or superfluous `k` or
        `threshold`, `k` outside [1, d_sae].
    ShapeError, DTypeError, NonFiniteError
        A weight of the wrong shape, not real floats, or holding NaN or infinity.
    """

    architecture: str
    d_in: int
    d_sae: int
    W_enc: Array
    b_enc: Array
    W_dec: Array
    b_dec: Array
    threshold: Array | None = None
    k: int | None = None
    apply_b_dec_to_input: bool = True
    normalize_activations: str = "none"
    hook_name: str | None = None
    source: str = "saelens"
    path: Path | None = None

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ParameterError(
                f"architecture must be one of {', '.join(map(repr, ARCHITECTURES))}; got {self.architecture!r}"
                + (" (gated SAEs are not supported)" if self.architecture == "gated" else "")
            )
        d_in = check_integer(self.d_in, "d_in", minimum=1)
        d_sae = check_integer(self.d_sae, "d_sae", minimum=1)
        set_ = object.__setattr__
        set_(self, "d_in", d_in)
        set_(self, "d_sae", d_sae)
        shapes = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        for name, shape in shapes.items():
            set_(self, name, _weight(name, getattr(self, name), shape))
        jump = self.architecture == "jumprelu"
        if jump and self.threshold is None:
            raise ParameterError("a jumprelu SAE needs its threshold (d_sae,)")
        if not jump and self.threshold is not None:
            raise ParameterError(f"threshold is given, but a {self.architecture} SAE has none; use 'jumprelu'")
        if self.threshold is not None:
            set_(self, "threshold", _weight("threshold", self.threshold, (d_sae,)))
        if self.architecture == "topk":
            if self.k is None:
                raise ParameterError("a topk SAE needs k, the number of latents kept per row")
            set_(self, "k", check_integer(self.k, "k", minimum=1, maximum=d_sae))
        elif self.k is not None:
            raise ParameterError(f"k is given, but a {self.architecture} SAE keeps no fixed number of latents")
        set_(self, "apply_b_dec_to_input", check_flag(self.apply_b_dec_to_input, "apply_b_dec_to_input"))
        norm = self.normalize_activations
        if norm in _DATA_NORMALIZATIONS:
            raise ParameterError(
                f"normalize_activations={norm!r} needs statistics of the training data, which the SAE's files do "
                "not hold; fold them into the weights first (SAELens: fold_activation_norm_scaling_factor or "
                "fold_activation_whitening), which leaves 'none'"
            )
        if norm not in NORMALIZATIONS:
            raise ParameterError(
                f"normalize_activations must be one of {', '.join(map(repr, NORMALIZATIONS))}; got {norm!r}"
            )
        if self.source not in SOURCES:
            raise ParameterError(f"source must be one of {', '.join(map(repr, SOURCES))}; got {self.source!r}")
        if self.source == "sparsify" and (self.architecture != "topk" or norm != "none"):
            raise ParameterError("a sparsify SAE is a topk SAE without input normalisation")
        if self.hook_name is not None and not isinstance(self.hook_name, str):
            raise ParameterError(f"hook_name must be a string or None; got {self.hook_name!r}")
        if self.path is not None:
            set_(self, "path", Path(self.path))

    def __repr__(self) -> str:
        k = f", k={self.k}" if self.k is not None else ""
        hook = f", hook_name={self.hook_name!r}" if self.hook_name is not None else ""
        path = f", path={str(self.path)!r}" if self.path is not None else ""
        return (
            f"SparseAutoencoder(architecture={self.architecture!r}, d_in={self.d_in}, d_sae={self.d_sae}{k}, "
            f"source={self.source!r}{hook}{path})"
        )

    @property
    def dtype(self) -> np.dtype[Any]:
        """The weights' common dtype (float64 if any of them is)."""
        arrays = [self.W_enc, self.b_enc, self.W_dec, self.b_dec]
        if self.threshold is not None:
            arrays.append(self.threshold)
        return np.dtype(np.result_type(*arrays))

    def encode(self, x: Any) -> Array:
        """The latents of the rows of `x`: (rows, d_sae).

        Float64 input (and integers or bools, which widen exactly to float64) is computed in
        float64, float16 and float32 in float32; the weights are cast to that dtype.

        Parameters
        ----------
        x : array or tensor (rows, d_in)
            Activations at the SAE's hook.

        Returns
        -------
        numpy.ndarray (rows, d_sae)
            The latents, float32 (float64 for float64 input); inactive latents are +0.

        Raises
        ------
        ShapeError
            `x` is not 2-D or its width is not `d_in`.
        DTypeError
            `x` is not real numbers.
        NonFiniteError
            `x` holds NaN or infinity, or the pre-activations overflow (or a zero or constant
            row under ``constant_norm_rescale`` / ``layer_norm``).

        Examples
        --------
        >>> import numpy as np
        >>> eye = np.eye(3, dtype=np.float32)
        >>> sae = SparseAutoencoder("jumprelu", 3, 3, eye, np.zeros(3, np.float32), eye, np.zeros(3, np.float32),
        ...                         threshold=np.full(3, 0.5, np.float32))
        >>> sae.encode(np.array([[0.5, 0.75, -1.0]], np.float32)).tolist()
        [[0.0, 0.75, 0.0]]
        """
        arr = as_matrix(x, "x")
        if arr.shape[1] != self.d_in:
            raise ShapeError(f"x has {arr.shape[1]} columns; this SAE reads d_in={self.d_in}")
        dtype = np.float64 if arr.dtype == np.float64 else np.float32
        h: Array = arr.astype(dtype, copy=False)
        bad = ~np.isfinite(h)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise NonFiniteError(
                f"x holds {int(bad.sum())} non-finite values (first at row {r}, column {c}: {h[r, c]})"
            )
        h = self._pre_activations(h, dtype)
        if self.architecture == "topk":
            assert self.k is not None
            keep = _top_k(h, self.k)
            keep &= h > 0
        elif self.architecture == "jumprelu":
            assert self.threshold is not None
            keep = (h > self.threshold.astype(dtype, copy=False)) & (h > 0)
        else:
            keep = h > 0
        return np.where(keep, h, dtype(0))

    def _pre_activations(self, x: Array, dtype: type[np.floating[Any]]) -> Array:
        if self.normalize_activations == "constant_norm_rescale":
            with np.errstate(divide="ignore", invalid="ignore"):
                x = x * (self.d_in**0.5 / np.linalg.norm(x, axis=1, keepdims=True))
        elif self.normalize_activations == "layer_norm":
            x = x - x.mean(axis=1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                x = x / (x.std(axis=1, ddof=1, keepdims=True) + dtype(LAYER_NORM_EPS))
        if self.apply_b_dec_to_input:
            x = x - self.b_dec.astype(dtype, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            h: Array = x @ self.W_enc.astype(dtype, copy=False) + self.b_enc.astype(dtype, copy=False)
        bad = ~np.isfinite(h)
        if bad.any():
            r = int(np.argwhere(bad)[0][0])
            why = f" ({self.normalize_activations} of row {r})" if self.normalize_activations != "none" else ""
            raise NonFiniteError(
                f"the SAE's pre-activations are not finite at row {r}{why}: the input overflows {np.dtype(dtype)}"
                + (" or the row has no spread" if why else "")
            )
        return h


def _top_k(h: Array, k: int) -> npt.NDArray[np.bool_]:
    """The `k` largest entries of each row; among entries equal to the k-th largest, the
    lowest indices."""
    n = h.shape[1]
    if k >= n:
        return np.ones(h.shape, dtype=bool)
    kth = np.partition(h, n - k, axis=1)[:, n - k : n - k + 1]  # the k-th largest of each row
    keep = h >= kth
    for r in np.flatnonzero(keep.sum(axis=1) > k):  # rows with ties at the k-th place
        tied = np.flatnonzero(h[r] == kth[r, 0])
        keep[r, tied[k - int((h[r] > kth[r, 0]).sum()) :]] = False
    return keep


def _weight(name: str, value: Any, shape: tuple[int, ...]) -> Array:
    """A weight as a read-only float32 or float64 array of `shape`, all finite."""
    if is_torch_tensor(value):
        t = value.detach().cpu()
        if t.is_floating_point() and str(t.dtype) not in ("torch.float32", "torch.float64"):
            t = t.float()
        value = t.numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"{name} cannot be read as an array of numbers: {e}") from e
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    if arr.dtype.type not in (np.float32, np.float64):
        raise DTypeError(f"{name} has dtype {arr.dtype}; weights must be float16, float32 or float64")
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.shape != shape:
        raise ShapeError(f"{name} has shape {arr.shape}; expected {shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteError(f"{name} holds {int(bad.sum())} non-finite values (first at index {first})")
    view = arr.view()
    view.flags.writeable = False
    return view


# --------------------------------------------------------------------------- reading files


def _directory(directory: str | os.PathLike[str], what: str) -> Path:
    d = Path(directory)
    if not d.is_dir():
        raise SourceError(f"{d} is not a directory; {what}")
    return d


def _read_cfg(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise SourceError(f"{path} does not exist; {what}")
    cfg = read_json(path)
    if not isinstance(cfg, dict):
        raise SourceError(f"{path} must hold a JSON object; it holds {type(cfg).__name__}")
    return cfg


def _cfg_int(cfg: dict[str, Any], key: str, path: Path, default: int | None = None, minimum: int = 1) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise SourceError(f"{path} has no '{key}'")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SourceError(f"{path}: '{key}' must be an integer >= {minimum}; got {value!r}")
    return value


def _cfg_flag(cfg: dict[str, Any], key: str, path: Path, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise SourceError(f"{path}: '{key}' must be true or false; got {value!r}")
    return value


def _read_tensors(path: Path, what: str) -> tuple[dict[str, Array], list[str]]:
    """Every float tensor of a safetensors file, widened to float32 or kept float64, with the
    keys in the order the file lists them."""
    from safetensors import safe_open

    if not path.is_file():
        raise SourceError(f"{path} does not exist; {what}")
    try:
        with safe_open(str(path), framework="numpy") as f:
            keys = list(f.keys())
            tensors, kinds = {}, {}
            for key in keys:
                kind = f.get_slice(key).get_dtype()
                if kind not in _SAFETENSORS_FLOATS:
                    raise SourceError(f"{path}: the tensor '{key}' has dtype {kind}; SAE weights are floats")
                kinds[key] = _SAFETENSORS_FLOATS[kind]
                if kind != "BF16":  # numpy has no bfloat16: read below from the raw bytes
                    tensors[key] = f.get_tensor(key)
    except SourceError:
        raise
    except Exception as e:  # safetensors raises its own error types for a bad header or data
        raise SourceError(f"{path} is not a readable safetensors file (truncated or corrupt?): {e}") from e
    if "bfloat16" in kinds.values():
        tensors.update(_read_bfloat16(path, [k for k in keys if kinds[k] == "bfloat16"]))
    result = {k: (v if v.dtype == np.float64 else v.astype(np.float32)) for k, v in tensors.items()}
    for key, arr in result.items():
        bad = ~np.isfinite(arr)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise SourceError(
                f"{path}: the tensor '{key}' holds {int(bad.sum())} NaN or infinite values (first at {first})"
            )
    return result, [kinds[k] for k in keys]


#: The largest safetensors header the safetensors library reads (its MAX_HEADER_SIZE).
SAFETENSORS_MAX_HEADER = 100_000_000


def _safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file and the offset of its data, from the layout
    safetensors documents (an 8-byte little-endian header length, the JSON header, the
    data): a length beyond the file or the library's limit, or a header that is not a JSON
    object, is a `SourceError` naming the file."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            prefix = fh.read(8)
            n = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            if not 0 < n <= min(size - 8, SAFETENSORS_MAX_HEADER):
                raise SourceError(
                    f"{path} is not a readable safetensors file: its header length {n} does not fit in its "
                    f"{size:,} bytes"
                )
            raw = fh.read(n)
    except OSError as e:
        raise SourceError(f"cannot read {path}: {e.strerror or e}") from None
    header = parse_json(raw, f"{path}'s safetensors header")
    if not isinstance(header, dict):
        raise SourceError(f"{path}'s safetensors header must be a JSON object")
    return header, 8 + n


def _read_bfloat16(path: Path, keys: list[str]) -> dict[str, Array]:
    """bfloat16 tensors widened exactly to float32, from the file's header and bytes (numpy has
    no bfloat16); every offset and shape the header gives is checked against the file."""
    header, start = _safetensors_header(path)
    size = path.stat().st_size
    result = {}
    for key in keys:
        entry = header.get(key)
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in offsets)
            or not isinstance(shape, list)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in shape)
        ):
            raise SourceError(f"{path}: the header's entry for '{key}' is not a tensor's (data_offsets, shape)")
        begin, end = offsets
        if not 0 <= begin <= end <= size - start or end - begin != 2 * math.prod(shape):
            raise SourceError(f"{path}: the tensor '{key}' has offsets {offsets} that do not fit its shape or the file")
        raw = np.fromfile(path, dtype="<u2", count=(end - begin) // 2, offset=start + begin)
        result[key] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return result


def _round_to(arr: Array, dtype: str) -> Array:
    """`arr` rounded to `dtype` as torch's cast does (to nearest, ties to even), held in
    float32 (float64 for float64)."""
    if dtype == "float64":
        return arr.astype(np.float64)
    a32 = arr.astype(np.float32)
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return arr.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        bits = a32.view(np.uint32)
        bits = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return bits.view(np.float32)
    return a32


def _check_shapes(path: Path, tensors: dict[str, Array], shapes: dict[str, tuple[int, ...]], cfg: str) -> None:
    missing = [k for k in shapes if k not in tensors]
    if missing:
        raise SourceError(
            f"{path} has no {', '.join(map(repr, missing))} tensor; it holds {', '.join(map(repr, tensors)) or 'none'}"
        )
    for key, shape in shapes.items():
        if tuple(tensors[key].shape) != shape:
            raise SourceError(f"{path}: the tensor '{key}' has shape {tuple(tensors[key].shape)}; {cfg} says {shape}")


def _build(cfg_path: Path, **fields: Any) -> SparseAutoencoder:
    try:
        return SparseAutoencoder(**fields)
    except InvalidInputError as e:
        raise SourceError(f"{cfg_path}: {e}") from e


def _major(version: Any) -> int | None:
    m = re.match(r"\s*v?(\d+)", str(version)) if version is not None else None
    return int(m.group(1)) if m else None


def _saelens_cfg(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """The config in SAELens 6's terms: earlier layouts converted as SAELens's
    ``handle_pre_6_0_config`` does."""
    metadata = cfg.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise SourceError(f"{path}: 'metadata' must be a JSON object; got {metadata!r}")
    metadata = metadata or {}
    version = cfg.get("sae_lens_version") or metadata.get("sae_lens_version")
    major = _major(version)
    if major is not None and major >= 6:
        if "architecture" not in cfg:
            raise SourceError(f"{path} has no 'architecture' (SAELens {version} writes it)")
        hook = metadata.get("hook_name", cfg.get("hook_name"))
        return {**cfg, "hook_name": hook}
    new = dict(cfg)
    for old, name in (("hook_point", "hook_name"), ("activation_fn_str", "activation_fn")):
        if old in new and name not in new:
            new[name] = new.pop(old)
    new.setdefault("architecture", "standard")
    kwargs = new.get("activation_fn_kwargs") or {}
    activation = new.get("activation_fn")
    if activation == "topk" and isinstance(kwargs, dict) and kwargs.get("k") is not None:
        new["architecture"], new["k"] = "topk", kwargs["k"]
    elif activation not in (None, "relu") and new["architecture"] == "standard":
        raise SourceError(
            f"{path}: activation_fn {activation!r} is not supported (SAELens 6 would replace it by ReLU, "
            "which is not the SAE that was trained)"
        )
    norm = new.get("normalize_activations")
    new["normalize_activations"] = (
        "none" if norm is None or norm is False else "expected_average_only_in" if norm is True else norm
    )
    new.setdefault("reshape_activations", "hook_z" if "hook_z" in str(new.get("hook_name") or "") else "none")
    return new


def read_saelens(directory: str | os.PathLike[str]) -> SparseAutoencoder:
    """A SAELens SAE directory (``cfg.json`` and ``sae_weights.safetensors``), as
    ``SAE.load_from_disk`` reads it.

    Parameters
    ----------
    directory : path
        The directory ``SAE.save_model`` (or `write_saelens`) wrote.

    Returns
    -------
    SparseAutoencoder
        With ``source="saelens"`` and `path` set. The weights are rounded to the config's
        ``dtype`` as SAELens casts them, and held in float32 (float64 for ``"float64"``);
        ``log_threshold`` (older jumprelu files) becomes ``threshold = exp(log_threshold)``.

    Raises
    ------
    SourceError
        A missing or unreadable file, a truncated safetensors file, a missing or extra
        tensor, a shape that disagrees with ``d_in`` / ``d_sae``, NaN weights, or a config
        this reader does not support (an architecture other than standard, topk and jumprelu,
        ``reshape_activations="hook_z"``, ``rescale_acts_by_decoder_norm``, a
        normalisation that needs dataset statistics); the message names the file.

    Examples
    --------
    >>> import json, tempfile, numpy as np
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "cfg.json").write_text(json.dumps({"architecture": "standard", "d_in": 2, "d_sae": 3}))
    >>> read_saelens(d)
    Traceback (most recent call last):
    ...
    neuroneval.errors.SourceError: .../sae_weights.safetensors does not exist; a SAELens directory holds cfg.json and sae_weights.safetensors
    """
    what = f"a SAELens directory holds {SAELENS_CFG} and {SAELENS_WEIGHTS}"
    d = _directory(directory, what)
    cfg_path, weights_path = d / SAELENS_CFG, d / SAELENS_WEIGHTS
    cfg = _saelens_cfg(_read_cfg(cfg_path, what), cfg_path)
    architecture = cfg["architecture"]
    if architecture not in ARCHITECTURES:
        raise SourceError(
            f"{cfg_path}: the architecture {architecture!r} is not supported; read are "
            f"{', '.join(map(repr, ARCHITECTURES))}"
        )
    d_in, d_sae = _cfg_int(cfg, "d_in", cfg_path), _cfg_int(cfg, "d_sae", cfg_path)
    dtype = str(cfg.get("dtype", "float32")).removeprefix("torch.")
    if dtype not in _SAELENS_DTYPES:
        raise SourceError(f"{cfg_path}: dtype {cfg.get('dtype')!r} is not one of {', '.join(_SAELENS_DTYPES)}")
    if cfg.get("reshape_activations", "none") != "none":
        raise SourceError(
            f"{cfg_path}: reshape_activations={cfg['reshape_activations']!r} is not supported (the SAE reads "
            "(..., n_heads, d_head) attention outputs); only 'none' is"
        )
    if cfg.get("rescale_acts_by_decoder_norm", False) is not False:
        raise SourceError(
            f"{cfg_path}: rescale_acts_by_decoder_norm is not supported; save the SAE with "
            "save_inference_model, which folds the decoder norms into the encoder"
        )
    k = _cfg_int(cfg, "k", cfg_path, default=100) if architecture == "topk" else None  # TopKSAEConfig's default
    hook = cfg.get("hook_name")
    if hook is not None and not isinstance(hook, str):
        raise SourceError(f"{cfg_path}: hook_name must be a string; got {hook!r}")
    tensors, _ = _read_tensors(weights_path, what)
    if "scaling_factor" in tensors:  # SAELens drops an all-ones one and refuses any other
        if not np.all(tensors["scaling_factor"] == 1):
            raise SourceError(f"{weights_path}: a finetuning scaling_factor other than 1 is not supported")
        del tensors["scaling_factor"]
    if architecture == "jumprelu" and "log_threshold" in tensors and "threshold" not in tensors:
        tensors["threshold"] = np.exp(tensors.pop("log_threshold"))
    shapes = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    if architecture == "jumprelu":
        shapes["threshold"] = (d_sae,)
    _check_shapes(weights_path, tensors, shapes, f"{SAELENS_CFG} (d_in={d_in}, d_sae={d_sae})")
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        raise SourceError(
            f"{weights_path}: unexpected tensors {extra} for a {architecture} SAE (SAELens refuses them too)"
        )
    weights = {key: _round_to(tensors[key], dtype) for key in shapes}
    apply = _cfg_flag(cfg, "apply_b_dec_to_input", cfg_path, True)
    return _build(
        cfg_path,
        architecture=architecture,
        d_in=d_in,
        d_sae=d_sae,
        **weights,
        k=k,
        apply_b_dec_to_input=apply,
        normalize_activations=cfg.get("normalize_activations", "none"),
        hook_name=hook,
        source="saelens",
        path=d,
    )


def read_sparsify(directory: str | os.PathLike[str]) -> SparseAutoencoder:
    """A sparsify SAE directory (one hookpoint: ``cfg.json`` and ``sae.safetensors``), as
    ``SparseCoder.load_from_disk`` reads it.

    Parameters
    ----------
    directory : path
        The hookpoint's directory (its name, such as ``layers.6``, becomes `hook_name`).

    Returns
    -------
    SparseAutoencoder
        A topk SAE with ``source="sparsify"``: ``W_enc`` is ``encoder.weight`` transposed,
        `apply_b_dec_to_input` is ``not transcode``. The weights are rounded to the dtype of
        the file's first tensor, as sparsify builds its module in that dtype.

    Raises
    ------
    SourceError
        A missing or unreadable file, a truncated safetensors file, a missing or extra tensor,
        a shape that disagrees with ``d_in`` / ``num_latents``, NaN weights, the ``groupmax``
        activation or a skip connection (``W_skip``), which are not supported; the message
        names the file.
    """
    what = f"a sparsify hookpoint directory holds {SPARSIFY_CFG} and {SPARSIFY_WEIGHTS}"
    d = _directory(directory, what)
    cfg_path, weights_path = d / SPARSIFY_CFG, d / SPARSIFY_WEIGHTS
    cfg = _read_cfg(cfg_path, what)
    d_in = _cfg_int(cfg, "d_in", cfg_path)
    activation = cfg.get("activation", "topk")
    if activation != "topk":
        raise SourceError(f"{cfg_path}: the activation {activation!r} is not supported; only 'topk' is")
    if cfg.get("signed", False) is not False:
        raise SourceError(f"{cfg_path}: signed SAEs (an early sparsify option) are not supported")
    num_latents = _cfg_int(cfg, "num_latents", cfg_path, default=0, minimum=0)
    d_sae = num_latents or d_in * _cfg_int(cfg, "expansion_factor", cfg_path, default=32)
    k = _cfg_int(cfg, "k", cfg_path, default=32)
    transcode = _cfg_flag(cfg, "transcode", cfg_path, False)
    if _cfg_flag(cfg, "skip_connection", cfg_path, False):
        raise SourceError(f"{cfg_path}: skip connections (W_skip) are not supported")
    tensors, kinds = _read_tensors(weights_path, what)
    if "W_skip" in tensors:
        raise SourceError(f"{weights_path}: skip connections (W_skip) are not supported")
    shapes = {"encoder.weight": (d_sae, d_in), "encoder.bias": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    _check_shapes(weights_path, tensors, shapes, f"{SPARSIFY_CFG} (d_in={d_in}, num_latents={d_sae})")
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        raise SourceError(f"{weights_path}: unexpected tensors {extra} (sparsify refuses them too)")
    w = {key: _round_to(tensors[key], kinds[0]) for key in shapes}
    return _build(
        cfg_path,
        architecture="topk",
        d_in=d_in,
        d_sae=d_sae,
        W_enc=w["encoder.weight"].T,
        b_enc=w["encoder.bias"],
        W_dec=w["W_dec"],
        b_dec=w["b_dec"],
        k=k,
        apply_b_dec_to_input=not transcode,
        hook_name=d.name,
        source="sparsify",
        path=d,
    )


# --------------------------------------------------------------------------- writing files


def _check_sae(sae: Any) -> SparseAutoencoder:
    if not isinstance(sae, SparseAutoencoder):
        raise ParameterError(f"sae must be a SparseAutoencoder; got {type(sae).__name__}")
    return sae


def _writer(tensors: dict[str, Array], dtype: np.dtype[Any]) -> Callable[[Path], object]:
    from safetensors.numpy import save_file

    arrays = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in tensors.items()}
    return lambda p: save_file(arrays, str(p))


def _json_writer(obj: dict[str, Any]) -> Callable[[Path], object]:
    return lambda p: p.write_text(json.dumps(obj), encoding="utf-8")


def write_saelens(sae: SparseAutoencoder, directory: str | os.PathLike[str]) -> None:
    """`sae` as a SAELens 6 directory that ``SAE.load_from_disk`` reads (all files or none).

    Writes ``sae_weights.safetensors`` (``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``, and
    ``threshold`` for jumprelu, in the weights' dtype) and ``cfg.json`` in the layout
    ``SAE.save_model`` writes, with ``metadata.sae_lens_version`` "6.0.0" (the layout's
    version) and ``metadata.hook_name``. The directory is created; files of the same names
    are replaced.

    Parameters
    ----------
    sae : SparseAutoencoder
    directory : path

    Raises
    ------
    ParameterError
        `sae` is not a SparseAutoencoder.
    OutputWriteError
        The files cannot be written.
    """
    sae = _check_sae(sae)
    dtype = sae.dtype
    tensors = {"W_enc": sae.W_enc, "b_enc": sae.b_enc, "W_dec": sae.W_dec, "b_dec": sae.b_dec}
    if sae.threshold is not None:
        tensors["threshold"] = sae.threshold
    metadata: dict[str, Any] = {"sae_lens_version": SAELENS_LAYOUT_VERSION}
    if sae.hook_name is not None:
        metadata["hook_name"] = sae.hook_name
    cfg: dict[str, Any] = {
        "d_in": sae.d_in,
        "d_sae": sae.d_sae,
        "dtype": str(dtype),
        "device": "cpu",
        "apply_b_dec_to_input": sae.apply_b_dec_to_input,
        "normalize_activations": sae.normalize_activations,
        "reshape_activations": "none",
        "metadata": metadata,
    }
    if sae.architecture == "topk":
        cfg["k"] = sae.k
        cfg["rescale_acts_by_decoder_norm"] = False
    cfg["architecture"] = sae.architecture
    write_files_atomic(directory, {SAELENS_WEIGHTS: _writer(tensors, dtype), SAELENS_CFG: _json_writer(cfg)})


def write_sparsify(sae: SparseAutoencoder, directory: str | os.PathLike[str]) -> None:
    """`sae` as a sparsify hookpoint directory that ``SparseCoder.load_from_disk`` reads
    (all files or none).

    Writes ``sae.safetensors`` (``encoder.weight`` = ``W_enc.T``, ``encoder.bias``,
    ``W_dec``, ``b_dec``, in the weights' dtype) and ``cfg.json`` as
    ``SparseCoder.save_to_disk`` does (``num_latents`` = d_sae, ``transcode`` = ``not
    apply_b_dec_to_input``; ``expansion_factor`` d_sae / d_in when whole, else sparsify's
    default 32, which ``num_latents`` overrides). `hook_name` is not written: in sparsify's
    layout it is the directory's name.

    Parameters
    ----------
    sae : SparseAutoencoder
        A topk SAE without input normalisation (sparsify has no other kind).
    directory : path

    Raises
    ------
    ParameterError
        `sae` is not a SparseAutoencoder, or is not one that sparsify can hold.
    OutputWriteError
        The files cannot be written.
    """
    sae = _check_sae(sae)
    if sae.architecture != "topk" or sae.normalize_activations != "none":
        raise ParameterError(
            f"sparsify holds topk SAEs without input normalisation; this one is {sae.architecture} with "
            f"normalize_activations={sae.normalize_activations!r} (write it with write_saelens)"
        )
    dtype = sae.dtype
    tensors = {"W_dec": sae.W_dec, "b_dec": sae.b_dec, "encoder.bias": sae.b_enc, "encoder.weight": sae.W_enc.T}
    expansion = sae.d_sae // sae.d_in if sae.d_sae % sae.d_in == 0 else 32
    cfg = {
        "activation": "topk",
        "expansion_factor": expansion,
        "normalize_decoder": True,
        "num_latents": sae.d_sae,
        "k": sae.k,
        "multi_topk": False,
        "skip_connection": False,
        "transcode": not sae.apply_b_dec_to_input,
        "d_in": sae.d_in,
    }
    write_files_atomic(directory, {SPARSIFY_WEIGHTS: _writer(tensors, dtype), SPARSIFY_CFG: _json_writer(cfg)})
