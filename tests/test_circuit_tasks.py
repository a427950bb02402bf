"""MIB's circuit tasks, their dataset side (neuroneval.circuits.tasks): IOI and arithmetic examples checked
by parsing their text (the s2-io flip, the sums), determinism per seed, `tokenize_task` and
`TokenizedTask` against toy tokenizers and SmolLM2's real one (single-token answers, equal lengths, ids
that decode back, the multi-token-answer error), and the batches of one length."""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from neuroneval.circuits import tasks as tasks_module
from neuroneval.circuits.tasks import (
    ARITHMETIC_TEMPLATES,
    IOI_NAMES,
    IOI_TEMPLATES,
    MCQA_COLORS,
    MCQA_LETTERS,
    MCQA_OBJECTS,
    TASKS,
    TaskExample,
    TokenizedTask,
    arithmetic_examples,
    ioi_examples,
    mcqa_examples,
    tokenize_task,
)
from neuroneval.errors import DTypeError, EmptyInputError, ParameterError, ShapeError


def words(text: str) -> list[int]:
    """A toy tokenizer: one id per whitespace-separated word (its characters' code points summed), so
    equal words get equal ids and no vocabulary is kept."""
    return [sum(map(ord, w)) for w in text.split()]


def count_word(word: str, text: str) -> int:
    return len(re.findall(rf"\b{re.escape(word)}\b", text))


def template_regex(template: str) -> re.Pattern[str]:
    """`template` as a regex whose named groups are its fields; a repeated field must repeat its text."""
    out, seen = [], set()
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field is not None:
            out.append(f"(?P={field})" if field in seen else f"(?P<{field}>\\w+)")
            seen.add(field)
    return re.compile("".join(out))


# --------------------------------------------------------------------------- generation


@pytest.mark.parametrize("task", sorted(TASKS))
def test_same_seed_same_examples_other_seed_others(task: str) -> None:
    make = TASKS[task]
    first, again = make(60, seed=7), make(60, seed=7)
    assert first == again and len(first) == 60
    assert all(isinstance(ex, TaskExample) for ex in first)
    other = make(60, seed=8)
    assert sum(a != b for a, b in zip(first, other, strict=True)) > 30
    assert make(60) == make(60, seed=0) != first
    assert make(60, seed=np.uint64(2**64 - 1)) == make(60, seed=2**64 - 1)


def test_tasks_registry() -> None:
    assert TASKS == {"ioi": ioi_examples, "arithmetic": arithmetic_examples, "mcqa": mcqa_examples}


def test_ioi_examples_parse_as_the_s2_io_flip() -> None:
    examples = ioi_examples(800, seed=1)
    regexes = [template_regex(t) for t in IOI_TEMPLATES]
    used_templates, orders = set(), set()
    for ex in examples:
        assert ex.answer.startswith(" ") and ex.counterfactual_answer.startswith(" ")
        io, s = ex.answer[1:], ex.counterfactual_answer[1:]
        assert io in IOI_NAMES and s in IOI_NAMES and io != s
        # the clean prompt: IO once, S twice, no other name
        assert count_word(io, ex.clean) == 1 and count_word(s, ex.clean) == 2
        assert [n for n in IOI_NAMES if n not in (io, s) and count_word(n, ex.clean)] == []
        # the counterfactual: the clean prompt with exactly its second S (the last name) replaced by IO
        s2 = list(re.finditer(rf"\b{s}\b", ex.clean))[-1]
        assert ex.counterfactual == ex.clean[: s2.start()] + io + ex.clean[s2.end() :]
        assert count_word(io, ex.counterfactual) == 2 and count_word(s, ex.counterfactual) == 1
        assert ex.clean.endswith(" to") and ex.counterfactual.endswith(" to")
        # the clean prompt is a template with x, y = IO, S (ABBA) or S, IO (BABA) and s2 = S
        matches = [(k, m) for k, r in enumerate(regexes) if (m := r.fullmatch(ex.clean))]
        assert matches, ex.clean
        k, m = matches[0]
        assert {m["x"], m["y"]} == {io, s} and m["s2"] == s
        used_templates.add(k)
        orders.add("ABBA" if m["x"] == io else "BABA")
    assert used_templates == set(range(len(IOI_TEMPLATES))) and orders == {"ABBA", "BABA"}
    assert len(IOI_TEMPLATES) >= 8 and len(set(IOI_TEMPLATES)) == len(IOI_TEMPLATES)
    assert len(IOI_NAMES) >= 40 and len(set(IOI_NAMES)) == len(IOI_NAMES)
    # no name is a prefix of another (the word-boundary parsing above relies on names being whole words)
    assert not [(a, b) for a in IOI_NAMES for b in IOI_NAMES if a != b and b.startswith(a)]
    # both roles draw from the whole list
    assert {ex.answer[1:] for ex in examples} == set(IOI_NAMES)
    assert {ex.counterfactual_answer[1:] for ex in examples} == set(IOI_NAMES)


MCQA_PROMPT = re.compile(
    r"The (?P<obj>\w+) is (?P<color>\w+)\. What color is the (?P=obj)\?\n"
    r"A\. (?P<c0>\w+)\nB\. (?P<c1>\w+)\nC\. (?P<c2>\w+)\nD\. (?P<c3>\w+)\nAnswer:"
)


def test_mcqa_examples_move_the_answer_to_another_letter() -> None:
    """Parsed back from the text: four distinct colours, the object's among them under the
    answer's letter; the counterfactual the same question with the correct colour swapped with
    one other choice, so its answer is that choice's letter."""
    examples = mcqa_examples(600, seed=3)
    letters, moved_to, objects = [], [], set()
    for ex in examples:
        clean, cf = MCQA_PROMPT.fullmatch(ex.clean), MCQA_PROMPT.fullmatch(ex.counterfactual)
        assert clean and cf, ex
        choices, cf_choices = [clean[f"c{i}"] for i in range(4)], [cf[f"c{i}"] for i in range(4)]
        assert len(set(choices)) == 4 and set(choices) <= set(MCQA_COLORS) and clean["obj"] in MCQA_OBJECTS
        assert (clean["obj"], clean["color"]) == (cf["obj"], cf["color"])
        here, there = choices.index(clean["color"]), cf_choices.index(clean["color"])
        assert (
            here != there
            and ex.answer == f" {MCQA_LETTERS[here]}"
            and ex.counterfactual_answer == f" {MCQA_LETTERS[there]}"
        )
        swapped = list(choices)
        swapped[here], swapped[there] = swapped[there], swapped[here]
        assert cf_choices == swapped
        letters.append(here)
        moved_to.append(there)
        objects.add(clean["obj"])
    assert set(letters) == set(moved_to) == {0, 1, 2, 3} and objects == set(MCQA_OBJECTS)
    assert np.bincount(letters, minlength=4).min() > 100  # every letter answers often


@pytest.mark.parametrize("answer_space", [True, False])
def test_arithmetic_examples_sum_as_written(answer_space: bool) -> None:
    examples = arithmetic_examples(500, seed=2, answer_space=answer_space)
    tail = "" if answer_space else " "
    skeletons = {t.format(a="#", b="#") + tail for t in ARITHMETIC_TEMPLATES}
    sums, used = [], set()
    for ex in examples:
        for prompt, answer in ((ex.clean, ex.answer), (ex.counterfactual, ex.counterfactual_answer)):
            a, b = (int(v) for v in re.findall(r"\d+", prompt))
            assert 0 <= a <= 9 and 0 <= b <= 9 and a + b <= 9
            assert answer == (" " if answer_space else "") + str(a + b)
            sums.append(a + b)
        assert ex.answer != ex.counterfactual_answer
        # one template for both prompts, so their lengths match
        skeleton = re.sub(r"\d", "#", ex.clean)
        assert skeleton == re.sub(r"\d", "#", ex.counterfactual) and skeleton in skeletons
        used.add(skeleton)
    assert used == skeletons and len(skeletons) == len(ARITHMETIC_TEMPLATES) >= 3
    counts = np.bincount(sums, minlength=10)
    assert counts.size == 10 and counts.min() > 50  # every sum 0..9, none rare


def test_bad_generation_arguments() -> None:
    for make in TASKS.values():
        for n in (0, -1, 1.0, 2.5, True, "3", None):
            with pytest.raises(ParameterError, match="n must be an integer"):
                make(n)
        # the seed's domain is declared (TASK_OPTIONS; test_declared_options): here, that it is checked
        with pytest.raises(ParameterError, match="invalid parameter seed = -1"):
            make(3, seed=-1)
        assert make(3, seed=None) == make(3, seed=0)  # None is the declared default
        assert len(make(np.int32(1))) == 1
    with pytest.raises(ParameterError, match="invalid parameter answer_space = 'no'"):
        arithmetic_examples(3, answer_space="no")  # type: ignore[arg-type]


def test_task_example_fields_are_text() -> None:
    with pytest.raises(ParameterError, match="answer must be a str"):
        TaskExample("a b", "a c", 3, " d")  # type: ignore[arg-type]
    ex = TaskExample("a b", "a c", " d", " e")
    with pytest.raises(AttributeError):
        ex.answer = " f"  # type: ignore[misc]


def test_module_imports_numpy_and_the_standard_library_only() -> None:
    tree = ast.parse(Path(tasks_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):  # every import, also inside functions
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(str(node.module).split(".")[0])
    assert imported <= {"__future__", "collections", "dataclasses", "typing", "numpy"}, imported


# --------------------------------------------------------------------------- tokenize_task, toy tokenizers


def test_tokenize_task_holds_the_tokenizer_ids() -> None:
    examples = ioi_examples(30, seed=3)
    task = tokenize_task(examples, words, name="ioi")
    assert isinstance(task, TokenizedTask) and task.name == "ioi" and len(task) == 30
    assert task.examples == tuple(examples)
    for i, ex in enumerate(examples):
        assert task.clean[i].dtype == np.int64 and task.clean[i].tolist() == words(ex.clean)
        assert task.counterfactual[i].tolist() == words(ex.counterfactual)
    assert task.answer.dtype == np.int64 and task.answer.shape == (30,)
    assert task.answer.tolist() == [words(ex.answer)[0] for ex in examples]
    assert task.counterfactual_answer.tolist() == [words(ex.counterfactual_answer)[0] for ex in examples]
    assert task.lengths().tolist() == [len(ex.clean.split()) for ex in examples]
    with pytest.raises(ValueError, match="read-only"):
        task.answer[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        task.clean[0][0] = 1
    # any sequence of examples and any integer id type
    again = tokenize_task(tuple(examples), lambda s: np.asarray(words(s), dtype=np.uint32), name="ioi")
    assert [c.tolist() for c in again.clean] == [c.tolist() for c in task.clean] and again.clean[0].dtype == np.int64


def test_subset_keeps_the_order_given() -> None:
    task = tokenize_task(arithmetic_examples(10, seed=4), words, name="arithmetic")
    sub = task.subset([7, 2, 7])
    assert len(sub) == 3 and sub.name == "arithmetic"
    assert sub.examples == (task.examples[7], task.examples[2], task.examples[7])
    assert sub.answer.tolist() == task.answer[[7, 2, 7]].tolist()
    assert sub.counterfactual_answer.tolist() == task.counterfactual_answer[[7, 2, 7]].tolist()
    assert [c.tolist() for c in sub.counterfactual] == [task.counterfactual[i].tolist() for i in (7, 2, 7)]
    assert sub.lengths().tolist() == task.lengths()[[7, 2, 7]].tolist()
    assert task.subset(np.arange(10)[::-1]).examples == task.examples[::-1]
    with pytest.raises(ShapeError, match="outside 0..9"):
        task.subset([0, 10])
    with pytest.raises(ShapeError, match="outside 0..9"):
        task.subset([-1])
    with pytest.raises(EmptyInputError):
        task.subset([])
    with pytest.raises(ShapeError, match="1-D"):
        task.subset([[0, 1]])
    with pytest.raises(DTypeError):
        task.subset([0.5])


def prompts_of_lengths(lengths: Sequence[int]) -> list[TaskExample]:
    return [TaskExample(" ".join(["w"] * k), " ".join(["v"] * k), " a", " b") for k in lengths]


def test_batches_by_hand() -> None:
    task = tokenize_task(prompts_of_lengths([3, 1, 3, 2, 3]), words, name="toy")
    assert [b.tolist() for b in task.batches(2)] == [[1], [3], [0, 2], [4]]
    assert [b.tolist() for b in task.batches(1)] == [[1], [3], [0], [2], [4]]
    assert [b.tolist() for b in task.batches(10)] == [[1], [3], [0, 2, 4]]
    assert all(b.dtype == np.int64 for b in task.batches(2))
    for size in (0, -2, 1.5, True):
        with pytest.raises(ParameterError, match="batch_size"):
            task.batches(size)


@pytest.mark.parametrize("batch_size", [1, 3, 8, 1000])
def test_batches_one_length_each_cover_every_index_once(batch_size: int) -> None:
    rng = np.random.default_rng(batch_size)
    lengths = rng.integers(1, 7, size=200)
    task = tokenize_task(prompts_of_lengths(lengths.tolist()), words, name="toy")
    check_batches(task, batch_size)


def check_batches(task: TokenizedTask, batch_size: int) -> None:
    lengths = task.lengths()
    batches = task.batches(batch_size)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(len(task)))  # every index exactly once
    keys = []
    for b in batches:
        assert 1 <= b.size <= batch_size
        assert np.unique(lengths[b]).size == 1  # one length: no padding
        assert (np.diff(b) > 0).all()
        keys.append((int(lengths[b[0]]), int(b[0])))
    assert keys == sorted(keys)  # lengths ascending, then indices ascending
    # as few batches as one length per batch allows
    assert len(batches) == sum(-(-int(c) // batch_size) for c in np.unique(lengths, return_counts=True)[1])
    # a batch stacks without padding
    for b in batches:
        assert np.stack([task.clean[i] for i in b]).shape == (b.size, lengths[b[0]])


def test_tokenize_task_errors() -> None:
    good = TaskExample("a b c", "a b d", " x", " y")
    with pytest.raises(ShapeError, match=r"example 1: the clean prompt has 3 tokens and the counterfactual 4"):
        tokenize_task([good, TaskExample("a b c", "a b c d", " x", " y")], words, name="t")
    with pytest.raises(ShapeError, match=r"example 0: the answer ' x y' tokenizes to 2 tokens \[120, 121\]"):
        tokenize_task([TaskExample("a b c", "a b d", " x y", " y")], words, name="t")
    with pytest.raises(ShapeError, match=r"example 1: the counterfactual answer '' tokenizes to 0 tokens \[\]"):
        tokenize_task([good, TaskExample("a b c", "a b d", " x", "")], words, name="t")
    with pytest.raises(ShapeError, match=r"example 0: the answer ' ' tokenizes to 0 tokens \[\]; the task metric"):
        tokenize_task([TaskExample("a b c", "a b d", " ", " y")], words, name="t")
    with pytest.raises(EmptyInputError, match="no examples"):
        tokenize_task([], words, name="t")
    with pytest.raises(EmptyInputError, match="example 1: the counterfactual prompt is empty"):
        tokenize_task([good, TaskExample("a", "", " x", " y")], words, name="t")
    with pytest.raises(EmptyInputError, match="example 0: the clean prompt '   ' tokenizes to no token"):
        tokenize_task([TaskExample("   ", "a", " x", " y")], words, name="t")
    with pytest.raises(ParameterError, match="example 1 must be a TaskExample"):
        tokenize_task([good, ("a", "b", " x", " y")], words, name="t")  # type: ignore[list-item]
    with pytest.raises(ParameterError, match="tokenize must be a callable"):
        tokenize_task([good], None, name="t")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="name must be a str"):
        tokenize_task([good], words, name=3)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="examples must be a sequence"):
        tokenize_task(good, words, name="t")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tokenize", "error", "message"),
    [
        (lambda s: [words(s)], ShapeError, r"example 0: tokenize returned shape \(1, 3\) for the clean prompt"),
        (lambda s: [-1] * len(s.split()), ShapeError, "the negative id -1"),
        (lambda s: [0.5] * len(s.split()), DTypeError, "must hold integer indices"),
        (lambda s: ["a"] * len(s.split()), DTypeError, "must hold integer indices"),
        (lambda s: [[1], [1, 2]], ShapeError, "cannot be read as integers"),
    ],
)
def test_tokenize_task_refuses_odd_ids(tokenize: Callable[[str], Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        tokenize_task([TaskExample("a b c", "a b d", " x", " y")], tokenize, name="t")


def test_tokenized_task_checks_its_parts() -> None:
    ex = TaskExample("a b", "a c", " x", " y")
    ids = np.array([1, 2], dtype=np.int64)
    one = np.array([5], dtype=np.int64)
    assert len(TokenizedTask("t", (ex,), (ids,), (ids,), one, one)) == 1
    with pytest.raises(EmptyInputError):
        TokenizedTask("t", (), (), (), one[:0], one[:0])
    with pytest.raises(ShapeError, match="same non-empty length"):
        TokenizedTask("t", (ex,), (ids,), (ids[:1],), one, one)
    with pytest.raises(ShapeError, match=r"answer has shape \(2,\)"):
        TokenizedTask("t", (ex,), (ids,), (ids,), ids, one)
    with pytest.raises(ShapeError, match="1 examples, 2 clean"):
        TokenizedTask("t", (ex,), (ids, ids), (ids,), one, one)


# --------------------------------------------------------------------------- SmolLM2's tokenizer


@pytest.fixture(scope="module")
def smollm2() -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from neuroneval.errors import SourceError
    from neuroneval.label import smollm2_path

    try:
        p = smollm2_path()
    except SourceError as e:
        pytest.skip(str(e))
    from neuroneval.label.gguf import load_gguf

    return load_gguf(p)[0]


def ids_of(tokenizer: Any) -> Callable[[str], list[int]]:
    return lambda s: tokenizer(s, add_special_tokens=False).input_ids


@pytest.mark.slow
def test_smollm2_names_are_single_tokens(smollm2: Any) -> None:
    tokenize = ids_of(smollm2)
    several = {name: tokenize(" " + name) for name in IOI_NAMES if len(tokenize(" " + name)) != 1}
    assert several == {}
    assert len({tokenize(" " + name)[0] for name in IOI_NAMES}) == len(IOI_NAMES)


def test_smollm2_ioi(smollm2: Any) -> None:
    tokenize = ids_of(smollm2)
    examples = ioi_examples(200, seed=5)
    task = tokenize_task(examples, tokenize, name="ioi")
    assert len(task) == 200
    for i, ex in enumerate(examples):
        c, f = task.clean[i], task.counterfactual[i]
        assert c.shape == f.shape
        assert smollm2.decode(c.tolist()) == ex.clean and smollm2.decode(f.tolist()) == ex.counterfactual
        assert smollm2.decode([int(task.answer[i])]) == ex.answer
        assert smollm2.decode([int(task.counterfactual_answer[i])]) == ex.counterfactual_answer
        # the two prompts differ at one token, S2: S in the clean prompt, IO in the counterfactual
        (where,) = np.flatnonzero(c != f)
        assert c[where] == task.counterfactual_answer[i] and f[where] == task.answer[i]
    check_batches(task, 16)


def test_smollm2_arithmetic(smollm2: Any) -> None:
    tokenize = ids_of(smollm2)
    examples = arithmetic_examples(200, seed=6, answer_space=False)
    task = tokenize_task(examples, tokenize, name="arithmetic")
    for i, ex in enumerate(examples):
        assert task.clean[i].shape == task.counterfactual[i].shape
        assert smollm2.decode(task.clean[i].tolist()) == ex.clean
        assert smollm2.decode(task.counterfactual[i].tolist()) == ex.counterfactual
        assert smollm2.decode([int(task.answer[i])]) == ex.answer
        assert smollm2.decode([int(task.counterfactual_answer[i])]) == ex.counterfactual_answer
        # the answer is the token that follows the prompt in the tokens of prompt + answer
        assert tokenize(ex.clean + ex.answer) == task.clean[i].tolist() + [int(task.answer[i])]
    assert len(set(task.answer.tolist())) == 10
    check_batches(task, 7)
    # SmolLM2 splits " 8" into a space and a digit: the default form's answers are two tokens
    default = arithmetic_examples(5, seed=6)
    ids = tokenize(default[0].answer)
    assert len(ids) == 2
    with pytest.raises(
        ShapeError, match=re.escape(f"example 0: the answer {default[0].answer!r} tokenizes to 2 tokens {ids}")
    ):
        tokenize_task(default, tokenize, name="arithmetic")


def test_smollm2_mcqa(smollm2: Any) -> None:
    """SmolLM2 tokenizes MCQA's prompts to the same length (the counterfactual only reorders
    the choices), each letter answer to one token; a lettering whose answer is two tokens is
    refused naming it."""
    tokenize = ids_of(smollm2)
    examples = mcqa_examples(200, seed=9)
    task = tokenize_task(examples, tokenize, name="mcqa")
    for i, ex in enumerate(examples):
        assert task.clean[i].shape == task.counterfactual[i].shape
        assert smollm2.decode(task.clean[i].tolist()) == ex.clean
        assert smollm2.decode([int(task.answer[i])]) == ex.answer
    assert len(set(task.answer.tolist())) == 4
    long = TaskExample(examples[0].clean, examples[0].counterfactual, " Aardvark", examples[0].counterfactual_answer)
    with pytest.raises(ShapeError, match="the answer ' Aardvark' tokenizes to [2-9] tokens"):
        tokenize_task([long], tokenize, name="mcqa")


def test_smollm2_multi_token_answer_is_a_clear_error(smollm2: Any) -> None:
    tokenize = ids_of(smollm2)
    examples = ioi_examples(3, seed=0)
    long_name = " Maryanne-Louise"
    ids = tokenize(long_name)
    assert len(ids) > 1
    bad = TaskExample(examples[1].clean, examples[1].counterfactual, long_name, examples[1].counterfactual_answer)
    expected = (
        f"example 1: the answer ' Maryanne-Louise' tokenizes to {len(ids)} tokens {ids}; "
        "the task metric needs a single token"
    )
    with pytest.raises(ShapeError, match=re.escape(expected)):
        tokenize_task([examples[0], bad, examples[2]], tokenize, name="ioi")
    flipped = TaskExample(examples[1].clean, examples[1].counterfactual, examples[1].answer, long_name)
    with pytest.raises(ShapeError, match=re.escape(f"example 0: the counterfactual answer '{long_name}' tokenizes")):
        tokenize_task([flipped], tokenize, name="ioi")
    # a counterfactual one token longer than its clean prompt: the positions no longer correspond
    shifted = TaskExample(examples[0].clean, examples[0].clean + " again", examples[0].answer, " x")
    n = len(tokenize(examples[0].clean))
    with pytest.raises(ShapeError, match=f"example 0: the clean prompt has {n} tokens and the counterfactual {n + 1}"):
        tokenize_task([shifted], tokenize, name="ioi")
