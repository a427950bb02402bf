"""MIB's causal-variable track on a running model (SPEC section 7): featurizers, batched
interchange interventions, DAS and DBM training, the planted model, the track end to end.

- `FullVector`, `Neurons`, `PCA`, `SAEFeatures`, `DAS`, `DBM`: one `Featurizer` interface
  (`featurizers`);
- `forward`, `intervened_logits`, `stacked_logits`: one base and one source pass per batch, then
  the model from the intervened layer and position on, for one featurizer or several stacked,
  at a layer's residual stream or inside its MLP (`SITES`, `site_states`) (`interventions`);
- `prepare`, `regroup`, `unit_hits`: a counterfactual dataset's pairs on a model (`data`);
- `train_das`, `train_dbm`, and `train_together` for several at once (`training`);
- `train_planted_model`: a small transformer holding a variable in a known subspace (`planted`);
- `evaluate_featurizers`: IIA of every featurizer on every variable of a task (its pairs run once
  by `run_pairs`, which several calls can share); `causal_track`
  the same on a named model, with SAEs read or trained per layer (`track`).
"""

from __future__ import annotations

from .data import PairBatch, prepare, regroup, unit_hits
from .featurizers import DAS, DBM, PCA, Featurizer, FullVector, Neurons, SAEFeatures, top_variance
from .interventions import SITES, Pass, forward, intervened_logits, residuals, site_states, site_width, stacked_logits
from .planted import PLANTED_LAYER, PLANTED_OPTIONS, PLANTED_SIZE, PlantedModel, planted_tokenize, train_planted_model
from .track import (
    CausalPairs,
    causal_track,
    evaluate_featurizers,
    load_model,
    read_layer_saes,
    run_pairs,
    split_pairs,
    train_layer_saes,
)
from .training import Trainee, das_trainee, dbm_trainee, train_das, train_dbm, train_together

__all__ = [
    "CausalPairs",
    "DAS",
    "DBM",
    "Featurizer",
    "FullVector",
    "Neurons",
    "PCA",
    "PLANTED_LAYER",
    "PLANTED_OPTIONS",
    "PLANTED_SIZE",
    "PairBatch",
    "Pass",
    "PlantedModel",
    "SAEFeatures",
    "SITES",
    "Trainee",
    "causal_track",
    "das_trainee",
    "dbm_trainee",
    "evaluate_featurizers",
    "forward",
    "intervened_logits",
    "load_model",
    "planted_tokenize",
    "prepare",
    "read_layer_saes",
    "regroup",
    "residuals",
    "run_pairs",
    "site_states",
    "site_width",
    "split_pairs",
    "stacked_logits",
    "top_variance",
    "train_das",
    "train_dbm",
    "train_layer_saes",
    "train_planted_model",
    "train_together",
    "unit_hits",
]
