"""Drop-in replacements for other projects' APIs, computed by neuroneval.

`neuroneval.compat.neuron_eval`
    The metric functions of the NeuronEval paper's reference implementation, same names and
    signatures: switch by changing one import.
`neuroneval.compat.neuron_eval_reference`
    The same functions with the reference's values where neuroneval's are undefined (and its
    (N-1)/N factor of the correlations), for code written around the reference's conventions.

Importing this package does not import torch; torch is imported only when a tensor is passed.
"""

from __future__ import annotations

from . import neuron_eval, neuron_eval_reference

__all__ = ["neuron_eval", "neuron_eval_reference"]
