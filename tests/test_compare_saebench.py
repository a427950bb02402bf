"""The SAEBench eval output of `neuroneval.compare` in SAEBench's terms.

sae-bench 0.6.0 does not install cleanly here (it pins numpy < 2 and would downgrade numpy and
datasets), so its classes are rebuilt from its code (adamkarvonen/SAEBench at
8042bb3828c6340da8d12062324e92b2077c571c, read with `fetch`), step by step:

- ``sae_bench/evals/base_eval_output.py``: `BaseEvalOutput`'s 12 fields and their types, the
  range check of ``datetime_epoch_millis``; `BaseMetrics` refuses a nested object;
  `BaseMetricCategories` holds only `BaseMetrics`; all are pydantic dataclasses, so a category or
  metric is a dataclass field (a Python identifier) and a ``float`` field refuses null. An eval
  declares its own subclasses (``sae_bench/evals/*/eval_output.py``); those for a comparison are
  built below from its settings, the way ``autointerp/eval_output.py`` declares its own.
- ``sae_bench/sae_bench_utils/testing_utils.py``: a file is valid when
  ``TypeAdapter(EvalOutput).validate_json(text)`` accepts it.
- ``BaseEvalOutput.to_json_file``: ``json.dump(asdict(self), f, indent=2, default=str)``.
- ``sae_bench/sae_bench_utils/general_utils.py`` ``get_results_filepath`` names the file
  ``{release}_{sae_id}_eval_results.json`` with ``/`` made ``_``; ``graphing_utils.py``
  ``get_eval_results`` keys a result by that name and reads ``eval_config``,
  ``sae_cfg_dict["architecture"]``, ``["d_sae"]`` and, if present, ``["training_tokens"]``.

The SAE's config is the ``cfg.json`` that SAE Lens (a dev dependency) itself writes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from neuroneval.compare import (
    BASELINE_RANDOM,
    COMPARISON_FILES,
    Comparison,
    compare,
    read_sae_config,
    saebench_categories,
    saebench_file_name,
)
from neuroneval.errors import ParameterError, SourceError

pydantic = pytest.importorskip("pydantic")
pydantic_dataclass = pytest.importorskip("pydantic.dataclasses").dataclass

RELEASE, SAE_ID = "gemma-scope-2b-pt-res", "layer_20/width_16k/average_l0_71"
CFG = {"architecture": "jumprelu", "d_sae": 16384, "d_in": 2304, "training_tokens": 4_000_000}


@pytest.fixture(scope="module")
def result() -> Comparison:
    """Explainer names that are not identifiers, a dead unit, a constant concept and an explainer
    whose only unit is dead (NaN means and intervals)."""
    rng = np.random.default_rng(0)
    n, k = 400, 6
    truth = (rng.random((n, k)) < 0.2).astype(float)
    acts = truth + 0.5 * rng.normal(size=truth.shape)
    acts[:, 3] = 1.0
    good = np.clip(truth + 0.2 * rng.normal(size=truth.shape), 0, 1)
    good[:, 2] = 0.3
    table = pl.DataFrame(
        {
            "unit": [*range(k), *range(k), 3],
            "explainer": ["llm:gpt-4o"] * k + ["top tokens"] * k + ["class"],
            "explanation": [f"concept {j}" for j in range(k)] + ["something"] * k + ["flat"],
        }
    )
    concepts = np.hstack([good, rng.random(truth.shape), rng.random((n, 1))])
    return compare(acts, table, concepts, alpha=0.05, n_boot=100)


# --------------------------------------------------------------------------- SAEBench's classes, rebuilt


def _flat(self: Any) -> Any:
    for value in dataclasses.asdict(self).values():
        if isinstance(value, dict):
            raise ValueError("Metrics is designed to be a flat, one-level structure, so dicts are not allowed.")
    return self


def _epoch(value: int) -> int:
    if not 0 <= value <= 9999999999999:
        raise ValueError("Unix time out of range")
    return value


def saebench_classes(settings: dict[str, Any]) -> type:
    """The eval output class an ``eval_output.py`` would declare for a comparison with these
    settings (its config, one BaseMetrics per explainer, its result detail)."""
    dc, field, validator = pydantic_dataclass, pydantic.Field, pydantic.model_validator
    config = dc(
        type(
            "ComparisonConfig",
            (),
            {
                "__annotations__": {
                    "metrics": list[str],
                    "explainers": list[str],
                    "alpha": float,
                    "n_boot": int,
                    "confidence": float,
                    "seed": int,
                    "n_inputs": int,
                    "n_units": int,
                    "baselines": list[str],
                    "n_explanations": int,
                    "interval": str,
                    "neuroneval_version": str,
                }
            },
        )
    )
    fields: dict[str, Any] = dict.fromkeys(
        ("units_total", "units_explained", "units_unexplained", "units_dead", "pairs_with_nan"), int
    )
    for m in settings["metrics"]:
        fields |= {f"{m}_{s}": float for s in ("mean", "median", "ci_low", "ci_high")}
        fields |= {f"{m}_{s}": int for s in ("n_units", "nan", "rank")}
    metrics = dc(type("ExplainerMetrics", (), {"__annotations__": fields, "flat": validator(mode="after")(_flat)}))

    def every_category_is_metrics(self: Any) -> Any:
        for name, value in vars(self).items():
            if not isinstance(value, metrics):
                raise ValueError(f"Field '{name}' must inherit from BaseMetrics.")
        return self

    categories = dataclasses.make_dataclass(  # refuses a name that is not an identifier, as a class body would
        "ComparisonCategories",
        [(c, metrics) for c in saebench_categories(settings["explainers"]).values()],
        namespace={"check": validator(mode="after")(every_category_is_metrics)},
    )
    categories = dc(categories)
    detail = dc(
        type(
            "DifferenceDetail",
            (),
            {
                "__annotations__": {
                    "explainer_a": str,
                    "explainer_b": str,
                    "metric": str,
                    "n_units": int,
                    "mean_difference": float,
                    "ci_low": float,
                    "ci_high": float,
                    "win_rate": float,
                    "tie_rate": float,
                }
            },
        )
    )
    output = {  # BaseEvalOutput's fields, in its order, with the eval's own types
        "eval_type_id": (str, field(default="neuroneval_explainer_comparison")),
        "eval_config": (config, field()),
        "eval_id": (str, field()),
        "datetime_epoch_millis": (int, field()),
        "eval_result_metrics": (categories, field()),
        "eval_result_details": (list[detail], field(None)),  # type: ignore[valid-type]
        "sae_bench_commit_hash": (str, field()),
        "sae_lens_id": (str | None, field()),
        "sae_lens_release_id": (str | None, field()),
        "sae_lens_version": (str | None, field()),
        "sae_cfg_dict": (dict[str, Any] | None, field()),
        "eval_result_unstructured": (Any | None, field(default=None)),
    }
    cls = type(
        "ComparisonEvalOutput",
        (),
        {
            "__annotations__": {k: t for k, (t, _) in output.items()},
            **{k: f for k, (_, f) in output.items()},
            "epoch": pydantic.field_validator("datetime_epoch_millis")(_epoch),
        },
    )
    return dc(cls)  # type: ignore[no-any-return]


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


def test_saebench_classes_load_the_file_and_keep_every_value(result: Comparison, tmp_path: Path) -> None:
    written = result.write(tmp_path, sae_lens_release_id=RELEASE, sae_lens_id=SAE_ID, sae_cfg_dict=CFG)
    path = tmp_path / f"{RELEASE}_{SAE_ID.replace('/', '_')}_eval_results.json"
    assert path in written and not (tmp_path / COMPARISON_FILES["saebench"]).exists()
    text = path.read_text()
    assert "NaN" in text and "null" in text  # NaN in float fields; null only where SAEBench allows it
    cls = saebench_classes(result.settings)
    loaded = pydantic.TypeAdapter(cls).validate_json(text)  # testing_utils.validate_eval_output_format_str
    document = json.loads(text)
    assert same(dataclasses.asdict(loaded), document)  # nothing dropped, nothing changed
    assert json.dumps(dataclasses.asdict(loaded), indent=2, default=str) + "\n" == text  # to_json_file's bytes
    categories = document["eval_result_unstructured"]["categories"]
    assert categories == {
        "llm_gpt_4o": "llm:gpt-4o",
        "top_tokens": "top tokens",
        "class_": "class",
        "baseline_random": BASELINE_RANDOM,
        "baseline_shuffled": "baseline:shuffled",
    }
    assert math.isnan(loaded.eval_result_metrics.class_.correlation_mean)  # its only unit is dead
    # What SAEBench's classes refuse: null in a float field, a time out of range, a nested metric.
    for bad in (
        text.replace("NaN", "null", 1),
        text.replace('"datetime_epoch_millis": ', '"datetime_epoch_millis": 1', 1),
    ):
        with pytest.raises(pydantic.ValidationError):
            pydantic.TypeAdapter(cls).validate_json(bad)
    nested = json.loads(text)
    nested["eval_result_metrics"]["top_tokens"]["correlation_mean"] = {"a": 1.0}
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(cls).validate_python(nested)
    # Explainer names as categories (the old file's) cannot even be declared as fields.
    with pytest.raises(TypeError, match="valid identifiers"):
        dataclasses.make_dataclass("Categories", [(BASELINE_RANDOM, float)])


def test_category_names_are_distinct_identifiers() -> None:
    names = ["a b", "a-b", "a_b", "9lives", "", "__x__", "None", "validate_base_metric_type", "ünïcode", "x" * 3]
    got = saebench_categories(names)
    assert list(got) == names
    assert list(got.values()) == [
        "a_b",
        "a_b_2",
        "a_b_3",
        "explainer_9lives",
        "explainer",
        "x",
        "None_",
        "validate_base_metric_type_",
        "n_code",
        "xxx",
    ]
    for category in got.values():
        dataclasses.make_dataclass("C", [(category, int)])  # each a valid field name
    assert len(set(got.values())) == len(names)


def test_the_results_reader_reads_the_file(result: Comparison, tmp_path: Path) -> None:
    """graphing_utils.get_eval_results, step by step, on our file (the part common to every eval)."""
    result.write(tmp_path, sae_lens_release_id=RELEASE, sae_lens_id=SAE_ID, sae_cfg_dict=CFG)
    files = [p for p in tmp_path.iterdir() if "eval_results.json" in p.name]  # find_eval_results_files
    assert [p.name for p in files] == [saebench_file_name(RELEASE, SAE_ID)]
    # get_results_filepath(output_path, sae_release, sae_id)
    assert files[0].name == f"{RELEASE}_{SAE_ID}_eval_results.json".replace("/", "_")
    single = json.loads(files[0].read_text())
    key = files[0].name.replace("_eval_results.json", "")
    sae_config = single["sae_cfg_dict"]
    entry = {"eval_config": single["eval_config"], "sae_class": sae_config["architecture"]}
    entry["d_sae"] = f"{round(sae_config['d_sae'] / 1000) * 1000 // 1000}k"  # get_d_sae_string
    entry["train_tokens"] = sae_config.get("training_tokens", 1e-6)
    assert key == "gemma-scope-2b-pt-res_layer_20_width_16k_average_l0_71"
    assert entry == {"eval_config": single["eval_config"], "sae_class": "jumprelu", "d_sae": "16k", "train_tokens": 4e6}
    assert (single["sae_lens_release_id"], single["sae_lens_id"]) == (RELEASE, SAE_ID)


def test_read_sae_config_reads_sae_lens_cfg_json(tmp_path: Path) -> None:
    sae_lens = pytest.importorskip("sae_lens")
    sae = sae_lens.StandardSAE(sae_lens.StandardSAEConfig(d_in=8, d_sae=24))
    sae.save_model(str(tmp_path / "sae"))
    written = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert read_sae_config(tmp_path / "sae" / "cfg.json") == written
    assert read_sae_config(tmp_path / "sae") == written  # the SAE's directory
    assert (written["architecture"], written["d_sae"]) == ("standard", 24)
    (tmp_path / "bad.json").write_text(json.dumps({"d_in": 8}))
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "empty").mkdir()
    cases: list[tuple[Path, type[Exception], str]] = [
        (tmp_path / "bad.json", ParameterError, "lacks 'architecture' and 'd_sae'"),
        (tmp_path / "list.json", ParameterError, "must be a JSON object"),
        (tmp_path / "broken.json", SourceError, "is not valid JSON"),
        (tmp_path / "missing.json", SourceError, "cannot read"),
        (tmp_path / "empty", SourceError, "a directory without cfg.json"),
    ]
    for path, error, message in cases:
        with pytest.raises(error, match=message):
            read_sae_config(path)
