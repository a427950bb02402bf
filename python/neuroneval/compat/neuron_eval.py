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
  accuracies, auc/inverse_auc with a single class, auprc/inverse_auprc without a positive, mad
  with an empty side, correlation and cos_sim of a constant or all-zero column, wpmi's empty top
  set); these functions return NaN, so an undefined score never ranks as a real one. wpmi of an
  empty concept (all probabilities 0) is NaN too; the reference returns +inf.
- **correlation is the true Pearson r.** The reference returns r * (N-1)/N (it divides by N
  after normalising with the sample standard deviation); at N = 50,000 the difference is 2e-5.
  Its spearman_correlation and the top-and-random functions carry the same factor (N the
  inputs they are computed on).

``reference_values=True`` (keyword-only, on every function) returns the reference's values
instead, in both cases: its numbers where neuroneval's are NaN (0 for a ratio of counts, an
average precision without positives, a constant vector's correlation or cosine; -mean(a) or
mean(a) for mad with an empty side; wpmi with a mean log of 0 over an empty top set and +inf
for an empty concept), and the (N-1)/N factor. recall, f1_score, iou and accuracy divide
without a clamp in the reference, so their NaN stays NaN. Use it to run code written around
the reference's conventions: its notebooks feed scores to torcheval's ``binary_auprc``, which
ranks a NaN score first, and to ``torch.min``/``torch.max`` normalisations that one NaN turns
into NaN. `neuroneval.compat.neuron_eval_reference` holds the same functions with
``reference_values=True`` by default, so that switching stays a one-line change::

    from neuroneval.compat import neuron_eval_reference as metrics

Two differences remain with ``reference_values=True`` too:

- **Ties are midranks.** The reference ranks with added random noise, which breaks ties at
  random and makes its numbers irreproducible. Here spearman_correlation is the Pearson r of
  midranks (`scipy.stats.spearmanr`), and in auc and inverse_auc a tied (positive, negative)
  pair counts 1/2 (`sklearn.metrics.roc_auc_score`). Without ties the two agree; with ties the
  reference's value is a random draw whose mean is close to this one. A constant vector's
  midranks are constant, so its spearman_correlation is NaN (0 with ``reference_values``).
- **Top-and-random subsets** are drawn by neuroneval's own generator from ``seed`` (a keyword
  the reference lacks; it draws from torch's global RNG), so the subset, and with it the value,
  differs from any reference run. The distribution is the same: k inputs without replacement
  from the unit's top ceil(alpha N) (all of them if fewer), plus k without replacement from all
  N (all of them if fewer), duplicates kept. The ``*_binary`` variants take every input where the
  (binary) unit is 1, plus k drawn from all N, as the reference's do. Each unit draws its own
  subset, from the seed and its column index: ``paired=True`` gives the diagonal of the full
  matrix, but a column scored on its own (index 0) draws another subset than it does as column j
  of a matrix.

Other conventions:

- **alpha=False** means, as in the reference, that the units are already binary and are used as
  they are: the top set is every input where the unit is 1. The units must then hold only 0 and
  1 (else `neuroneval.errors.InvalidInputError` names the first other value); any other alpha
  must satisfy 0 < alpha <= 1 (else `neuroneval.errors.ParameterError`).
- auprc and inverse_auprc equal `sklearn.metrics.average_precision_score` (tied scores form one
  threshold), as torcheval's ``binary_auprc`` does. The reference returns them as float64
  whatever the input; here they follow the dtype rule above, like every other function.

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
from .._score import _inputs, scores
from ..errors import InvalidInputError, ShapeError
from ..params import ScoreParams

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
#: The suffix of the reference's top-and-random variants for units that are already binary.
_BINARY = "_binary"


def _variants() -> list[tuple[str, MetricInfo, bool]]:
    """Every function of the reference: (its name, the metric, whether it is the variant for
    binary units), generated from the registry: one per metric, plus a binary variant of each
    top-and-random one."""
    out = []
    for m, info in METRICS.items():
        name = _REFERENCE_NAME.get(m, m)
        out.append((name, info, False))
        if info.uses_sampling:
            out.append((name + _BINARY, info, True))
    return out


__all__ = sorted(name for name, _, _ in _variants())


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


def _check_binary(a: Any, why: str) -> None:
    """Fails unless every activation is 0 or 1, naming the first other value (row-major)."""
    if is_torch_tensor(a) and a.device.type == "cpu" and a.dtype.is_floating_point and a.dtype.itemsize >= 4:
        a = a.detach().numpy()  # numpy's operations cost less than torch's on a small column
    other = (a != 0) & (a != 1)
    if bool(other.any()):
        flat = other.reshape(-1).nonzero()[0] if not is_torch_tensor(a) else other.reshape(-1).nonzero()[:, 0]
        i, j = divmod(int(flat[0]), int(a.shape[1]))
        raise InvalidInputError(
            f"{why} takes units that are already binary (every activation 0 or 1); "
            f"neuron_act[{i}, {j}] is {float(a[i, j])!r}"
        )


def _output(values: _Array, neuron_act: Any, concept_prob: Any) -> Any:
    """values as numpy (float64) or, when a tensor came in, as a tensor on its device."""
    tensors = [x for x in (neuron_act, concept_prob) if is_torch_tensor(x)]
    if not tensors:
        return np.float64(values[()]) if values.ndim == 0 else values
    import torch

    floating = [t.dtype for t in tensors if t.is_floating_point()]
    single = floating and all(d == torch.float32 for d in floating)
    out = torch.from_numpy(np.array(values, dtype=np.float32 if single else np.float64))
    device = tensors[0].device
    return out if device.type == "cpu" else out.to(device)


def _score(
    metric: str,
    neuron_act: Any,
    concept_prob: Any,
    paired: bool,
    params: ScoreParams,
    *,
    binary_units: bool = False,
    reference_values: bool = False,
    scale: bool = False,
) -> Any:
    """One neuroneval metric in the reference's shapes; see the module docstring."""
    a, a_shape = _as_columns(neuron_act, "neuron_act")
    c, c_shape = _as_columns(concept_prob, "concept_prob")
    a_vec, c_vec = len(a_shape) == 1, len(c_shape) == 1
    pairs = None
    if paired:
        if a_shape != c_shape:
            raise ShapeError(
                f"paired=True scores column j against column j, so neuron_act and concept_prob must have "
                f"the same shape; got {a_shape} and {c_shape}"
            )
        index = np.arange(a.shape[1], dtype=np.int64)
        pairs = np.column_stack([index, index])
    acts, conc = _inputs(a, c)
    conventions = {"binary_units": binary_units, "reference_values": reference_values}
    values = scores(acts, conc, [metric], params, pairs, **conventions)[metric]
    if paired:
        if a_vec:
            values = values.reshape(())
    else:
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
_REFERENCE_VALUES = (
    "reference_values : bool, keyword-only\n"
    "    The reference's values where neuroneval's are undefined (NaN), and its (N-1)/N factor of the\n"
    "    correlations (see the module docstring). Not in the reference.\n"
)
_SCALING = (
    "reference_scaling : bool, default False, keyword-only\n"
    "    Multiply by (N-1)/N, reproducing the reference's r * (N-1)/N (implied by reference_values).\n"
)
_SEED = (
    "seed : int, default 0, keyword-only\n    Seed of the draw; each unit draws its own subset. Not in the reference.\n"
)
_TOP_RANDOM = (
    "k : int, default 25\n    Inputs drawn from the unit's top inputs, and again from all inputs.\n"
    "alpha : float, default 0.002\n    The top fraction the first k inputs are drawn from.\n" + _SEED
)
_TOP_RANDOM_BINARY = (
    "k : int, default 25\n    Inputs drawn from all inputs, added to every input where the unit is 1.\n" + _SEED
)
_ALPHA = (
    "alpha : float or False{default}\n"
    "    Top fraction of inputs that binarises each unit, 0 < alpha <= 1; False for units that are\n"
    "    already binary (0 or 1), used as they are.\n"
)

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _signature(info: MetricInfo, binary: bool, reference_values: bool) -> tuple[inspect.Signature, str, str]:
    """The reference's signature of a metric (or of its variant for binary units), from its
    facts, then neuroneval's keyword-only additions: the parameters, their numpydoc, and a
    note on where the function differs from the metric's plain form."""
    params = [inspect.Parameter("neuron_act", _POSITIONAL), inspect.Parameter("concept_prob", _POSITIONAL)]
    doc, note = "", ""
    if info.uses_sampling:
        params.append(inspect.Parameter("k", _POSITIONAL, default=25))
        if binary:
            doc = _TOP_RANDOM_BINARY
            note = "\nThe variant for units that are already binary: every input where the unit is 1, plus k random."
        else:
            params.append(inspect.Parameter("alpha", _POSITIONAL, default=0.002))
            doc, note = _TOP_RANDOM, "\nPositional order (k, alpha) as in the reference."
        params.append(inspect.Parameter("seed", _KEYWORD, default=0))
    elif info.uses_alpha:
        default = _ALPHA_DEFAULT.get(info.name, inspect.Parameter.empty)
        params.append(inspect.Parameter("alpha", _POSITIONAL, default=default))
        doc = _ALPHA.format(default="" if default is inspect.Parameter.empty else f", default {default}")
        if info.uses_lambda:
            params.append(inspect.Parameter("lam", _POSITIONAL, default=1))
            doc += "lam : float, default 1\n    Weight of the concept's log mean, >= 0.\n"
    if info.name == "correlation":
        params.append(inspect.Parameter("reference_scaling", _KEYWORD, default=False))
        doc, note = _SCALING, "\nReturns the true Pearson r unless reference_scaling or reference_values is set."
    params.append(inspect.Parameter("paired", _KEYWORD, default=False))
    params.append(inspect.Parameter("reference_values", _KEYWORD, default=reference_values))
    return inspect.Signature(params), doc, note


class _Binder:
    """`inspect.Signature.bind` plus `apply_defaults` for the signatures above (positional or
    keyword parameters, then keyword-only ones with defaults), at a fraction of its cost: the
    reference's call pattern is one small call per pair."""

    def __init__(self, name: str, signature: inspect.Signature) -> None:
        self.name = name
        self.signature = signature
        params = list(signature.parameters.values())
        self.positional = [p.name for p in params if p.kind is _POSITIONAL]
        self.defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
        self.names = set(signature.parameters)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.positional) or not self.names.issuperset(kwargs):
            self._fail(args, kwargs)
        given = dict(zip(self.positional, args, strict=False))  # (fewer args than parameters)
        if not given.keys().isdisjoint(kwargs):
            self._fail(args, kwargs)
        given.update(kwargs)
        if len(given) < len(self.names):
            for key, value in self.defaults.items():
                given.setdefault(key, value)
            if len(given) < len(self.names):
                self._fail(args, kwargs)
        return given

    def _fail(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raises inspect's own TypeError for a call that does not bind."""
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}(): {e}") from None
        raise AssertionError("a call that binds was refused")  # pragma: no cover


def _is_false(alpha: Any) -> bool:
    """Whether alpha is the reference's False (a bool, or numpy's), not a number."""
    return isinstance(alpha, (bool, np.bool_)) and not alpha


def _reference_function(info: MetricInfo, binary: bool, reference_values: bool, module: str) -> Callable[..., Any]:
    """One metric under the reference's name and signature (see the module docstring)."""
    name = _REFERENCE_NAME.get(info.name, info.name) + (_BINARY if binary else "")
    signature, params_doc, note = _signature(info, binary, reference_values)
    undefined = "the reference's value where undefined" if reference_values else "NaN where undefined"

    bind = _Binder(name, signature)

    def function(*args: Any, **kwargs: Any) -> Any:
        given = bind(args, kwargs)
        act, prob, paired = given.pop("neuron_act"), given.pop("concept_prob"), given.pop("paired")
        reference = bool(given.pop("reference_values"))
        scale = bool(given.pop("reference_scaling", False)) and not reference
        units_binary = binary or (info.uses_alpha and _is_false(given.get("alpha")))
        if info.uses_sampling and not binary:
            given["top_alpha"] = given.pop("alpha")
        elif units_binary:
            given.pop("alpha", None)  # unused: the units are their own top sets
        if units_binary:
            why = f"{name}()" if binary else f"{name}(..., alpha=False)"
            _check_binary(_as_columns(act, "neuron_act")[0], why)
        return _score(
            info.name,
            act,
            prob,
            paired,
            ScoreParams(**given),
            binary_units=units_binary,
            reference_values=reference,
            scale=scale,
        )

    function.__signature__ = signature  # type: ignore[attr-defined]
    function.__name__ = function.__qualname__ = name
    function.__module__ = module
    function.__doc__ = (
        f"{info.name}: {info.description}.\n\nneuroneval's ``{info.name}`` (SPEC section 3) under the reference's "
        f"name and signature;\nsee `neuroneval.compat.neuron_eval` for where it differs from the reference.{note}\n\n"
        f"Parameters\n----------\n{_IN}{params_doc}{_PAIRED}{_REFERENCE_VALUES}\n"
        "Returns\n-------\nnumpy.ndarray, numpy.float64 or torch.Tensor\n"
        "    Shape (K, T): unit k against concept t; a 1-D input drops its axis; (D,) when paired.\n"
        f"    {undefined[0].upper() + undefined[1:]}.\n\n"
        f"See Also\n--------\nneuroneval.metrics.{info.name}\n"
    )
    return function


def _functions(reference_values: bool, module: str) -> dict[str, Callable[..., Any]]:
    """Every function of the reference's metric module, generated from the core's facts, with
    ``reference_values`` defaulting to the given value; `__module__` is `module`."""
    return {name: _reference_function(info, binary, reference_values, module) for name, info, binary in _variants()}


# One function per metric (and per binary top-and-random variant), from the core's facts.
globals().update(_functions(reference_values=False, module=__name__))

if TYPE_CHECKING:

    def __getattr__(name: str) -> Callable[..., Any]: ...
