"""Activations from a PyTorch model, ready for `neuroneval.score`.

`capture` returns a few layers' activations in memory; `extract` writes any number of them, at
any scale, into shard directories that `neuroneval.evaluate` reads (resumable, with row ids
for tokens and spatial positions, dense or sparse SAE latents); `sae_module` turns a
`neuroneval.interop.sae.SparseAutoencoder` (SAELens or sparsify weights) into the encoder
module `extract` applies; `train_topk_sae` trains a TopK SAE on rows of hidden vectors.

`import neuroneval` never imports torch; this tool (and the experiments) do.
Its modules: `capture` (in memory), `extract` (the run: batches, resuming, the writer thread),
`hooks` (forward hooks and the reductions of a layer's output), `store` (the shard
directories: writing them, and `ActivationStore` reading them back), `sae` (SAE encoders).

Examples
--------
>>> import torch
>>> from neuroneval.torch import capture
>>> _ = torch.manual_seed(0)
>>> model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
...                             torch.nn.Linear(4 * 8 * 8, 3))
>>> acts = capture(model, torch.randn(10, 1, 8, 8), ["1", "3"], batch_size=4)
>>> {name: a.shape for name, a in acts.items()}
{'1': (10, 4), '3': (10, 3)}
"""

from __future__ import annotations

from .capture import Reduce, capture
from .extract import SHARD_BYTES, SPARSE_ZEROS, extract
from .sae import sae_module, train_topk_sae
from .store import EXTRACT_FILE, ROWS_FILE, ActivationStore, StoredLayer

__all__ = ["ActivationStore", "StoredLayer", "capture", "extract", "sae_module", "train_topk_sae"]
__all__ += ["EXTRACT_FILE", "ROWS_FILE", "SHARD_BYTES", "SPARSE_ZEROS", "Reduce"]
