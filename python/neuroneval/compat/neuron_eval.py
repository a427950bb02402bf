"""The NeuronEval reference implementation's metric functions, computed by neuroneval.

Same function names and signatures as the metric module of the reference code of Oikarinen et
al., "Evaluating Neuron Explanations: A Unified Framework with Sanity Checks" (ICML 2025), so
switching is a one-line change::

    from neuroneval.compat import neuron_eval as metrics   # was: the reference's metric module

Shapes follow the reference: ``neuron_act`` is (N, K), one column per unit, ``concept_prob`` is
(N, T), one column per concept, and the result is the (K, T) matrix of every unit against every
concept. A 1-D input of length N stands for a single column and drops its axis from the result,
so two 1-D inputs give a scalar. ``paired=True`` (keyword-only, not in the reference) scores
column j of ``neuron_act`` against column j of ``concept_prob`` only, for two inputs of the same
shape (N, D), giving a length-D result; only those D pairs are computed.

Inputs may be numpy arrays (or anything `numpy.asarray` takes) or torch tensors (any device,
float16/bfloat16/float32/float64, integer or bool). Outputs:

- no tensor input: a float64 `numpy.ndarray`, or a `numpy.float64` scalar (a subclass of the
  Python float) when both inputs are 1-D;
- a tensor input: a `torch.Tensor` on the device of the first tensor input (``neuron_act`` when
  both are tensors), float32 when every floating-point tensor input is float32, float64
  otherwise; 0-d when both inputs are 1-D. Gradients do not flow (the reference also runs under
  ``torch.no_grad``).

torch is imported only when a tensor is passed: importing this module does not import it.

Differences from the reference
------------------------------
The numbers are those of neuroneval (SPEC section 3), which match the reference wherever the
reference is defined and deterministic. They differ here, on purpose:

- **Undefined is NaN.** Where a formula divides by zero the reference clamps the denominator and
  returns 0 or some other finite number (precision with no concept input, the balanced
  accuracies, auc/inverse_auc with a single class, mad with an empty side, correlation and
  cos_sim of a constant or all-zero column, wpmi's empty top set); these functions return NaN,
  so an undefined score never ranks as a real one.
- **wpmi of an empty concept** (all probabilities 0) is NaN; the reference returns +inf, which
  would rank the empty concept first.
- **Ties are midranks.** The reference ranks with added random noise, which breaks ties at
  random and makes its numbers irreproducible. Here spearman_correlation is the Pearson r of
  midranks (`scipy.stats.spearmanr`), and in auc and inverse_auc a tied (positive, negative)
  pair counts 1/2 (`sklearn.metrics.roc_auc_score`). Without ties the two agree.
- **correlation is the true Pearson r.** The reference returns r * (N-1)/N (it divides by N
  after normalising with the sample standard deviation); at N = 50,000 the difference is 2e-5.
  ``correlation(..., reference_scaling=True)`` multiplies by (N-1)/N to reproduce the
  reference. The reference's spearman_correlation and the top-and-random metrics carry the same
  factor (with N the number of inputs scored, 2k = 50 by default for top-and-random); they
  offer no such switch, as their ties or subsets differ anyway.
- **Top-and-random subsets** are drawn by neuroneval's own generator from ``seed`` (a keyword
  the reference lacks; it draws from torch's global RNG), so the subset, and with it the value,
  differs from any reference run. The distribution is the same: k inputs without replacement
  from the unit's top ceil(alpha N) (all of them if fewer), plus k without replacement from all
  N (all of them if fewer), duplicates kept. Each unit draws its own subset, from the seed and
  its column index: ``paired=True`` gives the diagonal of the full matrix, but a column scored
  on its own (index 0) draws another subset than it does as column j of a matrix.
- **alpha=False**, the reference's switch that skips binarisation, is not supported: alpha must
  satisfy 0 < alpha <= 1, else `neuroneval.errors.ParameterError`.
- auprc and inverse_auprc equal `sklearn.metrics.average_precision_score` (tied scores form one
  threshold). The reference returns them as float64 whatever the input; here they follow the
  dtype rule above, like every other function.

Examples
--------
>>> import numpy as np
>>> from neuroneval.compat import neuron_eval
>>> acts = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.7]])
>>> dog = np.array([1.0, 1.0, 0.0, 0.0])
>>> neuron_eval.correlation(acts, dog).round(3)
array([ 0.99 , -0.972])
>>> float(neuron_eval.iou(acts[:, 0], dog, 0.5))
1.0
>>> neuron_eval.recall(acts, np.stack([dog, 1 - dog], axis=1), 0.5, paired=True)
array([1., 1.])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .._coerce import is_torch_tensor
from .._score import compute
from ..errors import ShapeError

__all__ = [
    "accuracy",
    "auc",
    "auprc",
    "balanced_accuracy",
    "combined_auc",
    "combined_balanced_acc",
    "correlation",
    "correlation_top_and_random",
    "cos_sim",
    "f1_score",
    "inverse_auc",
    "inverse_auprc",
    "inverse_balanced_accuracy",
    "iou",
    "mad",
    "precision",
    "precision_bal_acc",
    "precision_inverse_bal_acc",
    "recall",
    "recall_auc",
    "recall_inv_auc",
    "spearman_correlation",
    "spearman_correlation_top_and_random",
    "wpmi",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_Array = npt.NDArray[np.float64]


def _as_columns(x: Any, name: str) -> tuple[Any, tuple[int, ...]]:
    """x as a 2-D (N, columns) array or tensor, and x's own shape."""
    if not is_torch_tensor(x):
        x = np.asarray(x)
    shape = tuple(int(n) for n in x.shape)
    if len(shape) == 1:
        return x[:, None], shape
    if len(shape) == 2:
        return x, shape
    raise ShapeError(f"{name} must be 1-D (N,) or 2-D (N, columns); got shape {shape}")


def _output(values: _Array, neuron_act: Any, concept_prob: Any) -> Any:
    """values as numpy (float64) or, when a tensor came in, as a tensor on its device."""
    tensors = [x for x in (neuron_act, concept_prob) if is_torch_tensor(x)]
    if not tensors:
        return np.float64(values[()]) if values.ndim == 0 else values
    import torch

    floating = [t.dtype for t in tensors if t.is_floating_point()]
    dtype = torch.float32 if floating and all(d == torch.float32 for d in floating) else torch.float64
    out = torch.from_numpy(np.array(values, dtype=np.float64))
    return out.to(device=tensors[0].device, dtype=dtype)


def _score(metric: str, neuron_act: Any, concept_prob: Any, paired: bool, scale: bool = False, **params: Any) -> Any:
    """One neuroneval metric in the reference's shapes; see the module docstring."""
    a, a_shape = _as_columns(neuron_act, "neuron_act")
    c, c_shape = _as_columns(concept_prob, "concept_prob")
    a_vec, c_vec = len(a_shape) == 1, len(c_shape) == 1
    if paired:
        if a_shape != c_shape:
            raise ShapeError(
                f"paired=True scores column j against column j, so neuron_act and concept_prob must have "
                f"the same shape; got {a_shape} and {c_shape}"
            )
        index = np.arange(a.shape[1], dtype=np.int64)
        values = compute(a, c, [metric], pairs=np.column_stack([index, index]), **params)[metric]
        if a_vec:
            values = values.reshape(())
    else:
        values = compute(a, c, [metric], **params)[metric]
        if a_vec:
            values = values[0]
        if c_vec:
            values = values[..., 0]
    if scale:
        n = int(a.shape[0])
        values = values * ((n - 1) / n)
    return _output(values, neuron_act, concept_prob)


_IN = (
    "neuron_act : array_like or torch.Tensor, shape (N, K) or (N,)\n"
    "    Activations, one column per unit.\n"
    "concept_prob : array_like or torch.Tensor, shape (N, T) or (N,)\n"
    "    Concept probabilities in [0, 1], one column per concept.\n"
)
_ALPHA = "alpha : float\n    Top fraction of inputs that binarises each unit, 0 < alpha <= 1.\n"
_PAIRED = (
    "paired : bool, default False, keyword-only\n"
    "    Score column j of neuron_act against column j of concept_prob only (both (N, D)): shape (D,).\n"
    "    Not in the reference.\n"
)


def _doc(summary: str, name: str, params: str = "", extra: str = "") -> Callable[[_F], _F]:
    """Give a compat function its numpydoc docstring."""

    def wrap(f: _F) -> _F:
        f.__doc__ = (
            f"{summary}\n\nneuroneval's ``{name}`` (SPEC section 3) under the reference's name and signature;\n"
            f"see the module docstring for where it differs from the reference.{extra}\n\n"
            f"Parameters\n----------\n{_IN}{params}{_PAIRED}\n"
            "Returns\n-------\nnumpy.ndarray, numpy.float64 or torch.Tensor\n"
            "    Shape (K, T): unit k against concept t; a 1-D input drops its axis; (D,) when paired.\n"
            "    NaN where undefined.\n\n"
            f"See Also\n--------\nneuroneval.metrics.{name}\n"
        )
        return f

    return wrap


@_doc("Recall: TP / |b|, the share of a unit's top inputs that show the concept.", "recall", _ALPHA)
def recall(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("recall", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Precision: TP / |y|, the share of the concept's inputs that are top inputs.", "precision", _ALPHA)
def precision(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("precision", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("F1 score: 2TP / (2TP + FP + FN).", "f1", _ALPHA)
def f1_score(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("f1", neuron_act, concept_prob, paired, alpha=alpha)


@_doc(
    "Intersection over union: TP / (|b| + |y| - TP).",
    "iou",
    "alpha : float, default 0.01\n    Top fraction of inputs that binarises each unit, 0 < alpha <= 1.\n",
)
def iou(neuron_act: Any, concept_prob: Any, alpha: float = 0.01, *, paired: bool = False) -> Any:
    return _score("iou", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Accuracy: (TP + TN) / N.", "accuracy", _ALPHA)
def accuracy(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("accuracy", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Balanced accuracy: the mean of the rates on b = 1 and on b = 0.", "balanced_accuracy", _ALPHA)
def balanced_accuracy(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("balanced_accuracy", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Inverse balanced accuracy: the mean of the rates on y = 1 and on y = 0.", "inverse_balanced_accuracy", _ALPHA)
def inverse_balanced_accuracy(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("inverse_balanced_accuracy", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("ROC AUC with the binarised unit as label and the concept probability as score.", "auc", _ALPHA)
def auc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("auc", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("ROC AUC with the concept (>= 0.5) as label and the raw activation as score.", "inverse_auc")
def inverse_auc(neuron_act: Any, concept_prob: Any, *, paired: bool = False) -> Any:
    return _score("inverse_auc", neuron_act, concept_prob, paired)


@_doc("Average precision with the binarised unit as label and the concept probability as score.", "auprc", _ALPHA)
def auprc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("auprc", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Average precision with the concept (>= 0.5) as label and the raw activation as score.", "inverse_auprc")
def inverse_auprc(neuron_act: Any, concept_prob: Any, *, paired: bool = False) -> Any:
    return _score("inverse_auprc", neuron_act, concept_prob, paired)


@_doc(
    "Pearson correlation of activation and concept probability over all N inputs.",
    "correlation",
    "reference_scaling : bool, default False, keyword-only\n"
    "    Multiply by (N-1)/N, reproducing the reference's r * (N-1)/N.\n",
    "\nReturns the true Pearson r unless reference_scaling is set.",
)
def correlation(neuron_act: Any, concept_prob: Any, *, reference_scaling: bool = False, paired: bool = False) -> Any:
    return _score("correlation", neuron_act, concept_prob, paired, scale=reference_scaling)


_TOP_RANDOM = (
    "k : int, default 25\n    Inputs drawn from the unit's top inputs, and again from all inputs.\n"
    "alpha : float, default 0.002\n    The top fraction the first k inputs are drawn from.\n"
    "seed : int, default 0, keyword-only\n    Seed of the draw; each unit draws its own subset. Not in the reference.\n"
)


@_doc(
    "Pearson correlation on k of a unit's top inputs plus k random inputs.",
    "correlation_top_random",
    _TOP_RANDOM,
    "\nPositional order (k, alpha) as in the reference.",
)
def correlation_top_and_random(
    neuron_act: Any, concept_prob: Any, k: int = 25, alpha: float = 0.002, *, seed: int = 0, paired: bool = False
) -> Any:
    return _score("correlation_top_random", neuron_act, concept_prob, paired, k=k, top_alpha=alpha, seed=seed)


@_doc("Spearman correlation (Pearson r of midranks) over all N inputs.", "spearman")
def spearman_correlation(neuron_act: Any, concept_prob: Any, *, paired: bool = False) -> Any:
    return _score("spearman", neuron_act, concept_prob, paired)


@_doc(
    "Spearman correlation on k of a unit's top inputs plus k random inputs.",
    "spearman_top_random",
    _TOP_RANDOM,
    "\nPositional order (k, alpha) as in the reference.",
)
def spearman_correlation_top_and_random(
    neuron_act: Any, concept_prob: Any, k: int = 25, alpha: float = 0.002, *, seed: int = 0, paired: bool = False
) -> Any:
    return _score("spearman_top_random", neuron_act, concept_prob, paired, k=k, top_alpha=alpha, seed=seed)


@_doc("Cosine similarity <a, c> / (|a| |c|).", "cosine")
def cos_sim(neuron_act: Any, concept_prob: Any, *, paired: bool = False) -> Any:
    return _score("cosine", neuron_act, concept_prob, paired)


@_doc(
    "Weighted pointwise mutual information: mean log c over the top inputs minus lam * log mean c.",
    "wpmi",
    _ALPHA + "lam : float, default 1\n    Weight of the concept's log mean, >= 0.\n",
)
def wpmi(neuron_act: Any, concept_prob: Any, alpha: float, lam: float = 1, *, paired: bool = False) -> Any:
    return _score("wpmi", neuron_act, concept_prob, paired, alpha=alpha, lam=lam)


@_doc("Mean activation difference: mean a on y = 1 minus mean a on y = 0.", "mad")
def mad(neuron_act: Any, concept_prob: Any, *, paired: bool = False) -> Any:
    return _score("mad", neuron_act, concept_prob, paired)


@_doc("Harmonic mean of auc and inverse_auc.", "combined_auc", _ALPHA)
def combined_auc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("combined_auc", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Harmonic mean of balanced_accuracy and inverse_balanced_accuracy.", "combined_balanced_accuracy", _ALPHA)
def combined_balanced_acc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("combined_balanced_accuracy", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Harmonic mean of recall and auc.", "recall_auc", _ALPHA)
def recall_auc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("recall_auc", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Harmonic mean of recall and inverse_auc.", "recall_inverse_auc", _ALPHA)
def recall_inv_auc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("recall_inverse_auc", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Harmonic mean of precision and balanced_accuracy.", "precision_balanced_accuracy", _ALPHA)
def precision_bal_acc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("precision_balanced_accuracy", neuron_act, concept_prob, paired, alpha=alpha)


@_doc("Harmonic mean of precision and inverse_balanced_accuracy.", "precision_inverse_balanced_accuracy", _ALPHA)
def precision_inverse_bal_acc(neuron_act: Any, concept_prob: Any, alpha: float, *, paired: bool = False) -> Any:
    return _score("precision_inverse_balanced_accuracy", neuron_act, concept_prob, paired, alpha=alpha)
