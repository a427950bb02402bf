"""The paper-like crowd setting: rare concepts, modest correlations, an imperfect concept model.

The CVPR paper's simulation evaluates explanations of vision units against object classes
that cover a small share of the probing set, with correlations of 0.1-0.3 (what explanation
methods achieve) and SigLIP as a good but imperfect concept model. This setting builds the same
from the demo's digits CNN (`neuroneval.experiments.digits`), with nothing downloaded:

- **inputs**: 40,000 two-digit numbers, each a pair of the CNN's held-out probe images (tens,
  units). The number's class (00-99) is drawn with prevalences spread log-uniformly over a
  20-fold range (about 0.14% to 2.7% of the inputs, 1% on average), like object classes;
- **units**: the CNN's live hidden units (conv1, conv2, fc1) on either digit;
- **concepts**: the 100 numbers. An explanation method's guess for a number is the unit most
  correlated with it, and the pairs simulated are 20 of them, spread evenly over those whose
  true correlation is 0.1-0.35 and whose number covers 0.1-2% of the inputs;
- **concept model** (SigLIP's role; MG-IS proposal and BRAgg prior): the product of the
  cross-fitted pixel model's probabilities of the two digits (`digits.digits_concept_model`),
  another model than the labels that define the truth, with an AUC of about 0.82-0.98 on the
  numbers (on 4x4 pooled pixels; 0.85-0.98 on all 64).

`digits.numbers_setting` builds it from the demo CNN; this module imports no demo.

`run` simulates the four configurations of the paper, and MG-IS with the debiased and the
composite estimators, at 3 to 25 raters per input (`neuroneval.crowd.simulate`).

Examples
--------
>>> from neuroneval.experiments import digits, numbers
>>> setting = digits.numbers_setting(digits.probe_digits(0))  # doctest: +SKIP
>>> numbers.run(setting).cheapest()  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

import neuroneval
import neuroneval.crowd

from .common import CROWD_TARGET, spread_pairs

__all__ = [
    "BUDGETS",
    "CONFIGURATIONS",
    "RATERS",
    "NumbersSetting",
    "numbers_setting",
    "run",
]

#: Two-digit numbers in the setting.
N_INPUTS = 40_000
#: The most common number is this many times as frequent as the rarest (log-uniform in between).
PREVALENCE_RANGE = 20.0
#: Ratings per pair: 60 to 61,440, doubling.
BUDGETS: tuple[int, ...] = tuple(60 * 2**i for i in range(11))
#: Raters per shown input the simulator chooses among.
RATERS: tuple[int, ...] = (3, 5, 9, 15, 25)
#: The paper's four configurations, and MG-IS with the debiased and the composite estimators.
CONFIGURATIONS: tuple[tuple[neuroneval.crowd.sampling.Sampling, neuroneval.crowd.sampling.Method], ...] = (
    *neuroneval.crowd.CONFIGURATIONS,
    ("mgis", "debiased"),
    ("mgis", "composite"),
)


@dataclass(frozen=True)
class NumbersSetting:
    """The two-digit numbers setting (see the module docstring).

    Attributes
    ----------
    units : ndarray, shape (N, K)
        The hidden units on the tens digit, then on the units digit.
    concepts : ndarray, shape (N, 100)
        Column t is 1 where the number is t.
    concept_model : ndarray, shape (N, 100)
    pairs : ndarray of int64, shape (M, 2)
        (unit, number) pairs to simulate.
    rho : ndarray, shape (M,)
        Their true correlations.
    prevalence : ndarray, shape (M,)
        The share of inputs showing each pair's number.
    auc : ndarray, shape (M,)
        The concept model's AUC on each pair's number.
    """

    units: npt.NDArray[np.float64]
    concepts: npt.NDArray[np.float64]
    concept_model: npt.NDArray[np.float64]
    pairs: npt.NDArray[np.int64]
    rho: npt.NDArray[np.float64]
    prevalence: npt.NDArray[np.float64]
    auc: npt.NDArray[np.float64]


def numbers_setting(
    digit_labels: npt.ArrayLike,
    digit_units: npt.ArrayLike,
    digit_model: npt.ArrayLike,
    seed: int = 0,
    n_inputs: int = N_INPUTS,
    count: int = 20,
    rho_range: tuple[float, float] = (0.1, 0.35),
    prevalence_range: tuple[float, float] = (0.001, 0.02),
) -> NumbersSetting:
    """Build the setting from single-digit probe inputs (deterministic for a seed).

    Parameters
    ----------
    digit_labels : array_like of int, shape (P,)
        The digit of each probe input.
    digit_units : array_like, shape (P, K)
        The units on each probe input (a number's units are those of its tens digit, then of
        its units digit).
    digit_model : array_like, shape (P, 10)
        The concept model's probability of each digit on each probe input.
    """
    from sklearn.metrics import roc_auc_score

    labels = np.asarray(digit_labels)
    hidden = np.asarray(digit_units, dtype=np.float64)
    model = np.asarray(digit_model, dtype=np.float64)
    rng = np.random.default_rng([seed, 17])
    weight = np.exp(rng.uniform(0.0, math.log(PREVALENCE_RANGE), 100))
    number = rng.choice(100, size=n_inputs, p=weight / weight.sum())
    by_digit = [np.flatnonzero(labels == d) for d in range(10)]
    tens = np.array([rng.choice(by_digit[t // 10]) for t in number])
    ones = np.array([rng.choice(by_digit[t % 10]) for t in number])
    units = np.concatenate([hidden[tens], hidden[ones]], axis=1)
    concepts = (number[:, None] == np.arange(100)[None, :]).astype(np.float64)
    concept_model = (model[tens][:, :, None] * model[ones][:, None, :]).reshape(n_inputs, 100)

    corr = neuroneval.compute(units, concepts, ["correlation"])["correlation"]
    filled = np.where(np.isnan(corr), -np.inf, corr)
    best_unit = filled.argmax(axis=0)
    rho = filled[best_unit, np.arange(100)]
    prevalence = concepts.mean(axis=0)
    eligible = np.flatnonzero(
        (rho >= rho_range[0])
        & (rho <= rho_range[1])
        & (prevalence >= prevalence_range[0])
        & (prevalence <= prevalence_range[1])
    )
    chosen = eligible[spread_pairs(rho[eligible], count, rho_range[0])]
    pairs = np.stack([best_unit[chosen], chosen], axis=1).astype(np.int64)
    auc = np.array([roc_auc_score(concepts[:, t], concept_model[:, t]) for t in chosen])
    return NumbersSetting(units, concepts, concept_model, pairs, rho[chosen], prevalence[chosen], auc)


#: Caps on raters per input and the configurations of the sequential simulation.
SEQUENTIAL_RATERS: tuple[int, ...] = (9,)
SEQUENTIAL_CONFIGURATIONS: tuple[tuple[neuroneval.crowd.sampling.Sampling, neuroneval.crowd.sampling.Method], ...] = (
    ("mgis", "bragg"),
    ("mgis", "debiased"),
    ("mgis", "composite"),
)


def run_sequential(
    setting: NumbersSetting, seed: int = 0, trials: int = 20, budgets: tuple[int, ...] = BUDGETS, progress: bool = True
) -> neuroneval.crowd.Simulation:
    """`run` with raters asked one at a time until BRAgg's posterior is sure (the default
    confidence), at most `SEQUENTIAL_RATERS`, for `SEQUENTIAL_CONFIGURATIONS`."""
    return neuroneval.crowd.simulate(
        setting.units, setting.concepts, setting.concept_model, setting.pairs, budgets,
        configurations=SEQUENTIAL_CONFIGURATIONS, raters_per_input=SEQUENTIAL_RATERS, rating="sequential",
        trials=trials, prior="model", target=CROWD_TARGET, seed=seed, progress=progress,
    )  # fmt: skip


def run(
    setting: NumbersSetting,
    seed: int = 0,
    trials: int = 20,
    raters: tuple[int, ...] = RATERS,
    budgets: tuple[int, ...] = BUDGETS,
    progress: bool = True,
) -> neuroneval.crowd.Simulation:
    """The crowd simulation on the setting: raters wrong 23% of the time, BRAgg with the concept
    model's prior, every configuration of `CONFIGURATIONS` at every raters per input of `raters`."""
    return neuroneval.crowd.simulate(
        setting.units,
        setting.concepts,
        setting.concept_model,
        setting.pairs,
        budgets,
        configurations=CONFIGURATIONS,
        raters_per_input=raters,
        trials=trials,
        prior="model",
        target=CROWD_TARGET,
        seed=seed,
        progress=progress,
    )
