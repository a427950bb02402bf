"""The CLIP image judge (neuroneval.label.clip) on a tiny open_clip model built here: its scores
against open_clip computed directly, batching, the cache, errors, and checkpoint identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
open_clip = pytest.importorskip("open_clip")

from neuroneval.errors import ParameterError, SourceError  # noqa: E402
from neuroneval.label import ClipJudge, label  # noqa: E402

# A tiny CLIP: 32-pixel images in 8-pixel patches, two layers a tower, the standard 49408-token
# vocabulary and 77-token context, so open_clip's bundled tokenizer reads it.
TINY: dict[str, Any] = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
REFERENCE_NAME = "neuroneval-test-tiny-clip"


def _tiny_model(seed: int) -> Any:
    torch.manual_seed(seed)
    model = open_clip.CLIP(**json.loads(json.dumps(TINY)))
    # Non-default weights everywhere, so that every parameter matters to the scores.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def _save(model: Any, path: Path) -> Path:
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(_tiny_model(0), tmp_path_factory.mktemp("clip") / "tiny.pt")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> tuple[Any, Any, Any]:
    """The same checkpoint loaded by open_clip itself: (model, eval transform, tokenizer)."""
    folder = tmp_path_factory.mktemp("clip-config")
    config = folder / f"{REFERENCE_NAME}.json"
    config.write_text(json.dumps(TINY))
    open_clip.add_model_config(config)
    model, _, preprocess = open_clip.create_model_and_transforms(REFERENCE_NAME, pretrained=str(checkpoint))
    return model.eval(), preprocess, open_clip.get_tokenizer(REFERENCE_NAME)


def _images(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(32, 32), (40, 48), (64, 50), (33, 31), (20, 20)]
    out: list[np.ndarray] = []
    for i in range(n):
        h, w = shapes[i % len(shapes)]
        if i % 3 == 2:
            out.append(rng.random((h, w, 3)))  # float in [0, 1]
        else:
            out.append(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))
    return out


def _judge(checkpoint: Path, **options: Any) -> ClipJudge:
    return ClipJudge("tiny", checkpoint, config=TINY, **options)


def _scores(judge: ClipJudge, explanation: str, images: list[np.ndarray]) -> np.ndarray:
    out = np.full(len(images), np.nan)
    for done in judge.judge(explanation, images):
        out[done.positions] = done.scores
    return out


def test_scores_match_open_clip_directly(checkpoint: Path, reference: tuple[Any, Any, Any]) -> None:
    from PIL import Image

    model, preprocess, tokenizer = reference
    images = _images(6)
    explanations = ["dogs", "a red car", "the night sky"]
    judge = _judge(checkpoint)
    assert judge.name == "clip:tiny" and judge.input_kind == "image"
    got = np.stack([_scores(judge, e, images) for e in explanations], axis=1)

    pil = [Image.fromarray(a if a.dtype == np.uint8 else np.rint(a * 255).astype(np.uint8)) for a in images]
    with torch.no_grad():
        image = model.encode_image(torch.stack([preprocess(p) for p in pil]))
        text = model.encode_text(tokenizer([f"a photo of {e}." for e in explanations]))
        image = torch.nn.functional.normalize(image.double(), dim=-1)
        text = torch.nn.functional.normalize(text.double(), dim=-1)
        expected = (image @ text.T).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # Distinct explanations and images give distinct scores (the tiny model is not degenerate).
    assert np.unique(np.round(got, 6)).size == got.size


def test_batching_does_not_change_scores(checkpoint: Path) -> None:
    images = _images(10, seed=2)
    one = _judge(checkpoint, batch_size=1)
    seven = _judge(checkpoint, batch_size=7)
    for explanation in ["dogs", "cats"]:
        np.testing.assert_allclose(_scores(one, explanation, images), _scores(seven, explanation, images), atol=1e-6)
    a = label(one, images, ["dogs", "cats"], batch_size=3)
    b = label(seven, images, ["dogs", "cats"])
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)


def test_each_image_is_embedded_once_per_label_call(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    judge = _judge(checkpoint, batch_size=4)
    embedded: list[int] = []
    original = ClipJudge.embed_images

    def counting(self: ClipJudge, images: Any) -> np.ndarray:
        embedded.append(len(images))
        return original(self, images)

    monkeypatch.setattr(ClipJudge, "embed_images", counting)
    images = _images(5, seed=3)
    images = images + [images[0].copy()]  # a repeat: same pixels, same digest
    labels = label(judge, images, ["dogs", "cats", "a tree"])
    assert sum(embedded) == 5
    np.testing.assert_array_equal(labels.scores[5], labels.scores[0])
    # close() (label's last step) forgot the memo: a second call embeds again.
    embedded.clear()
    label(judge, images, ["dogs"])
    assert sum(embedded) == 5


def test_cache_rerun_makes_no_call(checkpoint: Path, tmp_path: Path) -> None:
    images = _images(8, seed=4)
    cache = tmp_path / "c.sqlite"
    first = label(_judge(checkpoint), images, ["dogs", "cats"], cache=cache)
    assert first.stats.calls == 16
    again = label(_judge(checkpoint), images, ["dogs", "cats"], cache=cache)
    assert again.stats.calls == 0 and again.stats.hits == 16
    np.testing.assert_array_equal(again.probabilities, first.probabilities)
    np.testing.assert_array_equal(again.scores, first.scores)
    assert np.all((first.probabilities >= 0) & (first.probabilities <= 1))


def test_changed_checkpoint_changes_identity(checkpoint: Path, tmp_path: Path) -> None:
    path = _save(_tiny_model(0), tmp_path / "weights.pt")
    old = _judge(path)
    old_identity = old.identity
    images = _images(4, seed=5)
    cache = tmp_path / "c.sqlite"
    first = label(old, images, ["dogs"], cache=cache)
    assert old.identity == old_identity  # the loaded weights are the file's
    assert path.name in old.model_fingerprint and str(path.stat().st_size) in old.model_fingerprint

    _save(_tiny_model(1), path)  # other weights, same path (and the same size)
    new = _judge(path)
    assert new.identity != old_identity
    second = label(new, images, ["dogs"], cache=cache)
    assert second.stats.calls == 4 and second.stats.hits == 0
    assert not np.allclose(second.scores, first.scores)
    # The judge that loaded the old weights keeps their identity.
    assert old.identity == old_identity


def test_same_weights_same_identity_other_config_other_identity(checkpoint: Path) -> None:
    a, b = _judge(checkpoint), _judge(checkpoint)
    assert a.identity == b.identity
    quick = dict(TINY, quick_gelu=True)
    assert ClipJudge("tiny", checkpoint, config=quick).identity != a.identity
    assert _judge(checkpoint, template="an image of {explanation}").identity != a.identity


def test_config_from_json_files(checkpoint: Path, tmp_path: Path) -> None:
    bare = tmp_path / "tiny.json"
    bare.write_text(json.dumps(TINY))
    wrapped = tmp_path / "open_clip_config.json"
    wrapped.write_text(
        json.dumps({"model_cfg": TINY, "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}})
    )
    images = _images(3, seed=6)
    base = _scores(_judge(checkpoint), "dogs", images)
    np.testing.assert_allclose(_scores(ClipJudge("tiny", checkpoint, config=bare), "dogs", images), base, atol=1e-6)
    other = ClipJudge("tiny", checkpoint, config=wrapped)
    assert not np.allclose(_scores(other, "dogs", images), base)  # its own normalisation


def test_safetensors_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    path = tmp_path / "tiny.safetensors"
    state = {k: v.contiguous() for k, v in torch.load(checkpoint, weights_only=True).items()}
    safetensors.save_file(state, str(path))
    images = _images(3, seed=7)
    np.testing.assert_allclose(
        _scores(ClipJudge("tiny", path, config=TINY), "dogs", images),
        _scores(_judge(checkpoint), "dogs", images),
        atol=1e-6,
    )


def test_missing_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "model.pt"
    with pytest.raises(SourceError, match="nowhere"):
        ClipJudge("ViT-B-32", path)
    with pytest.raises(SourceError, match="directory"):
        ClipJudge("ViT-B-32", tmp_path)


def test_corrupt_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.pt"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    judge = _judge(path)
    with pytest.raises(SourceError, match="corrupt.pt"):
        judge.prepare()
    with pytest.raises(SourceError, match="corrupt.pt"):
        label(judge, _images(2), ["dogs"])


def test_checkpoint_of_another_architecture(checkpoint: Path) -> None:
    wider = json.loads(json.dumps(TINY))
    wider["embed_dim"] = 48
    with pytest.raises(SourceError, match="tiny.pt"):
        ClipJudge("wider", checkpoint, config=wider).prepare()


def test_wrong_inputs(checkpoint: Path) -> None:
    judge = _judge(checkpoint)
    with pytest.raises(ParameterError, match="RGB images"):
        label(judge, ["a text", "another"], ["dogs"])
    with pytest.raises(ParameterError, match=r"\(H, W, 3\)"):
        label(judge, [np.zeros((32, 32), dtype=np.uint8)], ["dogs"])
    with pytest.raises(ParameterError, match=r"\[0, 1\]"):
        label(judge, [np.full((32, 32, 3), 2.0)], ["dogs"])
    with pytest.raises(ParameterError, match="NaN"):
        list(judge.judge("dogs", [np.full((32, 32, 3), np.nan)]))
    with pytest.raises(ParameterError, match=r"0\.\.255"):
        list(judge.judge("dogs", [np.full((32, 32, 3), 300, dtype=np.int64)]))


def test_unknown_architecture_and_bad_options(checkpoint: Path) -> None:
    with pytest.raises(ParameterError, match="ViT-B-33"):
        ClipJudge("ViT-B-33", checkpoint)
    with pytest.raises(ParameterError, match="hub"):
        ClipJudge("hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K", checkpoint)
    with pytest.raises(ParameterError, match="explanation"):
        _judge(checkpoint, template="a photo")
    with pytest.raises(ParameterError, match="explanation"):
        _judge(checkpoint, template="a {kind} of {explanation}")
    with pytest.raises(ParameterError, match="batch_size"):
        _judge(checkpoint, batch_size=0)
    with pytest.raises(ParameterError, match="device"):
        _judge(checkpoint, device="no-such-device")
    with pytest.raises(ParameterError, match="vision_cfg"):
        ClipJudge("tiny", checkpoint, config={"embed_dim": 32, "text_cfg": {}})
    with pytest.raises(SourceError, match="missing.json"):
        ClipJudge("tiny", checkpoint, config=checkpoint.parent / "missing.json")
    hub_text = json.loads(json.dumps(TINY))
    hub_text["text_cfg"]["hf_tokenizer_name"] = "bert-base-uncased"
    with pytest.raises(ParameterError, match="Hugging Face hub"):
        ClipJudge("tiny", checkpoint, config=hub_text)
    small_vocab = json.loads(json.dumps(TINY))
    small_vocab["text_cfg"]["vocab_size"] = 1000
    with pytest.raises(ParameterError, match="vocabulary"):
        ClipJudge("tiny", checkpoint, config=small_vocab)


def test_builtin_architecture_is_known(checkpoint: Path) -> None:
    # A built-in name is accepted without config (its model is not built here: a random
    # ViT-B-32 takes seconds; test_checkpoint_of_another_architecture covers a mismatch).
    judge = ClipJudge("ViT-B-32", checkpoint)
    assert judge.name == "clip:ViT-B-32"
    assert judge.model_config["embed_dim"] == 512
    assert judge.model_fingerprint.startswith("tiny.pt:")


def test_calibration_and_clone(checkpoint: Path) -> None:
    from neuroneval.label import Calibration

    judge = _judge(checkpoint)
    assert judge.probability_map == Calibration(a=50.0, b=0.25)
    clone = judge.with_calibration(Calibration(a=10.0, b=0.0))
    assert clone.identity == judge.identity
    images = _images(2, seed=8)
    np.testing.assert_allclose(_scores(clone, "dogs", images), _scores(judge, "dogs", images))
