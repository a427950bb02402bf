"""MIB's causal-variable localization track (SPEC section 7), its pure side.

- `CausalModel`, `counterfactual_dataset`: a task's variables and mechanisms, and (base, source)
  pairs whose expected counterfactual outputs the causal model computes (`model`);
- `ioi_task`, `arithmetic_task`, `mcqa_task`, `planted_task`: the tasks, their prompts and the token positions the
  interventions target (`tasks`);
- `iia`, `CausalRun`: interchange intervention accuracy aggregated as MIB does, the run's files
  and the table across runs (`results`).

The model side (featurizers, batched interchange interventions, DAS and DBM training, the
planted model) is `neuroneval.torch.causal`.
"""

from __future__ import annotations

from .model import CausalModel, CounterfactualDataset, counterfactual_dataset
from .tasks import CAUSAL_TASKS, LAST, CausalTask, arithmetic_task, ioi_task, mcqa_task, planted_task, render

__all__ = [
    "CAUSAL_TASKS",
    "LAST",
    "CausalModel",
    "CausalTask",
    "arithmetic_task",
    "CounterfactualDataset",
    "counterfactual_dataset",
    "ioi_task",
    "mcqa_task",
    "planted_task",
    "render",
]
