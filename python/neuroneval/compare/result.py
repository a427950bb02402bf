"""`Comparison`: the tables `compare` returns, the ranking as text, the SAEBench-shaped
document and the files `write` writes."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import ParameterError
from ..files import write_files_atomic

__all__ = ["COMPARISON_FILES", "COMPARISON_FORMAT", "EVAL_TYPE_ID", "Comparison"]

#: `eval_type_id` of the SAEBench-shaped output.
EVAL_TYPE_ID = "neuroneval_explainer_comparison"
#: What `Comparison.write` writes: the three tables, the settings (`comparison.json`, which
#: marks a comparison directory) and the SAEBench-shaped document.
COMPARISON_FILES = {
    "pairs": "pairs.parquet",
    "summary": "summary.csv",
    "differences": "differences.csv",
    "config": "comparison.json",
    "saebench": "saebench_eval.json",
}
#: The `format` tag of comparison.json.
COMPARISON_FORMAT = "neuroneval-comparison"


@dataclass(frozen=True)
class Comparison:
    """What `compare` found.

    Attributes
    ----------
    pairs : polars.DataFrame
        One row per scored (unit, explainer): unit (index), unit_name, explainer, explanation,
        row (the explanation row whose concept was used; a baseline's borrowed or shuffled
        one), dead (the unit is constant over the inputs, and excluded), one column per metric.
    summary : polars.DataFrame
        One row per explainer (baselines last): explainer, baseline, units_total,
        units_explained, units_unexplained, units_dead, pairs_with_nan (live pairs with a NaN
        in some metric), and per metric m: m_n (units averaged), m_nan (live units whose value
        is NaN), m_mean, m_median, m_ci_low, m_ci_high (the bootstrap interval of the mean),
        m_rank (1 = highest mean; NaN last; ties in explainer order).
    differences : polars.DataFrame
        explainer_a, explainer_b (every two explainers, a before b in explainer order), metric,
        n_units, mean_difference (a - b), ci_low, ci_high (paired bootstrap), win_rate, tie_rate.
    settings : dict
        metrics, explainers, baselines (name: definition), alpha, n_boot, confidence, seed,
        n_inputs, n_units, n_explanations, dead_units (their indices).
    """

    pairs: pl.DataFrame
    summary: pl.DataFrame
    differences: pl.DataFrame
    settings: dict[str, Any] = field(repr=False)

    @property
    def metrics(self) -> list[str]:
        return list(self.settings["metrics"])

    @property
    def explainers(self) -> list[str]:
        return list(self.settings["explainers"])

    @property
    def dead_units(self) -> list[int]:
        return list(self.settings["dead_units"])

    def _metric(self, metric: str) -> str:
        if metric not in self.metrics:
            raise ParameterError(f"metric {metric!r} was not compared; the comparison has {', '.join(self.metrics)}")
        return metric

    def ranking(self, metric: str = "correlation") -> str:
        """The explainers under `metric`, best mean first, with intervals, as aligned text.

        Examples
        --------
        >>> import numpy as np, polars as pl
        >>> from neuroneval.compare import compare
        >>> rng = np.random.default_rng(0)
        >>> truth = (rng.random((300, 5)) < 0.3).astype(float)
        >>> acts = truth + rng.normal(size=truth.shape)
        >>> table = pl.DataFrame({"unit": [*range(5)] * 2, "explainer": ["exact"] * 5 + ["noise"] * 5,
        ...                       "explanation": [f"c{k}" for k in range(10)]})
        >>> concepts = np.hstack([truth, rng.random(truth.shape)])
        >>> r = compare(acts, table, concepts, metrics="correlation", n_boot=200, baselines=False)
        >>> print(r.ranking())
        correlation: mean over units with a 95% bootstrap interval (200 resamples); 0 dead units excluded
        rank  explainer  units   mean     95% interval  median  NaN
           1  exact          5  0.436   [0.370, 0.503]   0.418    0
           2  noise          5  0.018  [-0.005, 0.044]   0.011    0
        """
        m = self._metric(metric)
        s = self.settings
        dead = len(s["dead_units"])
        head = ["rank", "explainer", "units", "mean", f"{100 * s['confidence']:g}% interval", "median", "NaN"]
        body = []
        for r in self.summary.sort(f"{m}_rank").iter_rows(named=True):
            low, high = r[f"{m}_ci_low"], r[f"{m}_ci_high"]
            body.append(
                [
                    str(r[f"{m}_rank"]),
                    r["explainer"],
                    f"{r[f'{m}_n']:,}",
                    _number(r[f"{m}_mean"]),
                    "-" if math.isnan(low) else f"[{_number(low)}, {_number(high)}]",
                    _number(r[f"{m}_median"]),
                    f"{r[f'{m}_nan']:,}",
                ]
            )
        title = (
            f"{m}: mean over units with a {100 * s['confidence']:g}% bootstrap interval ({s['n_boot']:,} resamples); "
            f"{dead:,} dead unit{'' if dead == 1 else 's'} excluded"
        )
        return title + "\n" + _align(head, body, left={1})

    def differences_text(self, metric: str = "correlation") -> str:
        """The paired differences of every two explainers under `metric`, as aligned text."""
        m = self._metric(metric)
        s = self.settings
        rows = []
        for d in self.differences.filter(pl.col("metric") == m).iter_rows(named=True):
            low, high = d["ci_low"], d["ci_high"]
            rows.append(
                [
                    f"{d['explainer_a']} - {d['explainer_b']}",
                    f"{d['n_units']:,}",
                    _number(d["mean_difference"]),
                    "-" if math.isnan(low) else f"[{_number(low)}, {_number(high)}]",
                    _number(d["win_rate"]),
                    _number(d["tie_rate"]),
                ]
            )
        head = ["A - B", "units", "mean", f"{100 * s['confidence']:g}% interval", "A wins", "ties"]
        title = (
            f"{m}: paired differences over the units both explain ({s['n_boot']:,} resample{'' if s['n_boot'] == 1 else 's'}; "
            "A wins: share of units where A > B, ties counted half)"
        )
        return title + "\n" + _align(head, rows, left={0})

    def to_saebench(
        self,
        *,
        eval_id: str | None = None,
        datetime_epoch_millis: int | None = None,
        sae_lens_id: str | None = None,
        sae_lens_release_id: str | None = None,
        sae_lens_version: str | None = None,
        sae_cfg_dict: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The comparison as one SAEBench eval output (`sae_bench.evals.base_eval_output`): the
        settings in `eval_config`; in `eval_result_metrics` one category per explainer, a flat
        object of numbers (m_mean, m_median, m_ci_low, m_ci_high, m_n_units, m_nan, m_rank per
        metric, and the coverage counts); the differences in `eval_result_details`; the
        baselines' definitions, the rankings and the dead units in `eval_result_unstructured`.
        Undefined values are null. `eval_id` defaults to a fresh UUID, the time to now, and
        `sae_bench_commit_hash` is "Unknown" (SAEBench's own value outside its repository).

        Examples
        --------
        >>> import numpy as np, polars as pl
        >>> from neuroneval.compare import compare
        >>> rng = np.random.default_rng(0)
        >>> table = pl.DataFrame({"unit": [0, 1], "explainer": ["a", "a"], "explanation": ["x", "y"]})
        >>> r = compare(rng.normal(size=(50, 2)), table, rng.random((50, 2)), metrics="f1", n_boot=10)
        >>> doc = r.to_saebench(eval_id="demo")
        >>> doc["eval_type_id"], sorted(doc["eval_result_metrics"])
        ('neuroneval_explainer_comparison', ['a', 'baseline:random', 'baseline:shuffled'])
        """
        s = self.settings
        categories: dict[str, dict[str, float | int | None]] = {}
        for r in self.summary.iter_rows(named=True):
            flat: dict[str, float | int | None] = {
                k: r[k] for k in ("units_total", "units_explained", "units_unexplained", "units_dead", "pairs_with_nan")
            }
            for m in self.metrics:
                flat |= {
                    f"{m}_mean": _json_number(r[f"{m}_mean"]),
                    f"{m}_median": _json_number(r[f"{m}_median"]),
                    f"{m}_ci_low": _json_number(r[f"{m}_ci_low"]),
                    f"{m}_ci_high": _json_number(r[f"{m}_ci_high"]),
                    f"{m}_n_units": r[f"{m}_n"],
                    f"{m}_nan": r[f"{m}_nan"],
                    f"{m}_rank": r[f"{m}_rank"],
                }
            categories[r["explainer"]] = flat
        details = [{k: _json_number(v) for k, v in d.items()} for d in self.differences.iter_rows(named=True)]
        config = {
            k: s[k] for k in ("metrics", "explainers", "alpha", "n_boot", "confidence", "seed", "n_inputs", "n_units")
        }
        config |= {
            "baselines": list(s["baselines"]),
            "n_explanations": s["n_explanations"],
            "interval": "percentile bootstrap over units (paired for differences)",
            "neuroneval_version": _version(),
        }
        return {
            "eval_type_id": EVAL_TYPE_ID,
            "eval_config": config,
            "eval_id": str(uuid.uuid4()) if eval_id is None else str(eval_id),
            "datetime_epoch_millis": int(time.time() * 1000)
            if datetime_epoch_millis is None
            else int(datetime_epoch_millis),
            "eval_result_metrics": categories,
            "eval_result_details": details,
            "eval_result_unstructured": {
                "baselines": dict(s["baselines"]),
                "ranking": {m: self.summary.sort(f"{m}_rank")["explainer"].to_list() for m in self.metrics},
                "dead_units": list(s["dead_units"]),
            },
            "sae_bench_commit_hash": "Unknown",
            "sae_lens_id": sae_lens_id,
            "sae_lens_release_id": sae_lens_release_id,
            "sae_lens_version": sae_lens_version,
            "sae_cfg_dict": sae_cfg_dict,
        }

    def write(self, directory: str | os.PathLike[str], **saebench: Any) -> list[Path]:
        """Write `COMPARISON_FILES` into `directory` (created if needed), all or none: the pairs
        (parquet), the summary and the differences (CSV, NaN written as NaN), the settings
        (comparison.json) and `to_saebench(**saebench)` (JSON). Returns the paths.

        Examples
        --------
        >>> import numpy as np, polars as pl, tempfile
        >>> from neuroneval.compare import compare
        >>> rng = np.random.default_rng(0)
        >>> table = pl.DataFrame({"unit": [0, 1], "explainer": ["a", "a"], "explanation": ["x", "y"]})
        >>> r = compare(rng.normal(size=(50, 2)), table, rng.random((50, 2)), metrics="f1", n_boot=10)
        >>> sorted(p.name for p in r.write(tempfile.mkdtemp()))
        ['comparison.json', 'differences.csv', 'pairs.parquet', 'saebench_eval.json', 'summary.csv']
        """
        config = json.dumps({"format": COMPARISON_FORMAT, "version": 1, **self.settings}, indent=1, allow_nan=False)
        document = json.dumps(self.to_saebench(**saebench), indent=2, allow_nan=False)
        files: dict[str, Callable[[Path], object]] = {
            COMPARISON_FILES["pairs"]: self.pairs.write_parquet,
            COMPARISON_FILES["summary"]: self.summary.write_csv,
            COMPARISON_FILES["differences"]: self.differences.write_csv,
            COMPARISON_FILES["config"]: lambda p: p.write_text(config + "\n", encoding="utf-8"),
            COMPARISON_FILES["saebench"]: lambda p: p.write_text(document + "\n", encoding="utf-8"),
        }
        return write_files_atomic(directory, files)


def _number(v: float) -> str:
    return "NaN" if math.isnan(v) else f"{v:.3f}"


def _json_number(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _version() -> str:
    try:
        return importlib.metadata.version("neuroneval")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


def _align(head: list[str], rows: list[list[str]], *, left: set[int]) -> str:
    """Rows as text columns: those in `left` left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in [head, *rows]
    )
