"""The CLIP image judge: the cosine similarity of an image's CLIP embedding and the templated
explanation's, through a calibrated sigmoid.

`ClipJudge` runs an `open_clip <https://github.com/mlfoundations/open_clip>`_ checkpoint that the
user gives as a local file. Nothing is downloaded: the architecture comes from open_clip's
built-in configs (``open_clip.list_models()``) or from a config the user gives (a dict, or a
JSON file such as a hub export's ``open_clip_config.json``), the weights from the checkpoint
file, and the tokenizer is open_clip's CLIP BPE tokenizer, whose vocabulary ships inside the
open_clip wheel. Architectures whose text tower or tokenizer come from the Hugging Face hub
(``hf_model_name``, ``hf_tokenizer_name``, the SigLIP family) are refused for that reason.

Images are (H, W, 3) RGB arrays, uint8 in 0..255 or float in [0, 1]; they go through the model's
own evaluation preprocessing (resize, centre crop, normalisation: open_clip's transforms, on
PIL images). Each distinct image is embedded once per `label` call, however many explanations
it is judged under.

Examples
--------
>>> ClipJudge.input_kind
'image'
>>> DEFAULT_TEMPLATE.format(explanation="dogs")
'a photo of dogs.'
>>> judge = ClipJudge("ViT-B-32", "/models/ViT-B-32-laion2b.pt")  # doctest: +SKIP
>>> import numpy as np
>>> images = [np.zeros((224, 224, 3), dtype=np.uint8), np.ones((64, 80, 3))]
>>> from neuroneval.label import label
>>> labels = label(judge, images, ["dogs", "the night sky"])  # doctest: +SKIP
>>> labels.probabilities.shape  # doctest: +SKIP
(2, 2)
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from neuroneval.errors import ParameterError, SourceError
from neuroneval.files import read_json

from .judge import LOCAL_JUDGE_OPTIONS, Calibration, Judge, Judgement

__all__ = ["DEFAULT_TEMPLATE", "ClipJudge"]

DEFAULT_TEMPLATE = "a photo of {explanation}."

#: The vocabulary of open_clip's bundled CLIP BPE tokenizer (`open_clip.SimpleTokenizer`).
_BPE_VOCAB = 49408

Vector = npt.NDArray[np.float64]


# --------------------------------------------------------------------------------------------
# The checkpoint's digest


StatKey = tuple[int, int, int, int]


def _stat_key(path: str) -> StatKey:
    """What changes when a file is rewritten: size, modification time, change time, inode."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise SourceError(f"cannot read the CLIP checkpoint {path}: {e.strerror or e}") from e
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _checkpoint_digest(path: str) -> tuple[StatKey, str]:
    """A checkpoint file's stat key and the SHA-256 of its bytes, read now."""
    key = _stat_key(path)
    try:
        with open(path, "rb") as f:
            sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as e:
        raise SourceError(f"cannot read the CLIP checkpoint {path}: {e.strerror or e}") from e
    if _stat_key(path) != key:
        raise SourceError(f"the CLIP checkpoint {path} changed while it was being read; try again")
    return key, sha256


# --------------------------------------------------------------------------------------------
# Configs


def _import_open_clip() -> Any:
    try:
        import open_clip
    except ImportError as e:
        raise SourceError("the clip judge needs the open-clip-torch package (pip install 'neuroneval[label]')") from e
    return open_clip


def _read_config(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A user's config as (model config, preprocessing overrides).

    It is a dict or a JSON file, either a bare open_clip model config (``embed_dim``,
    ``vision_cfg``, ``text_cfg``) or an ``open_clip_config.json`` (``model_cfg`` and, optionally,
    ``preprocess_cfg``).
    """
    where = "the CLIP config"
    if isinstance(config, str | os.PathLike):
        path = Path(os.fspath(config))
        where = f"the CLIP config {path}"
        if not path.is_file():
            raise SourceError(f"no CLIP config file at {path}")
        value = read_json(path)
    elif isinstance(config, Mapping):
        value = copy.deepcopy(dict(config))
    else:
        raise ParameterError(f"config must be a dict or the path of a JSON file; got {type(config).__name__}")
    if not isinstance(value, dict):
        raise ParameterError(f"{where} must be a JSON object; got {type(value).__name__}")
    preprocess: Any = {}
    if "model_cfg" in value:
        preprocess = value.get("preprocess_cfg") or {}
        value = value["model_cfg"]
    if not isinstance(value, dict) or not isinstance(preprocess, dict):
        raise ParameterError(f"{where}: model_cfg and preprocess_cfg must be objects")
    missing = [k for k in ("embed_dim", "vision_cfg", "text_cfg") if k not in value]
    if missing:
        raise ParameterError(
            f"{where} lacks {missing}: an open_clip model config has embed_dim, vision_cfg and text_cfg"
        )
    if not isinstance(value["vision_cfg"], dict) or not isinstance(value["text_cfg"], dict):
        raise ParameterError(f"{where}: vision_cfg and text_cfg must be objects")
    try:
        json.dumps([value, preprocess])
    except (TypeError, ValueError) as e:
        raise ParameterError(f"{where} must hold only JSON values: {e}") from e
    return value, preprocess


def _check_offline(architecture: str, model_cfg: dict[str, Any]) -> None:
    """A `ParameterError` for an architecture whose tokenizer or text tower would be fetched from
    the Hugging Face hub (the judge never downloads)."""
    text = model_cfg["text_cfg"]
    hub = [k for k in ("hf_model_name", "hf_tokenizer_name") if text.get(k)]
    if hub:
        raise ParameterError(
            f"the CLIP architecture {architecture!r} takes its text tower or tokenizer from the Hugging Face hub "
            f"({', '.join(f'{k}={text[k]!r}' for k in hub)}); the clip judge loads only models whose tokenizer ships "
            "with open_clip, and never downloads"
        )
    vocab = text.get("vocab_size", _BPE_VOCAB)
    if not isinstance(vocab, int) or vocab < _BPE_VOCAB:
        raise ParameterError(
            f"the CLIP architecture {architecture!r} has a text vocabulary of {vocab!r} tokens, but open_clip's bundled "
            f"CLIP tokenizer (the only one the clip judge uses) needs {_BPE_VOCAB}"
        )


def _config_digest(model_cfg: dict[str, Any], preprocess: dict[str, Any]) -> str:
    text = json.dumps({"model": model_cfg, "preprocess": preprocess}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_REGISTER_LOCK = threading.Lock()


def _register(open_clip: Any, model_cfg: dict[str, Any], digest: str) -> str:
    """Register a custom config with open_clip under a name derived from its content (so two
    configs never share a name, and no built-in is shadowed); the name."""
    name = f"neuroneval-clip-{digest[:24]}"
    with _REGISTER_LOCK:
        if open_clip.get_model_config(name) is None:
            with tempfile.TemporaryDirectory(prefix="neuroneval-clip-") as folder:
                path = Path(folder) / f"{name}.json"
                path.write_text(json.dumps(model_cfg), encoding="utf-8")
                # open_clip keeps the registered config after the file is gone (its rescans skip
                # missing paths).
                open_clip.add_model_config(path)
        if open_clip.get_model_config(name) is None:
            raise ParameterError(
                "open_clip did not accept the CLIP config (it needs embed_dim, vision_cfg and text_cfg)"
            )
    return name


class _OpenClipNotices(logging.Filter):
    """Drops open_clip's factory notices (such as "No pretrained weights loaded ... initialized
    randomly", logged before the judge loads the checkpoint itself)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = os.path.normcase(os.path.abspath(source))

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.WARNING and os.path.normcase(record.pathname) == self.source)


@contextlib.contextmanager
def _quiet_open_clip(open_clip: Any) -> Iterator[None]:
    """open_clip logs through the root logger (whose first use installs a stderr handler): a
    filter and, where the root logger has no handler, a null one, for the time of a model build."""
    root = logging.getLogger()
    notices = _OpenClipNotices(open_clip.factory.__file__)
    null = logging.NullHandler() if not root.handlers else None
    root.addFilter(notices)
    if null is not None:
        root.addHandler(null)
    try:
        yield
    finally:
        root.removeFilter(notices)
        if null is not None:
            root.removeHandler(null)


@functools.lru_cache(maxsize=8)
def _tokenizer(name: str) -> Any:
    """open_clip's tokenizer of a registered architecture, made once (reading the bundled BPE
    vocabulary takes a good part of a second); the names of custom configs are their digests."""
    return _import_open_clip().get_tokenizer(name)


def _short(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


# --------------------------------------------------------------------------------------------
# Images


def _as_uint8(image: Any, i: int) -> npt.NDArray[np.uint8]:
    """An input image as a contiguous (H, W, 3) uint8 array, or a `ParameterError` naming it."""
    a = np.asarray(image)
    if a.ndim != 3 or a.shape[-1] != 3:
        raise ParameterError(f"input {i} has shape {a.shape}, but the clip judge reads RGB images of shape (H, W, 3)")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ParameterError(f"input {i} is an empty image (shape {a.shape})")
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)):
            raise ParameterError(f"input {i} holds NaN or infinite pixels")
        low, high = float(a.min()), float(a.max())
        if low < 0.0 or high > 1.0:
            raise ParameterError(
                f"input {i} is a float image with values in [{low:g}, {high:g}]; float images must lie in [0, 1]"
            )
        return np.rint(a.astype(np.float64) * 255.0).astype(np.uint8)
    if a.dtype.kind in "iu":
        low, high = int(a.min()), int(a.max())
        if low < 0 or high > 255:
            raise ParameterError(
                f"input {i} is an integer image with values in [{low}, {high}]; they must lie in 0..255"
            )
        return np.ascontiguousarray(a.astype(np.uint8))
    raise ParameterError(f"input {i} has dtype {a.dtype}; images are uint8 (0..255) or float ([0, 1])")


def _unit_rows(features: Any) -> npt.NDArray[np.float64]:
    """Float64 rows scaled to unit length (a zero row stays zero, so its cosine is 0)."""
    rows = np.asarray(features, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    result: npt.NDArray[np.float64] = rows / np.maximum(norms, 1e-300)
    return result


# --------------------------------------------------------------------------------------------
# The judge


class ClipJudge(Judge):
    """A judge of images: the cosine similarity of an open_clip model's image embedding and
    its text embedding of the templated explanation.

    The model is built from `architecture` (or `config`) and loaded with `checkpoint` on the
    first `prepare` (which `label` calls); it stays loaded for later calls. `close` forgets
    the embeddings memoised during a `label` call.

    Parameters
    ----------
    architecture : str
        An open_clip architecture name (``"ViT-B-32"``, ``"RN50"``; ``open_clip.list_models()``
        lists them), or, with `config`, any name for a custom one (it names the judge).
    checkpoint : str or path
        The checkpoint file: a state dict saved by torch (``.pt``, ``.bin``, ``.pth``) or
        safetensors (``.safetensors``), as open_clip saves and loads them. Loaded with
        ``weights_only=True``: a pickled full model is refused.
    device : str or torch.device
        Where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``; default: see `LOCAL_JUDGE_OPTIONS`).
    template : str
        How an explanation is shown to the text tower; it must contain ``{explanation}``.
    batch_size : int
        Images per forward pass.
    calibration : Calibration, optional
        A fitted sigmoid (`neuroneval.label.calibrate`); None is `default_calibration`.
    config : dict or path, optional
        A custom architecture: an open_clip model config (``embed_dim``, ``vision_cfg``,
        ``text_cfg``) or an ``open_clip_config.json`` (``model_cfg`` and ``preprocess_cfg``,
        whose mean, std, size, interpolation and resize mode override open_clip's defaults), as
        a dict or a JSON file. It is registered with open_clip under a name made from its
        content, so it never shadows a built-in architecture.

    Attributes
    ----------
    name : str
        ``"clip:<architecture>"``.
    checkpoint : str
        The checkpoint's absolute path.
    model_config : dict
        The open_clip model config the model is built from.

    Raises
    ------
    SourceError
        No checkpoint (or config file) at the path, or one that cannot be read; a corrupt
        checkpoint, or one that does not fit the architecture, on `prepare`. Also when
        open_clip is not installed.
    ParameterError
        An unknown architecture, an architecture that needs files from the Hugging Face hub, a
        template without ``{explanation}``, a bad device or batch size.

    Notes
    -----
    The raw score is the cosine similarity in [-1, 1], computed in float64 from the model's
    float32 embeddings. `model_fingerprint` holds the checkpoint's file name, size and SHA-256,
    a digest of the config and the open_clip version, so a changed checkpoint never reuses
    another's cached scores. Float images are quantised to 8 bits (``round(255 x)``) before
    preprocessing, as the PIL-based transforms need; an image and the same pixels in another
    dtype are cached separately (the cache keys an image by dtype, shape and bytes).

    Examples
    --------
    >>> judge = ClipJudge("ViT-B-32", "/models/open_clip_pytorch_model.bin")  # doctest: +SKIP
    >>> judge.name  # doctest: +SKIP
    'clip:ViT-B-32'
    >>> judge.default_calibration  # doctest: +SKIP
    Calibration(a=50.0, b=0.25)
    """

    name = "clip"
    version = "1"
    input_kind = "image"

    def __init__(
        self,
        architecture: str,
        checkpoint: str | os.PathLike[str],
        *,
        device: Any = None,
        template: str = DEFAULT_TEMPLATE,
        batch_size: int = 64,
        calibration: Calibration | None = None,
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(calibration=calibration)
        if not isinstance(template, str) or "{explanation}" not in template:
            raise ParameterError(f"template must be a string with '{{explanation}}'; got {template!r}")
        try:
            template.format(explanation="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ParameterError(
                f"template {template!r} must have '{{explanation}}' as its only field (write other braces as '{{{{' and '}}}}')"
            ) from e
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ParameterError(f"batch_size must be a positive integer; got {batch_size!r}")
        if not isinstance(architecture, str) or not architecture.strip():
            raise ParameterError(f"architecture must be an open_clip architecture name; got {architecture!r}")
        if not isinstance(checkpoint, str | os.PathLike):
            raise ParameterError(f"checkpoint must be the path of a checkpoint file; got {type(checkpoint).__name__}")
        path = os.path.abspath(os.fspath(checkpoint))
        if os.path.isdir(path):
            raise SourceError(f"the CLIP checkpoint {path} is a directory; give the checkpoint file inside it")
        if not os.path.isfile(path):
            raise SourceError(f"no CLIP checkpoint at {path}")

        open_clip = _import_open_clip()
        if config is None:
            model_cfg, preprocess = self._builtin_config(open_clip, architecture), dict[str, Any]()
        else:
            model_cfg, preprocess = _read_config(config)
            from open_clip.transform import PreprocessCfg

            unknown = set(preprocess) - set(PreprocessCfg.__dataclass_fields__)
            if unknown:
                raise ParameterError(f"the CLIP config's preprocess_cfg has unknown keys {sorted(unknown)}")
        _check_offline(architecture, model_cfg)

        self.name = f"clip:{architecture}"
        self.architecture = architecture
        self.checkpoint = path
        self.model_config = model_cfg
        self.device = self._checked_device(LOCAL_JUDGE_OPTIONS["device"].default if device is None else device)
        self.batch_size = batch_size
        self._template = template
        self._preprocess = preprocess
        self._custom = config is not None
        self._config_digest = _config_digest(model_cfg, preprocess)
        self._open_clip_version = str(getattr(open_clip, "__version__", "unknown"))
        self._model: Any = None
        self._tokenizer: Any = None
        self._transform: Any = None
        self._loaded_fingerprint: str | None = None
        self._file_digest: tuple[StatKey, str] | None = None
        self._memo: dict[str, Vector] = {}
        self._text_memo: dict[str, Vector] = {}

    # ---- identity ---------------------------------------------------------------------------

    @staticmethod
    def _builtin_config(open_clip: Any, architecture: str) -> dict[str, Any]:
        if architecture.startswith(("hf-hub:", "local-dir:")):
            raise ParameterError(
                f"the clip judge loads a local checkpoint into a named architecture; {architecture!r} names a hub or "
                "directory source (give the architecture name, the checkpoint file and, for a custom model, "
                "config= with its open_clip_config.json)"
            )
        name = architecture.replace("/", "-")
        model_cfg = open_clip.get_model_config(name)
        if model_cfg is None:
            near = difflib.get_close_matches(name, open_clip.list_models(), n=3)
            hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
            raise ParameterError(
                f"unknown CLIP architecture {architecture!r}{hint} (open_clip.list_models() lists the known ones; "
                "give config= for a custom one)"
            )
        if "siglip" in name.lower():
            raise ParameterError(
                f"the CLIP architecture {architecture!r} uses a SigLIP tokenizer from the Hugging Face hub; the clip "
                "judge uses only open_clip's bundled CLIP tokenizer, and never downloads"
            )
        return dict(model_cfg)

    @staticmethod
    def _checked_device(device: Any) -> Any:
        import torch

        try:
            d = torch.device(device)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ParameterError(f"device must name a torch device ('cpu', 'cuda', 'cuda:1'); got {device!r}") from e
        if d.type == "cuda" and not torch.cuda.is_available():
            raise ParameterError(f"device {device!r} was asked for, but torch sees no CUDA device")
        if d.type == "mps" and not torch.backends.mps.is_available():
            raise ParameterError(f"device {device!r} was asked for, but torch sees no MPS device")
        return d

    @property
    def template(self) -> str:
        return self._template

    @property
    def default_calibration(self) -> Calibration:
        # A fixed prior until `calibrate` fits one. For OpenAI and LAION CLIPs a prompt that
        # fits the image scores a cosine of about 0.3 and an unrelated one about 0.2: b = 0.25
        # is the midpoint. The trained logit scale, 100, is made for a softmax over many
        # prompts; for one yes/no it is overconfident, so the slope is half of it (0.3 maps
        # to 0.92, 0.2 to 0.08).
        return Calibration(a=50.0, b=0.25)

    @property
    def model_fingerprint(self) -> str:
        """The checkpoint's file name, size and SHA-256, the config's digest and open_clip's
        version: those of the loaded weights once `prepare` has loaded them, else the file's now."""
        if self._loaded_fingerprint is not None:
            return self._loaded_fingerprint
        # Hashed again whenever the file's stat changes (a judge's identity is read once per key).
        key = _stat_key(self.checkpoint)
        if self._file_digest is None or self._file_digest[0] != key:
            self._file_digest = _checkpoint_digest(self.checkpoint)
        return self._fingerprint(*self._file_digest)

    def _fingerprint(self, key: StatKey, sha256: str) -> str:
        return (
            f"{os.path.basename(self.checkpoint)}:{key[0]}:sha256={sha256}"
            f":config={self._config_digest[:16]}:open_clip={self._open_clip_version}"
        )

    # ---- the model --------------------------------------------------------------------------

    def prepare(self) -> None:
        """Build the model and load the checkpoint (once; later calls do nothing).

        Raises
        ------
        SourceError
            A checkpoint that is not a state dict torch or safetensors can read, or one whose
            tensors do not fit the architecture.
        ParameterError
            A config from which open_clip cannot build a model.
        """
        if self._model is not None:
            return
        open_clip = _import_open_clip()
        # The file is hashed afresh, and its stat compared after the load, so the fingerprint is
        # that of the bytes loaded.
        key, sha256 = _checkpoint_digest(self.checkpoint)
        name = _register(open_clip, self.model_config, self._config_digest) if self._custom else self.architecture
        name = name.replace("/", "-")
        try:
            with _quiet_open_clip(open_clip):
                model = open_clip.create_model(
                    name,
                    pretrained=None,
                    pretrained_image=False,
                    pretrained_text=False,
                    device="cpu",
                    force_preprocess_cfg=dict(self._preprocess) or None,
                )
        except Exception as e:  # open_clip and torch raise many kinds for a config they cannot build
            raise ParameterError(
                f"open_clip cannot build the CLIP architecture {self.architecture!r}: {_short(e)}"
            ) from e
        try:
            open_clip.load_checkpoint(model, self.checkpoint, strict=True, weights_only=True, device="cpu")
        except Exception as e:  # torch.load, safetensors and load_state_dict raise many kinds
            raise SourceError(
                f"cannot load the CLIP checkpoint {self.checkpoint} into a {self.architecture} model "
                f"(a corrupt file, a pickled model rather than a state dict, or weights of another architecture): "
                f"{_short(e)}"
            ) from e
        if _stat_key(self.checkpoint) != key:
            raise SourceError(f"the CLIP checkpoint {self.checkpoint} changed while it was being loaded; try again")
        try:
            tokenizer = _tokenizer(name)
        except Exception as e:
            raise SourceError(
                f"cannot make the tokenizer of the CLIP architecture {self.architecture!r}: {_short(e)}"
            ) from e
        from open_clip.transform import PreprocessCfg, image_transform_v2

        preprocess = PreprocessCfg(**open_clip.get_model_preprocess_cfg(model))
        self._transform = image_transform_v2(preprocess, is_train=False)
        self._tokenizer = tokenizer
        self._model = model.to(self.device).eval()
        self._loaded_fingerprint = self._fingerprint(key, sha256)
        self._memo.clear()
        self._text_memo.clear()

    def close(self) -> None:
        """Forget the memoised embeddings (the model stays loaded)."""
        self._memo.clear()
        self._text_memo.clear()

    def embed_images(self, images: Sequence[Any]) -> npt.NDArray[np.float64]:
        """Unit-length image embeddings, shape (len(images), embed_dim), in batches of
        `batch_size` (no memo)."""
        import torch
        from PIL import Image

        self.prepare()
        arrays = [_as_uint8(image, i) for i, image in enumerate(images)]
        out: list[npt.NDArray[np.float64]] = []
        for start in range(0, len(arrays), self.batch_size):
            chunk = arrays[start : start + self.batch_size]
            pixels = torch.stack([self._transform(Image.fromarray(a)) for a in chunk]).to(self.device)
            with torch.inference_mode():
                features = self._model.encode_image(pixels)
            out.append(_unit_rows(features.float().cpu().numpy()))
        if not out:
            return np.zeros((0, int(self.model_config["embed_dim"])))
        return np.concatenate(out)

    def embed_texts(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """Unit-length text embeddings, shape (len(texts), embed_dim), of texts as given (the
        template is not applied)."""
        import torch

        self.prepare()
        tokens = self._tokenizer(list(texts)).to(self.device)
        with torch.inference_mode():
            features = self._model.encode_text(tokens)
        return _unit_rows(features.float().cpu().numpy())

    def _text_embedding(self, explanation: str) -> Vector:
        text = self._template.format(explanation=explanation)
        row = self._text_memo.get(text)
        if row is None:
            row = self.embed_texts([text])[0]
            self._text_memo[text] = row
        return row

    def judge(self, explanation: str, inputs: Sequence[Any]) -> Iterator[Judgement]:
        """Cosine similarities of `inputs` (images) and the templated `explanation`, yielded per
        `batch_size` images; an image already embedded in this `label` call is not embedded again."""
        values = self.check_inputs(inputs)
        for i, v in enumerate(values):
            _as_uint8(v, i)  # every image checked before any is judged
        self.prepare()
        query = self._text_embedding(explanation)
        digests = [self.input_digest(v) for v in values]
        for start in range(0, len(values), self.batch_size):
            stop = min(start + self.batch_size, len(values))
            todo: dict[str, int] = {}
            for i in range(start, stop):
                if digests[i] not in self._memo:
                    todo.setdefault(digests[i], i)
            if todo:
                rows = self.embed_images([values[i] for i in todo.values()])
                for digest, row in zip(todo, rows, strict=True):
                    self._memo[digest] = row
            embedded = np.stack([self._memo[digests[i]] for i in range(start, stop)])
            yield Judgement(
                positions=np.arange(start, stop, dtype=np.int64),
                scores=np.clip(embedded @ query, -1.0, 1.0),
                tokens=np.zeros(stop - start, dtype=np.int64),
            )
