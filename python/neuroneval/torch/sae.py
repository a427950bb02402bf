"""`sae_module`: a `neuroneval.interop.sae.SparseAutoencoder`'s encoder as a torch module.

The module computes what `SparseAutoencoder.encode` computes, with the same operations in
the same order (and, for a sparsify SAE, sparsify's own ``F.linear`` call), on whatever
device it is moved to; `neuroneval.torch.extract` takes it (or the SAE itself) as `sae`.

Examples
--------
>>> import numpy as np, torch
>>> from neuroneval.interop.sae import SparseAutoencoder
>>> from neuroneval.torch import sae_module
>>> eye = np.eye(3, dtype=np.float32)
>>> sae = SparseAutoencoder("topk", 3, 3, eye, np.zeros(3, np.float32), eye, np.zeros(3, np.float32), k=1)
>>> sae_module(sae)(torch.tensor([[0.5, 2.0, 1.0]])).tolist()
[[0.0, 2.0, 0.0]]
"""

from __future__ import annotations

import numpy as np
import torch

from neuroneval.errors import DTypeError, NonFiniteError, ParameterError, ShapeError
from neuroneval.interop.sae import ARCHITECTURES, LAYER_NORM_EPS, NORMALIZATIONS, SOURCES, SparseAutoencoder

__all__ = ["SAEEncoder", "sae_module", "train_topk_sae"]


def _tensor(arr: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.ascontiguousarray(arr))  # a copy: the SAE's arrays are read-only


class SAEEncoder(torch.nn.Module):
    """The encoder of a `SparseAutoencoder` (build it with `sae_module`).

    Its buffers are the encoder's weights and a ``settings`` tensor (architecture, k,
    apply_b_dec_to_input, normalisation, source), so that its state dict says everything its
    output depends on (`neuroneval.torch.extract` fingerprints SAEs by their state dict).
    """

    def __init__(self, sae: SparseAutoencoder) -> None:
        super().__init__()
        if not isinstance(sae, SparseAutoencoder):
            raise ParameterError(f"sae must be a neuroneval.interop.sae.SparseAutoencoder; got {type(sae).__name__}")
        self.architecture, self.k, self.source = sae.architecture, sae.k, sae.source
        self.apply_b_dec_to_input, self.normalize_activations = sae.apply_b_dec_to_input, sae.normalize_activations
        self.d_in, self.d_sae = sae.d_in, sae.d_sae
        self.weight: torch.Tensor
        self.b_enc: torch.Tensor
        self.b_dec: torch.Tensor
        self.threshold: torch.Tensor | None
        self.settings: torch.Tensor
        # sparsify's layout (latents, d_in) for its F.linear; SAELens's (d_in, latents) for its matmul.
        self.register_buffer("weight", _tensor(sae.W_enc.T if sae.source == "sparsify" else sae.W_enc))
        self.register_buffer("b_enc", _tensor(sae.b_enc))
        self.register_buffer("b_dec", _tensor(sae.b_dec))
        self.register_buffer("threshold", _tensor(sae.threshold) if sae.threshold is not None else None)
        settings = [
            ARCHITECTURES.index(sae.architecture),
            sae.k or 0,
            int(sae.apply_b_dec_to_input),
            NORMALIZATIONS.index(sae.normalize_activations),
            SOURCES.index(sae.source),
        ]
        self.register_buffer("settings", torch.tensor(settings, dtype=torch.int64))

    def extra_repr(self) -> str:
        k = f", k={self.k}" if self.k is not None else ""
        return f"{self.architecture}, d_in={self.d_in}, d_sae={self.d_sae}{k}, source={self.source!r}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The latents (rows, d_sae) of the rows `x` (rows, d_in): float64 for float64 (and
        integer) input, else float32, without autocast; `NonFiniteError` when the
        pre-activations are not finite (a check that waits for the device)."""
        if not isinstance(x, torch.Tensor) or x.ndim != 2 or x.shape[1] != self.d_in:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ShapeError(f"the SAE reads (rows, {self.d_in}) tensors; got {got}")
        if x.is_complex():
            raise DTypeError(f"the SAE reads real numbers; got {x.dtype}")
        dtype = torch.float64 if x.dtype == torch.float64 or not x.is_floating_point() else torch.float32
        # The arithmetic of encode: no autocast (extract may run the model under it).
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = self.pre_activations(x.to(dtype), dtype)
            if not bool(torch.isfinite(h).all()):
                row = int(torch.nonzero(~torch.isfinite(h))[0, 0])
                raise NonFiniteError(
                    f"the SAE's pre-activations are not finite at row {row}: the input holds NaN or infinity, "
                    "or overflows"
                )
            if self.architecture == "topk":
                assert self.k is not None
                keep = self.top_k(h, self.k)
            elif self.architecture == "jumprelu":
                assert self.threshold is not None
                keep = h > self.threshold.to(dtype)
            else:
                keep = torch.ones_like(h, dtype=torch.bool)
            return torch.where(keep & (h > 0), h, torch.zeros((), dtype=dtype, device=h.device))

    def pre_activations(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.normalize_activations == "constant_norm_rescale":
            x = x * (self.d_in**0.5 / x.norm(dim=-1, keepdim=True))
        elif self.normalize_activations == "layer_norm":
            x = x - x.mean(dim=-1, keepdim=True)
            x = x / (x.std(dim=-1, keepdim=True) + LAYER_NORM_EPS)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec.to(dtype)
        if self.source == "sparsify":
            return torch.nn.functional.linear(x, self.weight.to(dtype), self.b_enc.to(dtype))
        return x @ self.weight.to(dtype) + self.b_enc.to(dtype)

    @staticmethod
    def top_k(h: torch.Tensor, k: int) -> torch.Tensor:
        """The `k` largest entries of each row; among entries equal to the k-th largest, the
        lowest indices (torch.topk's own choice among ties is unspecified)."""
        if k >= h.shape[1]:
            return torch.ones_like(h, dtype=torch.bool)
        kth = torch.topk(h, k, dim=-1, sorted=True).values[:, -1:]  # the values do not depend on the ties
        above, tied = h > kth, h == kth
        room = k - above.sum(dim=-1, keepdim=True)
        return above | (tied & (torch.cumsum(tied, dim=-1, dtype=torch.int32) <= room))


def sae_module(sae: SparseAutoencoder) -> SAEEncoder:
    """`sae`'s encoder as a torch module (on the CPU; move it with ``.to(device)``).

    Parameters
    ----------
    sae : SparseAutoencoder
        As `neuroneval.interop.sae.read_saelens` or `read_sparsify` return it.

    Returns
    -------
    SAEEncoder
        ``module(x)`` for (rows, d_in) tensors gives what ``sae.encode(x)`` gives: the same
        operations (rounding may differ in the last bit from numpy's, as two matrix products
        do), the same tie rule at the k-th place.

    Raises
    ------
    ParameterError
        `sae` is not a SparseAutoencoder.
    """
    return SAEEncoder(sae)


def train_topk_sae(x: np.ndarray, d_sae: int, k: int, *, epochs: int, batch_size: int, seed: int) -> SparseAutoencoder:
    """A TopK SAE (SAELens's "topk": top k of the ReLU'd pre-activations of x - b_dec) trained
    by Adam on the reconstruction error of the rows of `x` (rows, d_in), decoder rows kept at
    unit norm; seeded."""
    g = torch.Generator().manual_seed(seed)
    data = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    d_in = data.shape[1]
    w_dec = torch.randn(d_sae, d_in, generator=g)
    w_dec /= w_dec.norm(dim=1, keepdim=True)
    params = {
        "W_dec": torch.nn.Parameter(w_dec.clone()),
        "W_enc": torch.nn.Parameter(w_dec.T.clone()),
        "b_enc": torch.nn.Parameter(torch.zeros(d_sae)),
        "b_dec": torch.nn.Parameter(data.mean(dim=0).clone()),
    }
    opt = torch.optim.Adam(params.values(), lr=1e-3)
    scale = float(data.var(dim=0).sum())
    for _ in range(epochs):
        order = torch.randperm(len(data), generator=g)
        for i in range(0, len(data), batch_size):
            batch = data[order[i : i + batch_size]]
            pre = torch.relu((batch - params["b_dec"]) @ params["W_enc"] + params["b_enc"])
            top = torch.topk(pre, k, dim=1)
            z = torch.zeros_like(pre).scatter_(1, top.indices, top.values)
            loss = ((z @ params["W_dec"] + params["b_dec"] - batch) ** 2).sum(dim=1).mean() / scale
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                params["W_dec"].div_(params["W_dec"].norm(dim=1, keepdim=True))
    w = {name: p.detach().numpy().astype(np.float32) for name, p in params.items()}
    return SparseAutoencoder("topk", d_in, d_sae, w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], k=k)
