"""`Comparison`: the tables `compare` returns, the ranking as text, the SAEBench eval output
and the files `write` writes.

The SAEBench eval output follows SAEBench's own classes (``sae_bench/evals/base_eval_output.py``
and an eval's ``eval_output.py``, which pydantic validates): metric categories are fields of a
dataclass, so each explainer's category is a Python identifier (`saebench_categories`); a
metric is a ``float`` field, which rejects null, so an undefined value is NaN, written as
SAEBench's ``to_json_file`` writes it (Python's ``json``: the literal ``NaN``); the file is
named as SAEBench's ``get_results_filepath`` names it (`saebench_file_name`), and its
results reader reads ``sae_cfg_dict["architecture"]`` and ``["d_sae"]`` (`read_sae_config`).
"""

from __future__ import annotations

import importlib.metadata
import json
import keyword
import math
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import ParameterError, SourceError
from ..files import read_json, write_files_atomic

__all__ = [
    "COMPARISON_FILES",
    "COMPARISON_FORMAT",
    "EVAL_TYPE_ID",
    "Comparison",
    "read_sae_config",
    "saebench_categories",
    "saebench_file_name",
]

#: `eval_type_id` of the SAEBench-shaped output.
EVAL_TYPE_ID = "neuroneval_explainer_comparison"
#: What `Comparison.write` writes: the three tables, the settings (`comparison.json`, which
#: marks a comparison directory) and the SAEBench eval output (named
#: ``{release}_{sae_id}_eval_results.json`` instead when the SAE's release and id are given,
#: `saebench_file_name`).
COMPARISON_FILES = {
    "pairs": "pairs.parquet",
    "summary": "summary.csv",
    "differences": "differences.csv",
    "config": "comparison.json",
    "saebench": "saebench_eval.json",
}
#: The `format` tag of comparison.json.
COMPARISON_FORMAT = "neuroneval-comparison"


#: Names a metric category may not take: Python's keywords (a dataclass field cannot be one)
#: and the validator of SAEBench's ``BaseMetricCategories``, which a field would hide.
_RESERVED_CATEGORIES = {"validate_base_metric_type"}


def saebench_categories(explainers: list[str]) -> dict[str, str]:
    """Each explainer's metric category in the SAEBench eval output: its name as a Python
    identifier (SAEBench's categories are the fields of a dataclass): every run of characters
    other than ASCII letters and digits becomes ``_``, a name that does not start with a letter
    is prefixed ``explainer_``, a keyword gets a trailing ``_``, and a name already taken gets
    ``_2``, ``_3``, ... (in the order given).

    Examples
    --------
    >>> saebench_categories(["llm:gpt-4o", "top tokens", "class", "llm_gpt_4o", "baseline:random"])
    {'llm:gpt-4o': 'llm_gpt_4o', 'top tokens': 'top_tokens', 'class': 'class_', 'llm_gpt_4o': 'llm_gpt_4o_2', 'baseline:random': 'baseline_random'}
    """
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in explainers:
        base = re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")
        if not base[:1].isalpha():
            base = f"explainer_{base}".rstrip("_")
        if keyword.iskeyword(base) or base in _RESERVED_CATEGORIES:
            base += "_"
        category, i = base, 1
        while category in taken:
            i += 1
            category = f"{base}_{i}"
        taken.add(category)
        out[name] = category
    return out


def saebench_file_name(sae_lens_release_id: str | None = None, sae_lens_id: str | None = None) -> str:
    """The name `Comparison.write` gives the SAEBench eval output: SAEBench's own,
    ``{release}_{sae_id}_eval_results.json`` with every ``/`` made ``_``
    (``sae_bench_utils.general_utils.get_results_filepath``; its results reader takes the SAE's
    key from it), when both are given; else ``saebench_eval.json``.

    Examples
    --------
    >>> saebench_file_name("gemma-scope-2b-pt-res", "layer_20/width_16k/average_l0_71")
    'gemma-scope-2b-pt-res_layer_20_width_16k_average_l0_71_eval_results.json'
    >>> saebench_file_name()
    'saebench_eval.json'
    """
    _check_sae_ids(sae_lens_release_id, sae_lens_id)
    if sae_lens_release_id is None or sae_lens_id is None:
        return COMPARISON_FILES["saebench"]
    return f"{sae_lens_release_id}_{sae_lens_id}_eval_results.json".replace("/", "_")


def _check_sae_ids(release: Any, sae_id: Any) -> None:
    for value, name in ((release, "sae_lens_release_id"), (sae_id, "sae_lens_id")):
        if value is not None and (not isinstance(value, str) or not value.strip() or "\x00" in value):
            raise ParameterError(f"{name} must be a non-empty text; got {value!r}")
    if (release is None) != (sae_id is None):
        raise ParameterError(
            "give both the SAE's release (sae_lens_release_id) and its id (sae_lens_id), or neither: SAEBench "
            "names its results file {release}_{sae_id}_eval_results.json"
        )


def _check_sae_cfg(cfg: Any, where: str) -> dict[str, Any]:
    """An SAE's config as SAEBench's results reader needs it: an object with a text
    ``architecture`` and a positive integer ``d_sae``."""
    if not isinstance(cfg, dict):
        raise ParameterError(f"{where} must be a JSON object (the SAE's config); got {type(cfg).__name__}")
    missing = [k for k in ("architecture", "d_sae") if k not in cfg]
    if missing:
        raise ParameterError(
            f"{where} lacks {' and '.join(repr(k) for k in missing)}, which SAEBench's results reader reads "
            "(SAE Lens's cfg.json has both)"
        )
    if not isinstance(cfg["architecture"], str) or not cfg["architecture"]:
        raise ParameterError(f"{where}'s 'architecture' must be a non-empty text; got {cfg['architecture']!r}")
    d_sae = cfg["d_sae"]
    if isinstance(d_sae, bool) or not isinstance(d_sae, int) or d_sae < 1:
        raise ParameterError(f"{where}'s 'd_sae' must be a positive integer (the SAE's latents); got {d_sae!r}")
    return cfg


def read_sae_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """An SAE's config for the SAEBench eval output's ``sae_cfg_dict``: a JSON file (SAE Lens's
    ``cfg.json``), or a directory holding ``cfg.json`` (an SAE Lens SAE's), checked to hold
    what SAEBench's results reader reads: ``architecture`` (text) and ``d_sae`` (a positive
    integer).

    Raises
    ------
    SourceError
        The file is missing or not JSON.
    ParameterError
        It is not an object, or lacks (or has a bad) ``architecture`` or ``d_sae``.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "cfg.json"
        if not p.is_file():
            raise SourceError(f"{path} is a directory without cfg.json (an SAE Lens SAE's config)")
    return _check_sae_cfg(read_json(p), str(p))


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
        """The comparison as one SAEBench eval output (the 12 fields of
        `sae_bench.evals.base_eval_output.BaseEvalOutput`), shaped so that SAEBench's classes for
        it keep every value (module docstring): the settings in `eval_config` (fixed fields);
        in `eval_result_metrics` one category per explainer, named by `saebench_categories`, a
        flat object of numbers (the coverage counts and, per metric m, m_mean, m_median,
        m_ci_low, m_ci_high, m_n_units, m_nan, m_rank); the differences in
        `eval_result_details`; in `eval_result_unstructured` the categories' explainers, the
        baselines' definitions, the rankings and the dead units. An undefined value is NaN.
        `eval_id` defaults to a fresh UUID, the time to now, and `sae_bench_commit_hash` is
        "Unknown" (SAEBench's own value outside its repository). The SAE fields are null
        unless given: the release and id both or neither, `sae_cfg_dict` with the
        ``architecture`` and ``d_sae`` that SAEBench's results reader reads.

        Examples
        --------
        >>> import numpy as np, polars as pl
        >>> from neuroneval.compare import compare
        >>> rng = np.random.default_rng(0)
        >>> table = pl.DataFrame({"unit": [0, 1], "explainer": ["a", "a"], "explanation": ["x", "y"]})
        >>> r = compare(rng.normal(size=(50, 2)), table, rng.random((50, 2)), metrics="f1", alpha=0.2, n_boot=10)
        >>> doc = r.to_saebench(eval_id="demo")
        >>> doc["eval_type_id"], sorted(doc["eval_result_metrics"])
        ('neuroneval_explainer_comparison', ['a', 'baseline_random', 'baseline_shuffled'])
        """
        _check_sae_ids(sae_lens_release_id, sae_lens_id)
        if sae_cfg_dict is not None:
            _check_sae_cfg(sae_cfg_dict, "sae_cfg_dict")
        if sae_lens_version is not None and not isinstance(sae_lens_version, str):
            raise ParameterError(f"sae_lens_version must be a text; got {sae_lens_version!r}")
        s = self.settings
        names = saebench_categories(self.explainers)
        categories: dict[str, dict[str, float | int]] = {}
        for r in self.summary.iter_rows(named=True):
            flat: dict[str, float | int] = {
                k: r[k] for k in ("units_total", "units_explained", "units_unexplained", "units_dead", "pairs_with_nan")
            }
            for m in self.metrics:
                flat |= {
                    f"{m}_mean": float(r[f"{m}_mean"]),
                    f"{m}_median": float(r[f"{m}_median"]),
                    f"{m}_ci_low": float(r[f"{m}_ci_low"]),
                    f"{m}_ci_high": float(r[f"{m}_ci_high"]),
                    f"{m}_n_units": r[f"{m}_n"],
                    f"{m}_nan": r[f"{m}_nan"],
                    f"{m}_rank": r[f"{m}_rank"],
                }
            categories[names[r["explainer"]]] = flat
        details = list(self.differences.iter_rows(named=True))
        config = {
            k: s[k] for k in ("metrics", "explainers", "alpha", "n_boot", "confidence", "seed", "n_inputs", "n_units")
        }
        config |= {
            "baselines": list(s["baselines"]),
            "n_explanations": s["n_explanations"],
            "interval": "percentile bootstrap over units (paired for differences)",
            "neuroneval_version": _version(),
        }
        return {  # BaseEvalOutput's fields, in its order (as `dataclasses.asdict` writes them)
            "eval_type_id": EVAL_TYPE_ID,
            "eval_config": config,
            "eval_id": str(uuid.uuid4()) if eval_id is None else str(eval_id),
            "datetime_epoch_millis": int(time.time() * 1000)
            if datetime_epoch_millis is None
            else int(datetime_epoch_millis),
            "eval_result_metrics": categories,
            "eval_result_details": details,
            "sae_bench_commit_hash": "Unknown",
            "sae_lens_id": sae_lens_id,
            "sae_lens_release_id": sae_lens_release_id,
            "sae_lens_version": sae_lens_version,
            "sae_cfg_dict": sae_cfg_dict,
            "eval_result_unstructured": {
                "categories": {category: name for name, category in names.items()},
                "baselines": dict(s["baselines"]),
                "ranking": {m: self.summary.sort(f"{m}_rank")["explainer"].to_list() for m in self.metrics},
                "dead_units": list(s["dead_units"]),
            },
        }

    def write(self, directory: str | os.PathLike[str], **saebench: Any) -> list[Path]:
        """Write `COMPARISON_FILES` into `directory` (created if needed), all or none: the pairs
        (parquet), the summary and the differences (CSV, NaN written as NaN), the settings
        (comparison.json, strict JSON) and `to_saebench(**saebench)` as SAEBench writes its
        eval outputs (Python's ``json``, NaN as ``NaN``), named `saebench_file_name` of the
        SAE's release and id. Returns the paths.

        Examples
        --------
        >>> import numpy as np, polars as pl, tempfile
        >>> from neuroneval.compare import compare
        >>> rng = np.random.default_rng(0)
        >>> table = pl.DataFrame({"unit": [0, 1], "explainer": ["a", "a"], "explanation": ["x", "y"]})
        >>> r = compare(rng.normal(size=(50, 2)), table, rng.random((50, 2)), metrics="f1", alpha=0.2, n_boot=10)
        >>> sorted(p.name for p in r.write(tempfile.mkdtemp()))
        ['comparison.json', 'differences.csv', 'pairs.parquet', 'saebench_eval.json', 'summary.csv']
        >>> cfg = {"architecture": "topk", "d_sae": 2}
        >>> sorted(p.name for p in r.write(tempfile.mkdtemp(), sae_lens_release_id="mine", sae_lens_id="l3/16k", sae_cfg_dict=cfg))
        ['comparison.json', 'differences.csv', 'mine_l3_16k_eval_results.json', 'pairs.parquet', 'summary.csv']
        """
        config = json.dumps({"format": COMPARISON_FORMAT, "version": 1, **self.settings}, indent=1, allow_nan=False)
        # SAEBench's BaseEvalOutput.to_json_file: json.dump(asdict(self), f, indent=2, default=str)
        document = json.dumps(self.to_saebench(**saebench), indent=2, default=str)
        name = saebench_file_name(saebench.get("sae_lens_release_id"), saebench.get("sae_lens_id"))
        files: dict[str, Callable[[Path], object]] = {
            COMPARISON_FILES["pairs"]: self.pairs.write_parquet,
            COMPARISON_FILES["summary"]: self.summary.write_csv,
            COMPARISON_FILES["differences"]: self.differences.write_csv,
            COMPARISON_FILES["config"]: lambda p: p.write_text(config + "\n", encoding="utf-8"),
            name: lambda p: p.write_text(document + "\n", encoding="utf-8"),
        }
        return write_files_atomic(directory, files)


def _number(v: float) -> str:
    return "NaN" if math.isnan(v) else f"{v:.3f}"


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
