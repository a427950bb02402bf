"""The NeuronEval reference's metric functions with the reference's values by default.

The same functions as `neuroneval.compat.neuron_eval`, with ``reference_values=True`` unless
a call says otherwise: where neuroneval's value is undefined (NaN) they return the reference's
number (0 for a ratio of counts or a constant vector's correlation, +inf for wpmi of an empty
concept, ...), and correlations carry its (N-1)/N factor. Code written around the reference's
conventions (its notebooks rank scores with torcheval's ``binary_auprc`` and normalise them by
``torch.min``/``torch.max``) then runs with one import changed::

    from neuroneval.compat import neuron_eval_reference as metrics   # was: import metrics

Ties are still midranks and top-and-random subsets still come from neuroneval's seeded
generator; see `neuroneval.compat.neuron_eval` for every difference.

Examples
--------
>>> import numpy as np
>>> from neuroneval.compat import neuron_eval, neuron_eval_reference
>>> acts = np.array([[0.9], [0.8], [0.1], [0.2]])
>>> empty = np.zeros((4, 1))
>>> float(neuron_eval.precision(acts, empty, 0.5)[0, 0])
nan
>>> float(neuron_eval_reference.precision(acts, empty, 0.5)[0, 0])
0.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .neuron_eval import __all__ as _names
from .neuron_eval import _functions

__all__ = list(_names)

globals().update(_functions(reference_values=True, module=__name__))

if TYPE_CHECKING:

    def __getattr__(name: str) -> Callable[..., Any]: ...
