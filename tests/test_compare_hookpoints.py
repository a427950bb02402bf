"""`compare` on a delphi run whose ``explanations/`` holds several hookpoints, each numbered from
latent 0: one hookpoint is compared, the one chosen (`module=`, ``--module``), else the one whose
latent cache is the activations (``latents/{hookpoint}``); none chosen is one error that lists them.

The run is laid out as delphi writes it (EleutherAI/delphi at 3c2e1393, read with `fetch`):
``delphi/__main__.py`` caches each hookpoint's latents in ``latents/{hookpoint}`` and its
``explainer_postprocess`` writes ``explanations/{record.latent}.txt`` as ``orjson.dumps`` of the
explanation, ``record.latent`` being ``{module_name}_latent{latent_index}``
(``delphi/latents/latents.py``); the latent splits are written by `write_delphi_cache`, which
tests/test_interop_delphi.py checks against delphi's ``save_splits`` layout.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_helpers import assert_one_line_error, run
from neuroneval.compare import COMPARISON_FILES, HookpointChoiceError, activations_hookpoint, compare
from neuroneval.errors import ParameterError, SourceError
from neuroneval.interop.delphi import write_delphi_cache

N_SEQ, CTX, WIDTH = 30, 8, 6
N = N_SEQ * CTX
HOOKPOINTS = ("layers.6.mlp", "layers.8.mlp")
KW = {"alpha": 0.05, "n_boot": 50}  # a top set of 12 inputs


@pytest.fixture(scope="module")
def delphi_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """results/run: latents and explanations of two hookpoints (latents 0..5 of each), and per
    hookpoint its activations and the concepts of its explanations (in latent order)."""
    root = tmp_path_factory.mktemp("results") / "run"
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 1000, size=(N_SEQ, CTX))
    out: dict[str, object] = {"root": root}
    (root / "explanations").mkdir(parents=True)
    for h, hookpoint in enumerate(HOOKPOINTS):
        present = rng.random((N, WIDTH)) < 0.25
        acts = np.where(present, rng.uniform(0.5, 3.0, (N, WIDTH)), 0.0).astype(np.float16).astype(np.float32)
        write_delphi_cache(root / "latents" / hookpoint, acts, tokens=tokens, n_splits=2)
        for latent in range(WIDTH):
            text = f"hookpoint {h} latent {latent}"
            (root / "explanations" / f"{hookpoint}_latent{latent}.txt").write_bytes(json.dumps(text).encode())
        concepts = np.clip(present + 0.3 * rng.normal(size=(N, WIDTH)), 0, 1)
        np.save(root / f"concepts-{hookpoint}.npy", concepts)
        np.save(root / f"acts-{hookpoint}.npy", acts)
        out[hookpoint] = (acts, concepts)
    return out


def by_hand(run_: dict[str, object], hookpoint: str) -> tuple[np.ndarray, pl.DataFrame, np.ndarray]:
    acts, concepts = run_[hookpoint]  # type: ignore[misc]
    h = HOOKPOINTS.index(hookpoint)
    table = pl.DataFrame(
        {
            "unit": list(range(WIDTH)),
            "explainer": ["run/explanations"] * WIDTH,
            "explanation": [f"hookpoint {h} latent {k}" for k in range(WIDTH)],
        }
    )
    return acts, table, concepts


def test_the_hookpoint_of_the_activations_or_the_one_chosen(delphi_run: dict[str, object]) -> None:
    root: Path = delphi_run["root"]  # type: ignore[assignment]
    explanations = root / "explanations"
    for hookpoint in HOOKPOINTS:
        expected = compare(*by_hand(delphi_run, hookpoint), **KW)
        concepts = root / f"concepts-{hookpoint}.npy"
        cache = root / "latents" / hookpoint
        assert activations_hookpoint(cache) == hookpoint
        for got in (
            compare(cache, explanations, concepts, **KW),  # the cache names its hookpoint
            compare(root / f"acts-{hookpoint}.npy", explanations, concepts, module=hookpoint, **KW),
            compare(cache, explanations, concepts, module=hookpoint, **KW),
        ):
            assert got.summary.equals(expected.summary) and got.differences.equals(expected.differences)
    assert activations_hookpoint(root / "latents") is None and activations_hookpoint(np.zeros((2, 2))) is None


def test_several_hookpoints_and_none_chosen_is_one_error_listing_them(delphi_run: dict[str, object]) -> None:
    root: Path = delphi_run["root"]  # type: ignore[assignment]
    explanations, concepts = root / "explanations", root / "concepts-layers.6.mlp.npy"
    with pytest.raises(HookpointChoiceError) as caught:
        compare(root / "acts-layers.6.mlp.npy", explanations, concepts, **KW)
    assert isinstance(caught.value, ParameterError) and caught.value.hookpoints == list(HOOKPOINTS)
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)
    assert str(caught.value) == (
        f"{explanations} holds the explanations of 2 hookpoints (layers.6.mlp, layers.8.mlp) and the activations "
        "name none of them (a delphi latent cache directory names its hookpoint); choose one with module="
    )
    # A cache of another hookpoint.
    other = root / "other" / "layers.10.mlp"
    write_delphi_cache(other, delphi_run["layers.6.mlp"][0], tokens=np.zeros((N_SEQ, CTX), dtype=np.int64), n_splits=1)  # type: ignore[index]
    with pytest.raises(HookpointChoiceError, match="the activations' hookpoint 'layers.10.mlp' is none of them"):
        compare(other, explanations, concepts, **KW)
    # A hookpoint that is not there; a module for a table without one; a module that is no name.
    with pytest.raises(SourceError, match="layers.7.mlp"):
        compare(root / "acts-layers.6.mlp.npy", explanations, concepts, module="layers.7.mlp", **KW)
    acts, table, concepts_array = by_hand(delphi_run, "layers.6.mlp")
    with pytest.raises(ParameterError, match="module='layers.6.mlp' chooses a hookpoint .* has no module column"):
        compare(acts, table, concepts_array, module="layers.6.mlp", **KW)
    for bad in ("", 6):
        with pytest.raises(ParameterError, match="module must be a hookpoint's name"):
            compare(acts, table, concepts_array, module=bad, **KW)  # type: ignore[arg-type]
    # A table with delphi's module column (read_delphi_explanations written to a file) is the same.
    two = pl.concat([table.with_columns(pl.lit(h).alias("module")) for h in HOOKPOINTS])
    with pytest.raises(HookpointChoiceError, match=r"the explanations table holds the explanations of 2 hookpoints"):
        compare(acts, two, concepts_array, **KW)
    with pytest.raises(SourceError, match="holds no explanations of hookpoint 'layers.7.mlp'; it holds layers.6.mlp"):
        compare(acts, two, concepts_array, module="layers.7.mlp", **KW)
    chosen = compare(acts, two, concepts_array, module="layers.8.mlp", **KW)
    assert chosen.summary.equals(compare(acts, table, concepts_array, **KW).summary)


def test_the_command_line(delphi_run: dict[str, object], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    root: Path = delphi_run["root"]  # type: ignore[assignment]
    explanations = root / "explanations"
    concepts = root / "concepts-layers.8.mlp.npy"
    expected = compare(*by_hand(delphi_run, "layers.8.mlp"), **KW)
    common = ["--concepts", concepts, "--alpha", 0.05, "--n-boot", 50, "--quiet"]
    for n, activations, extra in (
        (1, root / "latents" / "layers.8.mlp", []),
        (2, root / "acts-layers.8.mlp.npy", ["--module", "layers.8.mlp"]),
    ):
        out = tmp_path / f"out{n}"
        code, stdout, err = run(["compare", activations, explanations, *common, *extra, "--out", out], capfd)
        assert (code, stdout, err) == (0, "", "")
        assert pl.read_csv(out / COMPARISON_FILES["summary"]).equals(expected.summary)
    before = sorted(tmp_path.rglob("*"))
    code, stdout, err = run(
        ["compare", root / "acts-layers.8.mlp.npy", explanations, *common, "--out", tmp_path / "none"], capfd
    )
    assert stdout == ""
    assert_one_line_error(
        code,
        err,
        2,
        "holds the explanations of 2 hookpoints (layers.6.mlp, layers.8.mlp)",
        "choose one with --module HOOKPOINT",
    )
    code, _, err = run(
        ["compare", root / "latents" / "layers.8.mlp", explanations, "--module", "", "--out", "x"], capfd
    )
    assert_one_line_error(code, err, 2, "--module must not be empty")
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
