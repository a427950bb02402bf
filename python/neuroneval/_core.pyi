# Hand-written stubs of the compiled extension; checked by mypy.stubtest in `make lint`.
import numpy as np
import numpy.typing as npt

__all__ = ["metric_names", "num_threads", "rank_statistic_columns", "score_matrix", "score_pairs"]

def score_matrix(
    activations: npt.NDArray[np.floating],
    concepts: npt.NDArray[np.floating],
    metrics: list[str],
    alpha: float,
    lam: float,
    k: int,
    top_alpha: float,
    seed: int,
) -> list[npt.NDArray[np.float64]]: ...
def score_pairs(
    activations: npt.NDArray[np.floating],
    concepts: npt.NDArray[np.floating],
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
