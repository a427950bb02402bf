"""Readers and writers for the files of the SAE and auto-interpretability ecosystem.

- delphi latent caches, explanations and scorer outputs (`neuroneval.interop.delphi`);
- Neuronpedia explanation exports (`neuroneval.interop.neuronpedia`);
- SAE weights in SAELens's and sparsify's layouts (`neuroneval.interop.sae`);
- OpenAI neuron-explainer `ScoredSimulation` files, and delphi's simulation scores
  (`neuroneval.interop.simulation`).

Every reader checks what it reads and raises `neuroneval.errors.SourceError` naming the file
(and the line, entry and field) when it is unreadable, truncated, inconsistent, or holds a
value of another JSON type than the tool that wrote it writes; every layout has a writer.
"""

from .delphi import (
    DelphiCache,
    delphi_score_summary,
    read_delphi_cache,
    read_delphi_explanations,
    read_delphi_scores,
    write_delphi_cache,
    write_delphi_explanations,
)
from .neuronpedia import is_neuronpedia_export, read_neuronpedia_explanations, write_neuronpedia_explanations
from .sae import SparseAutoencoder, read_saelens, read_sparsify, write_saelens, write_sparsify
from .simulation import SimulationRecord, read_scored_simulations, simulation_scores, write_scored_simulations

__all__ = [
    "DelphiCache",
    "SimulationRecord",
    "SparseAutoencoder",
    "delphi_score_summary",
    "is_neuronpedia_export",
    "read_delphi_cache",
    "read_delphi_explanations",
    "read_delphi_scores",
    "read_neuronpedia_explanations",
    "read_saelens",
    "read_scored_simulations",
    "read_sparsify",
    "simulation_scores",
    "write_delphi_cache",
    "write_delphi_explanations",
    "write_neuronpedia_explanations",
    "write_saelens",
    "write_scored_simulations",
    "write_sparsify",
]
