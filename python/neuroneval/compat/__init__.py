"""Drop-in replacements for other projects' APIs, computed by neuroneval.

`neuroneval.compat.neuron_eval`
    The metric functions of the NeuronEval paper's reference implementation, same names and
    signatures: switch by changing one import.

Importing this package does not import torch; torch is imported only when a tensor is passed.
"""

from __future__ import annotations

from . import neuron_eval

__all__ = ["neuron_eval"]
