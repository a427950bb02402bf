# Hand-written stubs of the compiled extension; checked by mypy.stubtest in `make lint`.
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "PreparedConcepts",
    "check_arguments",
    "metric_names",
    "num_threads",
    "prepare_concepts",
    "rank_statistic_columns",
    "score_matrix",
    "score_pairs",
]

# A matrix source: one 2-D float16/32/64 array, a list of such arrays stacked along the
# rows, or a CSC tuple (rows, indptr int64, indices int64, values float16/32/64).
_Source = Any

@final
class PreparedConcepts:
    @property
    def shape(self) -> tuple[int, int]: ...

def check_arguments(
    metrics: list[str],
    alpha: float,
    lam: float,
    k: int,
    top_alpha: float,
    seed: int,
) -> None: ...
def prepare_concepts(concepts: _Source, metrics: list[str]) -> PreparedConcepts: ...
def score_matrix(
    activations: _Source,
    concepts: _Source | PreparedConcepts,
    metrics: list[str],
    alpha: float,
    lam: float,
    k: int,
    top_alpha: float,
    seed: int,
    first_unit: int = 0,
) -> list[npt.NDArray[np.float64]]: ...
def score_pairs(
    activations: _Source,
    concepts: _Source,
    pairs: npt.NDArray[np.int64],
    metrics: list[str],
    alpha: float,
    lam: float,
    k: int,
    top_alpha: float,
    seed: int,
) -> list[npt.NDArray[np.float64]]: ...
def rank_statistic_columns(
    statistic: str,
    labels: npt.NDArray[np.floating],
    scores: npt.NDArray[np.floating],
) -> npt.NDArray[np.float64]: ...
def metric_names() -> list[str]: ...
def num_threads() -> int: ...
