"""The model cache of GGUF files (`neuroneval.label.gguf`): a model read back from the cache
equals transformers' own reading of the GGUF file, tensor for tensor and token for token; a
damaged folder is converted again, an unwritable cache leaves the model read from the file, and
an empty ``NEURONEVAL_MODEL_CACHE`` turns the cache off."""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from neuroneval.errors import SourceError  # noqa: E402
from neuroneval.label import gguf, smollm2_path  # noqa: E402

TEXTS = ["When Mary and John went to the store, John gave a drink to", "23 + 58 =", "naïve café — ünïcode ✓", ""]


@pytest.fixture(scope="module")
def gguf_file() -> Path:
    try:
        return smollm2_path()
    except SourceError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def reference(gguf_file: Path) -> tuple[Any, Any]:
    """transformers' reading of the GGUF file, without the cache."""
    tokenizer, model = gguf._read_gguf(gguf_file)
    return tokenizer, model.eval()


def assert_same(got: tuple[Any, Any], want: tuple[Any, Any]) -> None:
    (tok, model), (ref_tok, ref_model) = got, want
    params, ref_params = model.state_dict(), ref_model.state_dict()
    assert params.keys() == ref_params.keys()
    for name, value in ref_params.items():
        assert params[name].dtype == value.dtype == torch.float32, name
        assert torch.equal(params[name], value), name
    # the output embedding is the input one, as in the GGUF reading
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert not model.training
    for text in TEXTS:
        assert tok(text, add_special_tokens=False).input_ids == ref_tok(text, add_special_tokens=False).input_ids
        assert tok(text).input_ids == ref_tok(text).input_ids
    chat = [{"role": "system", "content": "Answer Yes or No."}, {"role": "user", "content": TEXTS[0]}]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == ref_tok.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )
    ids = torch.tensor([ref_tok(TEXTS[0]).input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref_model(ids).logits)


def counting_reads(monkeypatch: pytest.MonkeyPatch, reference: tuple[Any, Any], delay: float = 0.0) -> list[Path]:
    """`_read_gguf` answered from the module's reference reading (a second reading of the file would
    take 20 s) after `delay` seconds, recording each call."""
    calls: list[Path] = []

    def read(path: Path) -> tuple[Any, Any]:
        calls.append(path)
        time.sleep(delay)
        return reference

    monkeypatch.setattr(gguf, "_read_gguf", read)
    return calls


def test_the_cached_model_equals_the_gguf_reading(
    gguf_file: Path, reference: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONEVAL_MODEL_CACHE", str(tmp_path / "cache"))
    calls = counting_reads(monkeypatch, reference)
    first = gguf.load_gguf(gguf_file)  # converts: the reading itself, then the folder written
    folder = gguf.gguf_folder(gguf_file)
    assert folder is not None and folder.parent == tmp_path / "cache" and (folder / "model.safetensors").is_file()
    assert first[1] is reference[1] and calls == [gguf_file]
    second = gguf.load_gguf(gguf_file)  # from the folder: the file is not read again
    assert calls == [gguf_file] and second[1] is not reference[1]
    assert_same(second, reference)
    # nothing but the folder and its lock file is left in the cache (no partial folder)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([folder.name, f".{folder.name}.lock"])


def test_two_conversions_at_once_read_the_file_once(
    gguf_file: Path, reference: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two loads of an unconverted file at the same moment (threads here; the lock is a file lock,
    so processes alike): one converts while the other waits, then reads the folder."""
    monkeypatch.setenv("NEURONEVAL_MODEL_CACHE", str(tmp_path / "cache"))
    calls = counting_reads(monkeypatch, reference, delay=0.5)  # the other load arrives while this one converts
    start = threading.Barrier(2)

    def load() -> tuple[Any, Any]:
        start.wait()
        return gguf.load_gguf(gguf_file)

    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: load(), range(2)))
    assert calls == [gguf_file]
    converted, read_back = sorted(got, key=lambda g: g[1] is not reference[1])
    assert converted[1] is reference[1] and read_back[1] is not reference[1]
    assert_same(read_back, reference)


def test_a_damaged_folder_is_converted_again(
    gguf_file: Path, reference: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONEVAL_MODEL_CACHE", str(tmp_path))
    calls = counting_reads(monkeypatch, reference)
    gguf.load_gguf(gguf_file)
    folder = gguf.gguf_folder(gguf_file)
    assert folder is not None
    tensors = folder / "model.safetensors"
    tensors.write_bytes(tensors.read_bytes()[: tensors.stat().st_size // 2])
    with pytest.warns(UserWarning, match="cannot be read"):
        again = gguf.load_gguf(gguf_file)
    assert again[1] is reference[1] and len(calls) == 2
    assert_same(gguf.load_gguf(gguf_file), reference)  # the folder is whole again
    assert len(calls) == 2


def test_an_unwritable_cache_leaves_the_model_read_from_the_file(
    gguf_file: Path, reference: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("NEURONEVAL_MODEL_CACHE", str(blocker / "cache"))
    counting_reads(monkeypatch, reference)
    with pytest.warns(UserWarning, match="cannot keep"):
        got = gguf.load_gguf(gguf_file)
    assert got[1] is reference[1]


def test_an_empty_variable_turns_the_cache_off(
    gguf_file: Path, reference: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONEVAL_MODEL_CACHE", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = counting_reads(monkeypatch, reference)
    assert gguf.model_cache_dir() is None and gguf.gguf_folder(gguf_file) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gguf.load_gguf(gguf_file)
        gguf.load_gguf(gguf_file)
    assert len(calls) == 2 and not any(tmp_path.iterdir())
    monkeypatch.delenv("NEURONEVAL_MODEL_CACHE")
    assert gguf.model_cache_dir() == tmp_path / "neuroneval" / "models"


def test_the_folder_is_named_by_the_content(gguf_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURONEVAL_MODEL_CACHE", str(tmp_path / "cache"))
    data = gguf_file.read_bytes()
    same, changed = tmp_path / gguf_file.name, tmp_path / "other" / gguf_file.name
    changed.parent.mkdir()
    same.write_bytes(data)
    changed.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert gguf.gguf_folder(same) == gguf.gguf_folder(gguf_file)  # a copy elsewhere: the same folder
    assert gguf.gguf_folder(changed) != gguf.gguf_folder(gguf_file)
