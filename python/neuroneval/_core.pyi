# Hand-written stubs of the compiled extension; checked by mypy.stubtest in `make lint`.
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "PreparedConcepts",
    "ScoreParams",
    "check_arguments",
    "check_finite",
    "check_pairs",
    "count_entries",
    "metric_facts",
    "metric_names",
    "num_threads",
    "place_entries",
    "prepare_concepts",
    "rank_statistic_columns",
    "score_param_rules",
    "score_matrix",
    "score_pairs",
    "set_counting_ranks",
    "table_scores",
    "unordered_columns",
]

# A matrix source: one 2-D float16/32/64 array, a list of such arrays stacked along the
# rows, or a CSC tuple (rows, indptr int64, indices int64, values float16/32/64).
_Source = Any

@final
class ScoreParams:
    """The five scoring parameters, frozen and validated once by the core."""

    def __new__(
        cls,
        alpha: float | None = None,
        lam: float | None = None,
        k: int | None = None,
        top_alpha: float | None = None,
        seed: int | None = None,
    ) -> ScoreParams: ...
    @property
    def alpha(self) -> float: ...
    @property
    def lam(self) -> float: ...
    @property
    def k(self) -> int: ...
    @property
    def top_alpha(self) -> float: ...
    @property
    def seed(self) -> int: ...
    def replace(self, **changes: float | int | None) -> ScoreParams: ...
    def to_dict(self) -> dict[str, float | int]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[type[ScoreParams], tuple[float, float, int, float, int]]: ...

@final
class PreparedConcepts:
    @property
    def shape(self) -> tuple[int, int]: ...

def check_arguments(metrics: list[str], params: ScoreParams | None = None) -> None: ...
def check_finite(activations: _Source, first_row: int = 0, first_column: int = 0) -> None: ...
def check_pairs(pairs: npt.NDArray[np.int64], units: int, concepts: int) -> None: ...
def prepare_concepts(concepts: _Source, metrics: list[str]) -> PreparedConcepts: ...
def score_matrix(
    activations: _Source,
    concepts: _Source | PreparedConcepts,
    metrics: list[str],
    params: ScoreParams,
    first_unit: int = 0,
    *,
    binary_units: bool = False,
    reference_values: bool = False,
) -> list[npt.NDArray[np.float64]]: ...
def score_pairs(
    activations: _Source,
    concepts: _Source,
    pairs: npt.NDArray[np.int64],
    metrics: list[str],
    params: ScoreParams,
    *,
    binary_units: bool = False,
    reference_values: bool = False,
) -> list[npt.NDArray[np.float64]]: ...
def table_scores(
    n: npt.NDArray[np.float64],
    n11: npt.NDArray[np.float64],
    n10: npt.NDArray[np.float64],
    n01: npt.NDArray[np.float64],
    metrics: list[str],
    lam: float = 1.0,
) -> list[npt.NDArray[np.float64]]: ...
def rank_statistic_columns(
    statistic: str,
    labels: npt.NDArray[np.floating],
    scores: npt.NDArray[np.floating],
) -> npt.NDArray[np.float64]: ...
def count_entries(
    locations: npt.NDArray[np.integer],
    values: npt.NDArray[np.floating],
    limits: tuple[int, int, int],
    counts: npt.NDArray[np.int64],
) -> tuple[int, int, int | float] | None: ...
def place_entries(
    locations: npt.NDArray[np.integer],
    values: npt.NDArray[np.floating],
    ctx_len: int,
    cursor: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    indices: npt.NDArray[np.int64],
    out: npt.NDArray[np.floating],
) -> None: ...
def unordered_columns(
    indptr: npt.NDArray[np.int64], indices: npt.NDArray[np.int64], first: int, last: int
) -> list[int]: ...
def metric_names() -> list[str]: ...
def score_param_rules() -> list[tuple[str, str, float, tuple[float, bool, float, bool], str, str]]: ...
def metric_facts() -> list[tuple[str, bool, bool, bool, tuple[float, float] | None, bool, str]]: ...
def num_threads() -> int: ...
def set_counting_ranks(enabled: bool) -> None: ...
