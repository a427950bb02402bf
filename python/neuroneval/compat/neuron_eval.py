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

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._coerce import is_torch_tensor
from .._registry import METRICS, MetricInfo
from .._score import compute
from ..errors import ShapeError

_Array = npt.NDArray[np.float64]

#: The reference's names where they differ from neuroneval's (every other name is the same).
_REFERENCE_NAME = {
    "f1": "f1_score",
    "spearman": "spearman_correlation",
    "cosine": "cos_sim",
    "correlation_top_random": "correlation_top_and_random",
    "spearman_top_random": "spearman_correlation_top_and_random",
    "combined_balanced_accuracy": "combined_balanced_acc",
    "recall_inverse_auc": "recall_inv_auc",
    "precision_balanced_accuracy": "precision_bal_acc",
    "precision_inverse_balanced_accuracy": "precision_inverse_bal_acc",
}
#: Where the reference gives alpha a default (elsewhere a binarising metric requires it).
_ALPHA_DEFAULT = {"iou": 0.01}

__all__ = sorted(_REFERENCE_NAME.get(m, m) for m in METRICS)


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
_PAIRED = (
    "paired : bool, default False, keyword-only\n"
    "    Score column j of neuron_act against column j of concept_prob only (both (N, D)): shape (D,).\n"
    "    Not in the reference.\n"
)
_SCALING = (
    "reference_scaling : bool, default False, keyword-only\n"
    "    Multiply by (N-1)/N, reproducing the reference's r * (N-1)/N.\n"
)
_TOP_RANDOM = (
    "k : int, default 25\n    Inputs drawn from the unit's top inputs, and again from all inputs.\n"
    "alpha : float, default 0.002\n    The top fraction the first k inputs are drawn from.\n"
    "seed : int, default 0, keyword-only\n    Seed of the draw; each unit draws its own subset. Not in the reference.\n"
)

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _signature(info: MetricInfo) -> tuple[inspect.Signature, str, str]:
    """The reference's signature of a metric, from its facts: the parameters, their
    numpydoc, and a note on where the function differs from the metric's plain form."""
    params = [inspect.Parameter("neuron_act", _POSITIONAL), inspect.Parameter("concept_prob", _POSITIONAL)]
    doc, note = "", ""
    if info.uses_sampling:
        params += [
            inspect.Parameter("k", _POSITIONAL, default=25),
            inspect.Parameter("alpha", _POSITIONAL, default=0.002),
            inspect.Parameter("seed", _KEYWORD, default=0),
        ]
        doc, note = _TOP_RANDOM, "\nPositional order (k, alpha) as in the reference."
    elif info.uses_alpha:
        default = _ALPHA_DEFAULT.get(info.name, inspect.Parameter.empty)
        params.append(inspect.Parameter("alpha", _POSITIONAL, default=default))
        shown = "" if default is inspect.Parameter.empty else f", default {default}"
        doc = f"alpha : float{shown}\n    Top fraction of inputs that binarises each unit, 0 < alpha <= 1.\n"
        if info.uses_lambda:
            params.append(inspect.Parameter("lam", _POSITIONAL, default=1))
            doc += "lam : float, default 1\n    Weight of the concept's log mean, >= 0.\n"
    if info.name == "correlation":
        params.append(inspect.Parameter("reference_scaling", _KEYWORD, default=False))
        doc, note = _SCALING, "\nReturns the true Pearson r unless reference_scaling is set."
    params.append(inspect.Parameter("paired", _KEYWORD, default=False))
    return inspect.Signature(params), doc, note


def _reference_function(info: MetricInfo) -> Callable[..., Any]:
    """One metric under the reference's name and signature (see the module docstring)."""
    name = _REFERENCE_NAME.get(info.name, info.name)
    signature, params_doc, note = _signature(info)

    def function(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}(): {e}") from None
        bound.apply_defaults()
        given = dict(bound.arguments)
        act, prob, paired = given.pop("neuron_act"), given.pop("concept_prob"), given.pop("paired")
        scale = bool(given.pop("reference_scaling", False))
        if info.uses_sampling:
            given["top_alpha"] = given.pop("alpha")
        return _score(info.name, act, prob, paired, scale=scale, **given)

    function.__signature__ = signature  # type: ignore[attr-defined]
    function.__name__ = function.__qualname__ = name
    function.__module__ = __name__
    function.__doc__ = (
        f"{info.name}: {info.description}.\n\nneuroneval's ``{info.name}`` (SPEC section 3) under the reference's "
        f"name and signature;\nsee the module docstring for where it differs from the reference.{note}\n\n"
        f"Parameters\n----------\n{_IN}{params_doc}{_PAIRED}\n"
        "Returns\n-------\nnumpy.ndarray, numpy.float64 or torch.Tensor\n"
        "    Shape (K, T): unit k against concept t; a 1-D input drops its axis; (D,) when paired.\n"
        "    NaN where undefined.\n\n"
        f"See Also\n--------\nneuroneval.metrics.{info.name}\n"
    )
    return function


# One function per metric, generated from the core's facts.
globals().update({_REFERENCE_NAME.get(m, m): _reference_function(info) for m, info in METRICS.items()})

if TYPE_CHECKING:

    def __getattr__(name: str) -> Callable[..., Any]: ...
