"""MIB's causal-variable track on a running model (SPEC section 7): featurizers, batched
interchange interventions, DAS and DBM training, the planted model, the track end to end.

- `FullVector`, `Neurons`, `PCA`, `SAEFeatures`, `DAS`, `DBM`: one `Featurizer` interface
  (`featurizers`);
- `forward`, `intervened_logits`: one base and one source pass per batch, then the model from
  the intervened layer and position on (`interventions`);
- `prepare`, `hits`: a counterfactual dataset's pairs on a model (`data`);
- `train_das`, `choose_das`, `train_dbm` (`training`);
- `train_planted_model`: a small transformer holding a variable in a known subspace (`planted`);
- `evaluate_featurizers`: IIA of every featurizer on every variable of a task (`track`).
"""

from __future__ import annotations

from .data import PairBatch, hits, prepare
from .featurizers import DAS, DBM, PCA, Featurizer, FullVector, Neurons, SAEFeatures, top_variance
from .interventions import Pass, forward, intervened_logits, residuals
from .planted import PLANTED_LAYER, PLANTED_OPTIONS, PLANTED_SIZE, PlantedModel, planted_tokenize, train_planted_model
from .track import evaluate_featurizers, split_pairs
from .training import accuracy, choose_das, train_das, train_dbm

__all__ = [
    "DAS",
    "DBM",
    "PCA",
    "PLANTED_LAYER",
    "PLANTED_OPTIONS",
    "PLANTED_SIZE",
    "Featurizer",
    "FullVector",
    "Neurons",
    "PairBatch",
    "Pass",
    "PlantedModel",
    "SAEFeatures",
    "accuracy",
    "choose_das",
    "evaluate_featurizers",
    "forward",
    "hits",
    "intervened_logits",
    "planted_tokenize",
    "prepare",
    "residuals",
    "split_pairs",
    "top_variance",
    "train_das",
    "train_dbm",
    "train_planted_model",
]
