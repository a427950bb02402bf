"""Featurizers of the causal-variable track (SPEC section 7): a hidden vector h maps to features
f = F(h) and back, and an interchange swaps a selection of the features.

Every featurizer is a `Featurizer`: ``encode``, ``decode`` and ``mask`` (which features an
interchange swaps: a bool vector, or during DBM training a soft one in [0, 1]). `interchange`
is the one rule for all of them::

    f_b, f_s = encode(h_base), encode(h_source)
    h = decode(mix(f_b, f_s, mask)) + (h_base - decode(f_b))

The reconstruction error of the base is kept, so an interchange on no feature returns the base
exactly up to rounding, and an interchange on every feature of an exact featurizer returns the
source.

- `FullVector`: the identity, every coordinate swapped;
- `Neurons`: the identity with a selection of neurons;
- `PCA`: the principal components of the model's own hidden vectors (all of them, so decoding is
  exact), a selection of components;
- `SAEFeatures`: a `SparseAutoencoder`'s latents (its decoder back, the error kept);
- `DAS`: a learned rotation whose first k coordinates are swapped, k learned with it (Boundless
  DAS; `training.train_das`);
- `DBM`: a learned mask over another featurizer's features (`training.train_dbm`).

Examples
--------
>>> import torch
>>> base, source = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[-1.0, -2.0, -3.0]])
>>> Neurons(3, [0, 2]).interchange(base, source).tolist()
[[-1.0, 2.0, -3.0]]
>>> FullVector(3).interchange(base, source).tolist()
[[-1.0, -2.0, -3.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self, cast

import numpy as np
import torch

from neuroneval.errors import ParameterError, ShapeError
from neuroneval.interop.sae import SparseAutoencoder
from neuroneval.options import SCORE_OPTIONS

from ..sae import SAEEncoder

__all__ = ["DAS", "DBM", "PCA", "SAEFeatures", "Featurizer", "FullVector", "Neurons", "top_variance"]

Tensor = torch.Tensor


class Featurizer(torch.nn.Module):
    """The interface: `width` (the hidden size it reads), `n_features`, `encode`, `decode`, `mask`."""

    name = "featurizer"

    def __init__(self, width: int) -> None:
        super().__init__()
        if not isinstance(width, int) or width < 1:
            raise ParameterError(f"a featurizer's width must be a positive integer; got {width!r}")
        self.width = width

    @property
    def n_features(self) -> int:
        return self.width

    def encode(self, h: Tensor) -> Tensor:
        return h

    def decode(self, f: Tensor) -> Tensor:
        return f

    def mask(self) -> Tensor:
        """The features an interchange swaps: bool, or floats in [0, 1] while a mask trains."""
        raise NotImplementedError

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The trainable parameters as optimizer groups at learning rate `lr`."""
        return [{"params": [p for p in self.parameters() if p.requires_grad], "lr": lr}]

    def check_width(self, h: Tensor) -> None:
        if h.shape[-1] != self.width:
            raise ShapeError(
                f"the {self.name} featurizer reads hidden vectors of {self.width} values; the model's have {h.shape[-1]}"
            )

    def interchange(self, base: Tensor, source: Tensor) -> Tensor:
        """`base` (rows, width) with the masked features taken from `source` (same shape)."""
        self.check_width(base)
        f_b, f_s = self.encode(base), self.encode(source)
        m = self.mask().to(f_b.device)
        mixed = torch.where(m, f_s, f_b) if m.dtype == torch.bool else f_b + m * (f_s - f_b)
        if self.exact:
            return self.decode(mixed)
        return self.decode(mixed) + (base - self.decode(f_b))

    #: decode(encode(h)) is h itself (no error term to carry).
    exact = False

    @property
    def n_swapped(self) -> float:
        """How many features an interchange swaps (a soft mask's sum while one trains)."""
        return float(self.mask().sum())


class _Selected(Featurizer):
    """A featurizer whose interchange swaps a fixed selection of its features (`select`)."""

    selected: Tensor

    def mask(self) -> Tensor:
        return self.selected

    def select(self, selection: Sequence[int] | Tensor | np.ndarray) -> Self:
        """Swap the features at the indices `selection` from now on."""
        self.selected = _bool_mask(self.n_features, selection, f"{self.name} feature")
        return self


def _bool_mask(n: int, selection: Sequence[int] | Tensor | np.ndarray, what: str) -> Tensor:
    idx = torch.as_tensor(np.asarray(selection, dtype=np.int64).reshape(-1))
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ParameterError(f"the {what} selection holds an index outside 0..{n - 1}")
    mask = torch.zeros(n, dtype=torch.bool)
    mask[idx] = True
    return mask


class FullVector(Featurizer):
    """The whole hidden vector, swapped."""

    name = "full"
    exact = True

    def mask(self) -> Tensor:
        return torch.ones(self.width, dtype=torch.bool)


class Neurons(_Selected):
    """The identity with a selection of neurons (indices into the hidden vector)."""

    name = "neurons"
    exact = True

    def __init__(self, width: int, selection: Sequence[int] | Tensor | np.ndarray) -> None:
        super().__init__(width)
        self.register_buffer("selected", _bool_mask(width, selection, "neuron feature"))


class PCA(_Selected):
    """Principal components of `hidden` (rows, width), all of them: f = (h - mean) V^T, h = f V + mean.
    `selection` indexes the components, by decreasing variance."""

    name = "pca"

    def __init__(self, hidden: Tensor, selection: Sequence[int] | None = None) -> None:
        if hidden.ndim != 2 or hidden.shape[0] < 2:
            raise ShapeError(f"PCA is fitted on (rows >= 2, width) hidden vectors; got shape {tuple(hidden.shape)}")
        super().__init__(int(hidden.shape[1]))
        x = hidden.detach().to(torch.float64)
        mean = x.mean(0)
        # eigenvectors of the covariance, by decreasing eigenvalue (all width of them, even past the rank)
        values, vectors = torch.linalg.eigh((x - mean).T @ (x - mean) / (x.shape[0] - 1))
        order = torch.argsort(values, descending=True)
        self.mean: Tensor
        self.components: Tensor
        self.variance: Tensor
        self.register_buffer("mean", mean.to(hidden.dtype))
        self.register_buffer("components", vectors[:, order].T.contiguous().to(hidden.dtype))
        self.register_buffer("variance", values[order].clamp_min(0).to(hidden.dtype))
        self.register_buffer("selected", _bool_mask(self.width, [] if selection is None else selection, "pca feature"))

    def encode(self, h: Tensor) -> Tensor:
        return (h - self.mean) @ self.components.T

    def decode(self, f: Tensor) -> Tensor:
        return f @ self.components + self.mean


class SAEFeatures(_Selected):
    """A sparse autoencoder's latents; the decoder ``f W_dec + b_dec`` back, the base's error kept."""

    name = "sae"

    def __init__(self, sae: SparseAutoencoder, selection: Sequence[int] | None = None) -> None:
        if not isinstance(sae, SparseAutoencoder):
            raise ParameterError(f"sae must be a neuroneval.interop.sae.SparseAutoencoder; got {type(sae).__name__}")
        super().__init__(sae.d_in)
        self.encoder = SAEEncoder(sae)
        self.w_dec: Tensor
        self.b_dec: Tensor
        self.register_buffer("w_dec", torch.tensor(np.ascontiguousarray(sae.W_dec, dtype=np.float32)))
        self.register_buffer("b_dec", torch.tensor(np.ascontiguousarray(sae.b_dec, dtype=np.float32)))
        self.register_buffer("selected", _bool_mask(sae.d_sae, [] if selection is None else selection, "sae feature"))

    @property
    def n_features(self) -> int:
        return int(self.w_dec.shape[0])

    def encode(self, h: Tensor) -> Tensor:
        shape = h.shape
        latents: Tensor = self.encoder(h.reshape(-1, shape[-1]).float())
        return latents.reshape(*shape[:-1], -1).to(h.dtype)

    def decode(self, f: Tensor) -> Tensor:
        return f @ self.w_dec.to(f.dtype) + self.b_dec.to(f.dtype)


class DAS(Featurizer):
    """A learned rotation whose first coordinates are swapped: ``h + (d Q^T m) Q`` with
    ``d = h_source - h_base``, `Q` orthonormal rows and `m` the mask of the swapped coordinates.

    With a fixed `size`, `Q` holds `size` rows and every one is swapped. With ``learn_size``
    (Boundless DAS), `Q` is a full rotation and the boundary is learned with it: during training
    ``m_i = sigmoid((b - i) / temperature)`` with ``b = width * sigmoid(u)``, at evaluation the
    first ``round(b)`` coordinates (at least one); `size` is the boundary's start."""

    name = "das"

    def __init__(self, width: int, size: int, *, seed: int | None = None, learn_size: bool = False) -> None:
        super().__init__(width)
        if not 1 <= size <= width:
            raise ParameterError(f"a DAS subspace needs 1 <= size <= {width}; got {size}")
        self.learn_size = learn_size
        rows = width if learn_size else size
        g = torch.Generator().manual_seed(SCORE_OPTIONS["seed"].default if seed is None else seed)
        linear = torch.nn.Linear(width, rows, bias=False)
        with torch.no_grad():
            linear.weight.copy_(torch.linalg.qr(torch.randn(width, rows, generator=g))[0].T)
        # the Cayley map: orthogonal like the default matrix exponential, and about 16 times
        # cheaper to compute and differentiate at SmolLM2's width (576)
        self.rotation = torch.nn.utils.parametrizations.orthogonal(linear, orthogonal_map="cayley")
        fraction = min(max(size / width, 1e-3), 1 - 1e-3)
        self.boundary = torch.nn.Parameter(torch.logit(torch.tensor(fraction)), requires_grad=learn_size)
        self.temperature = 1.0
        self.hard = True
        self.register_buffer("index", torch.arange(rows, dtype=torch.float32))
        self.index: Tensor

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The rotation at `lr`; the boundary (when learned) ten times faster, so that it can move
        by whole coordinates in a short training."""
        rotation = [p for p in self.rotation.parameters() if p.requires_grad]
        if not self.learn_size:
            return [{"params": rotation, "lr": lr}]
        return [{"params": rotation, "lr": lr}, {"params": [self.boundary], "lr": 10 * lr}]

    @property
    def basis(self) -> Tensor:
        """The rotation's orthonormal rows, (rows, width)."""
        return cast(Tensor, self.rotation.weight)

    @property
    def size(self) -> int:
        """How many coordinates an interchange swaps (at evaluation)."""
        if not self.learn_size:
            return int(self.index.numel())
        return int(min(self.width, max(1, round(float(self.width * torch.sigmoid(self.boundary.detach()))))))

    def mask(self) -> Tensor:
        if self.hard or not self.learn_size:
            return self.index < self.size
        return torch.sigmoid((self.width * torch.sigmoid(self.boundary) - self.index) / self.temperature)

    def interchange(self, base: Tensor, source: Tensor) -> Tensor:
        self.check_width(base)
        q = self.basis.to(base.dtype)
        m = self.mask()
        if m.dtype == torch.bool:
            q = q[m]
            return base + ((source - base) @ q.T) @ q
        return base + (((source - base) @ q.T) * m.to(base.dtype)) @ q

    @property
    def n_features(self) -> int:
        return int(self.index.numel())


class DBM(Featurizer):
    """A learned binary mask over the features of `inner` (MIB's DBM): during training a
    sigmoid of logits over a temperature, at evaluation the features whose sigmoid is above 0.5."""

    def __init__(self, inner: Featurizer, name: str | None = None) -> None:
        super().__init__(inner.width)
        self.inner = inner
        self.name = name or f"dbm-{inner.name}"
        self.logits = torch.nn.Parameter(torch.zeros(inner.n_features))
        self.temperature = 1.0
        self.hard = True

    @property
    def n_features(self) -> int:
        return self.inner.n_features

    def encode(self, h: Tensor) -> Tensor:
        return self.inner.encode(h)

    def decode(self, f: Tensor) -> Tensor:
        return self.inner.decode(f)

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return self.inner.exact

    def mask(self) -> Tensor:
        if self.hard:
            return self.logits.detach() > 0
        return torch.sigmoid(self.logits / self.temperature)


def top_variance(features: Tensor, size: int) -> list[int]:
    """The `size` features of largest variance over the rows of `features` (rows, n), in
    decreasing order; ties to the lower index."""
    if not 1 <= size <= features.shape[-1]:
        raise ParameterError(f"a selection of {size} features out of {features.shape[-1]} is not possible")
    var = features.detach().double().var(0).numpy()
    return [int(i) for i in np.argsort(-var, kind="stable")[:size]]
