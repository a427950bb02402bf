"""Crowdsourced evaluation (SPEC section 6): the correlation of a unit with an explanation from a
few noisy human ratings.

Correlation over the whole probing set is the metric to trust, but with human raters it needs a
label for every input. The CVPR 2026 recipe makes it affordable:

1. `proposal` / `plan`: a cheap concept model picks which inputs raters see (model-guided
   importance sampling, MG-IS): inputs where the unit's standardised activation times the
   model's standardised probability is large are drawn more often; a floor gamma / N keeps
   every input possible. `plan` draws them for many (unit, explanation) pairs and exports a
   task table for a crowdsourcing platform.
2. `aggregate`: each input's ratings become a soft label, by Bayesian rating aggregation
   (BRAgg: a posterior under raters wrong with rate eta), majority vote or the mean vote. With
   rater ids, ``eta="estimate"`` fits each rater's own error rate (one-coin Dawid-Skene, EM).
3. `estimate`: the importance-weighted correlation with a standard error and a confidence
   interval.
4. `sequential_finished`, `votes_to_ask`, `sequential_labels`: raters asked one at a time about
   an input until BRAgg's posterior is sure, with labels debiased for that stopping rule.
5. `next_tasks`, `simulate_study`: a study round by round (a sequential plan asks each input
   the votes that could decide it next), with simulated raters to rehearse it.
6. `simulate`: all of it with simulated raters on real activations and true labels, to plan a
   budget: the relative correlation error (RCE) per configuration and budget.

Each step's options (their defaults, domains and help, which the command line's flags show)
are declared once: `PLAN_OPTIONS`, `TASK_OPTIONS`, `AGGREGATE_OPTIONS`, `ESTIMATE_OPTIONS`,
`SIMULATE_OPTIONS` (and `ATTENUATION_OPTIONS`); None stands for the declared default.

Examples
--------
>>> import numpy as np, polars as pl
>>> from neuroneval import crowd
>>> rng = np.random.default_rng(0)
>>> y = (rng.random(5000) < 0.05).astype(float)              # the true concept
>>> a = 2 * y + rng.normal(size=5000)                         # a unit that detects it
>>> model = np.clip(0.7 * y + 0.1 + 0.1 * rng.random(5000), 0, 1)  # a cheap, imperfect concept model
>>> p = crowd.plan([(0, 0)], a[:, None], model[:, None], budget=300, seed=0)
>>> shown = p.inputs()                                        # (pair, input) to show raters
>>> votes = [(r["pair"], r["input"], j, int(y[r["input"]])) for r in shown.iter_rows(named=True) for j in range(3)]
>>> ratings = pl.DataFrame(votes, schema=["pair", "input", "rater", "vote"], orient="row")
>>> result = crowd.estimate(p, crowd.aggregate(ratings, method="majority"), seed=0)
>>> round(float(np.corrcoef(a, y)[0, 1]), 3), round(result["rho"][0], 3)   # exact, and from 100 inputs
(0.398, 0.409)
"""

from __future__ import annotations

from .aggregation import (
    AGGREGATE_OPTIONS,
    ATTENUATION_OPTIONS,
    aggregate,
    label_attenuation,
    rater_error_rates,
)
from .estimation import ESTIMATE_OPTIONS, ESTIMATORS, INTERVALS, default_interval, estimate
from .posterior import bragg_posterior
from .sampling import CONFIGURATIONS, METHODS, PLAN_OPTIONS, TASK_OPTIONS, Plan, plan, proposal
from .sequential import SEQUENTIAL_OPTIONS, posterior_path, sequential_finished, sequential_labels, votes_to_ask
from .simulation import (
    SIMULATE_OPTIONS,
    Simulation,
    best_raters,
    cheapest_budgets,
    configuration_name,
    needed_budgets,
    simulate,
)
from .study import RATE_OPTIONS, counted_draws, next_round, next_tasks, simulate_study, simulated_votes

__all__ = [
    "AGGREGATE_OPTIONS",
    "ATTENUATION_OPTIONS",
    "CONFIGURATIONS",
    "ESTIMATE_OPTIONS",
    "ESTIMATORS",
    "INTERVALS",
    "METHODS",
    "PLAN_OPTIONS",
    "RATE_OPTIONS",
    "SEQUENTIAL_OPTIONS",
    "SIMULATE_OPTIONS",
    "TASK_OPTIONS",
    "Plan",
    "Simulation",
    "aggregate",
    "best_raters",
    "bragg_posterior",
    "cheapest_budgets",
    "configuration_name",
    "counted_draws",
    "default_interval",
    "estimate",
    "label_attenuation",
    "needed_budgets",
    "next_round",
    "next_tasks",
    "plan",
    "posterior_path",
    "proposal",
    "rater_error_rates",
    "sequential_finished",
    "sequential_labels",
    "simulate",
    "simulate_study",
    "simulated_votes",
    "votes_to_ask",
]
