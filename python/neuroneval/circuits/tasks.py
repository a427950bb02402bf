"""MIB's circuit-localization tasks, their dataset side: seeded, templated prompts with counterfactual pairs.

Each `TaskExample` is a clean prompt, a counterfactual prompt of the same shape, and the single-token
answer of each. The task metric is the logit difference ``logit(answer) - logit(counterfactual_answer)``
at the last token of the clean prompt; patching activations from the counterfactual run into the clean
one moves that difference, which is what a circuit is scored on.

- `ioi_examples`: indirect-object identification (Wang et al. 2023) in ABBA and BABA templates, with
  MIB's s2-io counterfactual (the repeated subject S2 replaced by the indirect object, so the answer
  flips from the indirect object to the subject);
- `arithmetic_examples`: two-operand addition with a single-digit sum, the counterfactual another pair
  of operands, in the same template, with another sum;
- `mcqa_examples`: MIB's synthetic multiple choice (an object's colour among four lettered
  choices), the counterfactual the correct colour moved to another letter;
- `tokenize_task`: a task's token ids through any tokenizer (a callable from text to ids), checked:
  every answer one token, the clean and counterfactual prompts of an example the same length (positions
  correspond, as patching needs). `TokenizedTask.batches` groups examples of one length, so no batch
  needs padding.

The draws use ``numpy.random.default_rng(seed)``: the same seed gives the same examples.

Examples
--------
>>> examples = ioi_examples(3, seed=0)
>>> examples[1].clean
'Then, Eric and Michael went to the house. Eric gave a drink to'
>>> examples[1].counterfactual
'Then, Eric and Michael went to the house. Michael gave a drink to'
>>> examples[1].answer, examples[1].counterfactual_answer
(' Michael', ' Eric')

A whitespace tokenizer (one id per word, the vocabulary growing as words come) stands in for a real one:

>>> vocab: dict[str, int] = {}
>>> def words(text):
...     return [vocab.setdefault(w, len(vocab)) for w in text.split()]
>>> task = tokenize_task(examples, words, name="ioi")
>>> len(task), task.lengths().tolist()
(3, [14, 13, 13])
>>> [batch.tolist() for batch in task.batches(4)]
[[1, 2], [0]]
>>> tokenize_task([TaskExample("1 + 2 =", "3 + 4 =", " three", " seven")], lambda s: list(s.encode()), name="bytes")
Traceback (most recent call last):
...
neuroneval.errors.ShapeError: example 0: the answer ' three' tokenizes to 6 tokens [32, 116, 104, 114, 101, 101]; the task metric needs a single token
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .._coerce import as_index_array, check_integer, check_sequence
from ..errors import EmptyInputError, ParameterError, ShapeError
from ..options import SCORE_OPTIONS, Option, Options

__all__ = [
    "ARITHMETIC_TEMPLATES",
    "IOI_NAMES",
    "IOI_OBJECTS",
    "IOI_PLACES",
    "IOI_TEMPLATES",
    "MCQA_COLORS",
    "MCQA_LETTERS",
    "MCQA_OBJECTS",
    "MCQA_TEMPLATE",
    "TASKS",
    "TASK_OPTIONS",
    "TaskExample",
    "TokenizedTask",
    "arithmetic_examples",
    "ioi_examples",
    "mcqa_examples",
    "mcqa_prompt",
    "tokenize_task",
]

IntArray = npt.NDArray[np.int64]

#: Common first names, each a single token after a space in SmolLM2's tokenizer (the tests check it);
#: none is a prefix of another or a word of the templates.
IOI_NAMES = (
    "Mary",
    "John",
    "Tom",
    "James",
    "Martin",
    "Amy",
    "Lisa",
    "Michael",
    "Paul",
    "Kate",
    "Sarah",
    "David",
    "Robert",
    "Emma",
    "Laura",
    "Alex",
    "Ben",
    "Chris",
    "Daniel",
    "Edward",
    "Frank",
    "George",
    "Henry",
    "Jessica",
    "Karen",
    "Kevin",
    "Linda",
    "Nancy",
    "Peter",
    "Rachel",
    "Ryan",
    "Susan",
    "Thomas",
    "William",
    "Brian",
    "Eric",
    "Helen",
    "Jane",
    "Julia",
    "Lucy",
    "Simon",
    "Alice",
    "Claire",
    "Emily",
)

#: Places and objects of the IOI templates (objects start with a consonant: "a {object}").
IOI_PLACES = (
    "store",
    "garden",
    "restaurant",
    "school",
    "hospital",
    "office",
    "house",
    "station",
    "park",
    "library",
    "market",
    "church",
)
IOI_OBJECTS = ("ring", "kiss", "bone", "basketball", "computer", "necklace", "drink", "snack", "book", "gift")

#: Wang et al.'s IOI templates, the prompt ending before the indirect object. ``{x}`` and ``{y}`` are the
#: first two names (ABBA: x the indirect object, y the subject; BABA: the other way round), ``{s2}`` the
#: repeated subject: no name opens a template, so every name follows a space.
IOI_TEMPLATES = (
    "Then, {x} and {y} went to the {place}. {s2} gave a {object} to",
    "Then, {x} and {y} had a lot of fun at the {place}. {s2} gave a {object} to",
    "Then, {x} and {y} were working at the {place}. {s2} decided to give a {object} to",
    "Then, {x} and {y} were thinking about going to the {place}. {s2} wanted to give a {object} to",
    "Then, {x} and {y} had a long argument, and afterwards {s2} said to",
    "After {x} and {y} went to the {place}, {s2} gave a {object} to",
    "When {x} and {y} got a {object} at the {place}, {s2} decided to give it to",
    "When {x} and {y} got a {object} at the {place}, {s2} decided to give the {object} to",
    "While {x} and {y} were working at the {place}, {s2} gave a {object} to",
    "While {x} and {y} were commuting to the {place}, {s2} gave a {object} to",
    "After the lunch, {x} and {y} went to the {place}. {s2} gave a {object} to",
    "Afterwards, {x} and {y} went to the {place}. {s2} gave a {object} to",
    "Then, {x} and {y} had a long argument. Afterwards {s2} said to",
    "The {place} {x} and {y} went to had a {object}. {s2} gave it to",
    "Friends {x} and {y} found a {object} at the {place}. {s2} gave it to",
    "When {x} and {y} went to the {place}, {s2} gave a {object} to",
)

#: The addition templates: ``{a}`` and ``{b}`` are the operands; the answer follows the last character.
#: MIB's synthetic multiple choice (MCQA): an object's colour, asked with four lettered choices.
MCQA_COLORS = ("red", "blue", "green", "yellow", "black", "white", "brown", "pink", "purple", "orange", "gray")
MCQA_OBJECTS = ("apple", "car", "shirt", "ball", "house", "flower", "book", "chair", "cup", "hat", "door", "bird")
MCQA_LETTERS = ("A", "B", "C", "D")
MCQA_TEMPLATE = (
    "The {object} is {color}. What color is the {object}?\n{l0}. {c0}\n{l1}. {c1}\n{l2}. {c2}\n{l3}. {c3}\nAnswer:"
)

ARITHMETIC_TEMPLATES = (
    "{a} + {b} =",
    "What is {a} plus {b}? Answer:",
    "{a} plus {b} equals",
    "The sum of {a} and {b} is",
)


@dataclass(frozen=True)
class TaskExample:
    """One example of a circuit task: a clean prompt, its counterfactual, and the answer of each.

    Attributes
    ----------
    clean : str
        The prompt the model is evaluated on, e.g. ``"When Mary and John went to the store, John gave a drink to"``.
    counterfactual : str
        The same prompt with the task-relevant part changed, e.g. ``"When Mary and John went to the store, Mary
        gave a drink to"``; it tokenizes to as many tokens as the clean prompt.
    answer : str
        The clean prompt's answer as it is tokenized, its leading space included: ``" Mary"``.
    counterfactual_answer : str
        The counterfactual prompt's answer: ``" John"``.
    """

    clean: str
    counterfactual: str
    answer: str
    counterfactual_answer: str

    def __post_init__(self) -> None:
        for field in ("clean", "counterfactual", "answer", "counterfactual_answer"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise ParameterError(f"a task example's {field} must be a str; got {type(value).__name__}")


def _count(n: Any) -> int:
    return check_integer(n, "n", minimum=1)


def _seeded(seed: Any) -> np.random.Generator:
    return np.random.default_rng(TASK_OPTIONS.only("seed").resolve(seed=seed)["seed"])


#: The options of the task generators (`ioi_examples`, `arithmetic_examples`).
TASK_OPTIONS = Options(
    SCORE_OPTIONS["seed"],
    Option(
        "answer_space",
        "flag",
        True,
        "the answer carries the space before it (for tokenizers that join a space to the digit after it)",
    ),
)


def ioi_examples(n: int, *, seed: int | None = None) -> list[TaskExample]:
    """`n` indirect-object-identification examples with MIB's s2-io counterfactual.

    Each draws a template of `IOI_TEMPLATES`, the ABBA or BABA order (even odds), two distinct names of
    `IOI_NAMES` (the indirect object IO and the subject S), a place and an object. The clean prompt names
    IO once and S twice, its answer is ``" " + IO``; the counterfactual replaces the second S (S2) by IO,
    its answer is ``" " + S``.

    Raises
    ------
    ParameterError
        `n` not an integer >= 1, or `seed` (`TASK_OPTIONS`) out of its domain.
    """
    count, rng = _count(n), _seeded(seed)
    out = []
    for _ in range(count):
        template = IOI_TEMPLATES[int(rng.integers(len(IOI_TEMPLATES)))]
        io, s = (IOI_NAMES[int(i)] for i in rng.choice(len(IOI_NAMES), size=2, replace=False))
        x, y = (io, s) if rng.integers(2) == 0 else (s, io)  # ABBA, BABA
        place = IOI_PLACES[int(rng.integers(len(IOI_PLACES)))]
        obj = IOI_OBJECTS[int(rng.integers(len(IOI_OBJECTS)))]
        clean = template.format(x=x, y=y, s2=s, place=place, object=obj)
        counterfactual = template.format(x=x, y=y, s2=io, place=place, object=obj)
        out.append(TaskExample(clean, counterfactual, f" {io}", f" {s}"))
    return out


def arithmetic_examples(n: int, *, seed: int | None = None, answer_space: bool | None = None) -> list[TaskExample]:
    """`n` two-operand addition examples, operands 0..9 with a single-digit sum.

    Each draws a template of `ARITHMETIC_TEMPLATES`, a sum (0..9, even odds) and its first operand (0..the
    sum, even odds). The counterfactual is the same template with another sum, drawn the same way among
    the nine others, so the two answers always differ.

    `answer_space` places the space before the answer. True: the prompt ends as the template does and the
    answer is ``" 8"``, one token where a tokenizer joins a space to the digit after it (GPT-2's). False:
    the prompt ends with the space and the answer is the bare digit ``"8"``, for tokenizers that split a
    digit from the space before it (SmolLM2's, Llama 3's), whose tokens of ``"3 + 5 = 8"`` are those of
    ``"3 + 5 = "`` then ``"8"``.

    Raises
    ------
    ParameterError
        `n` not an integer >= 1, or `seed` or `answer_space` (`TASK_OPTIONS`) out of its domain.
    """
    count = _count(n)
    options = TASK_OPTIONS.resolve(seed=seed, answer_space=answer_space)
    rng = np.random.default_rng(options["seed"])
    tail, lead = ("", " ") if options["answer_space"] else (" ", "")
    out = []
    for _ in range(count):
        template = ARITHMETIC_TEMPLATES[int(rng.integers(len(ARITHMETIC_TEMPLATES)))] + tail
        total = int(rng.integers(10))
        other = int(rng.integers(9))
        other += other >= total  # one of the nine sums other than `total`
        a, c = int(rng.integers(total + 1)), int(rng.integers(other + 1))
        out.append(
            TaskExample(
                template.format(a=a, b=total - a),
                template.format(a=c, b=other - c),
                f"{lead}{total}",
                f"{lead}{other}",
            )
        )
    return out


def mcqa_prompt(obj: str, color: str, choices: Sequence[str]) -> str:
    """MCQA's prompt (`MCQA_TEMPLATE`): the object's colour, then the four choices lettered A-D."""
    values = {f"l{i}": letter for i, letter in enumerate(MCQA_LETTERS)} | {f"c{i}": c for i, c in enumerate(choices)}
    return MCQA_TEMPLATE.format(object=obj, color=color, **values)


def mcqa_examples(n: int, *, seed: int | None = None) -> list[TaskExample]:
    """`n` synthetic multiple-choice examples with MIB's answer-position counterfactual.

    Each draws an object of `MCQA_OBJECTS` and four distinct colours of `MCQA_COLORS` as the
    choices, one of them the object's. The counterfactual swaps the correct colour with another
    choice (drawn among the three), so its answer is another letter; the answers are the
    letters with their space, ``" B"`` and ``" D"``.

    Raises
    ------
    ParameterError
        `n` not an integer >= 1, or `seed` (`TASK_OPTIONS`) out of its domain.
    """
    count, rng = _count(n), _seeded(seed)
    out = []
    for _ in range(count):
        obj = MCQA_OBJECTS[int(rng.integers(len(MCQA_OBJECTS)))]
        choices = [MCQA_COLORS[int(i)] for i in rng.choice(len(MCQA_COLORS), size=4, replace=False)]
        here = int(rng.integers(4))
        there = int(rng.integers(3))
        there += there >= here
        moved = list(choices)
        moved[here], moved[there] = moved[there], moved[here]
        color = choices[here]
        out.append(
            TaskExample(
                mcqa_prompt(obj, color, choices),
                mcqa_prompt(obj, color, moved),
                f" {MCQA_LETTERS[here]}",
                f" {MCQA_LETTERS[there]}",
            )
        )
    return out


#: The tasks by name: each takes ``n`` and the keyword ``seed``.
TASKS: dict[str, Callable[..., list[TaskExample]]] = {
    "ioi": ioi_examples,
    "arithmetic": arithmetic_examples,
    "mcqa": mcqa_examples,
}


def _frozen(ids: IntArray) -> IntArray:
    ids.flags.writeable = False
    return ids


@dataclass(frozen=True, eq=False)
class TokenizedTask:
    """A task's examples with their token ids (`tokenize_task` builds it, checked).

    Attributes
    ----------
    name : str
        The task's name, e.g. ``"ioi"``.
    examples : tuple of TaskExample
        The examples, in order.
    clean, counterfactual : tuple of numpy.ndarray of int64
        Each example's prompt token ids, without special tokens; an example's two prompts have the
        same length.
    answer, counterfactual_answer : numpy.ndarray of int64, shape (N,)
        The single token id of each example's answer and counterfactual answer.
    """

    name: str
    examples: tuple[TaskExample, ...]
    clean: tuple[IntArray, ...]
    counterfactual: tuple[IntArray, ...]
    answer: IntArray
    counterfactual_answer: IntArray

    def __post_init__(self) -> None:
        n = len(self.examples)
        if n == 0:
            raise EmptyInputError(f"task {self.name!r} holds no examples")
        if len(self.clean) != n or len(self.counterfactual) != n:
            raise ShapeError(
                f"task {self.name!r}: {n} examples, {len(self.clean)} clean and {len(self.counterfactual)} "
                "counterfactual prompts"
            )
        for field in ("answer", "counterfactual_answer"):
            if np.shape(getattr(self, field)) != (n,):
                raise ShapeError(
                    f"task {self.name!r}: {field} has shape {np.shape(getattr(self, field))}; expected ({n},)"
                )
        for i, (c, f) in enumerate(zip(self.clean, self.counterfactual, strict=True)):
            if c.ndim != 1 or c.shape != f.shape or c.size == 0:
                raise ShapeError(
                    f"task {self.name!r}, example {i}: clean prompt ids of shape {c.shape}, counterfactual "
                    f"{f.shape}; expected the same non-empty length"
                )

    def __len__(self) -> int:
        return len(self.examples)

    def lengths(self) -> IntArray:
        """The token count of each clean prompt (that of its counterfactual too), int64 of shape (N,)."""
        return np.fromiter((c.size for c in self.clean), dtype=np.int64, count=len(self.clean))

    def subset(self, indices: Any) -> TokenizedTask:
        """The task of the examples at `indices` (integers in 0..N-1, repeats allowed), in that order.

        Raises
        ------
        EmptyInputError
            No index.
        ShapeError
            `indices` not 1-D, or an index outside 0..N-1.
        """
        try:
            raw = np.asarray(indices)
        except (TypeError, ValueError) as e:
            raise ShapeError(f"indices cannot be read as a 1-D array of integers: {e}") from e
        if raw.ndim != 1:
            raise ShapeError(f"indices must be 1-D; got shape {raw.shape}")
        idx = as_index_array(raw, "indices")
        if idx.size == 0:
            raise EmptyInputError(f"a subset of task {self.name!r} needs at least one index")
        bad = (idx < 0) | (idx >= len(self))
        if bad.any():
            raise ShapeError(f"indices holds {int(idx[bad][0])}, outside 0..{len(self) - 1}")
        pick = idx.tolist()
        return TokenizedTask(
            self.name,
            tuple(self.examples[i] for i in pick),
            tuple(self.clean[i] for i in pick),
            tuple(self.counterfactual[i] for i in pick),
            _frozen(self.answer[idx]),
            _frozen(self.counterfactual_answer[idx]),
        )

    def batches(self, batch_size: int) -> list[IntArray]:
        """Index arrays that split the examples into batches of one prompt length each (no padding
        needed), at most `batch_size` examples each: lengths ascending, indices ascending within a length,
        every index in exactly one batch.

        Raises
        ------
        ParameterError
            `batch_size` not an integer >= 1.
        """
        size = check_integer(batch_size, "batch_size", minimum=1)
        lengths = self.lengths()
        order = np.argsort(lengths, kind="stable")
        starts = np.flatnonzero(np.diff(lengths[order])) + 1
        out: list[IntArray] = []
        for group in np.split(order, starts):
            out.extend(group[j : j + size].astype(np.int64) for j in range(0, group.size, size))
        return out


def _ids(tokenize: Callable[[str], Sequence[int]], text: str, what: str, i: int) -> IntArray:
    """The token ids of `text` as a flat int64 array (possibly empty), or an error naming the example."""
    try:
        arr = np.asarray(tokenize(text))
    except (TypeError, ValueError) as e:
        raise ShapeError(f"example {i}: the token ids of the {what} {text!r} cannot be read as integers: {e}") from e
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise ShapeError(
            f"example {i}: tokenize returned shape {arr.shape} for the {what} {text!r}; expected a flat sequence of token ids"
        )
    ids = as_index_array(arr, f"example {i}: the token ids of the {what}")
    if ids.min() < 0:
        raise ShapeError(f"example {i}: the {what} {text!r} tokenizes to the negative id {int(ids.min())}")
    return ids


def tokenize_task(
    examples: Sequence[TaskExample], tokenize: Callable[[str], Sequence[int]], *, name: str
) -> TokenizedTask:
    """The token ids of `examples` through `tokenize` (text to ids, no special tokens: for a Hugging Face
    tokenizer ``lambda s: tokenizer(s, add_special_tokens=False).input_ids``), checked for the task metric.
    Answers are tokenized as given, their leading space included.

    Raises
    ------
    EmptyInputError
        No example, or a prompt that is empty or tokenizes to no token.
    ShapeError
        An answer or counterfactual answer that tokenizes to several tokens or to none (the message names
        the example, the text and its ids), or an example whose clean and counterfactual prompts tokenize
        to different lengths (both named).
    ParameterError
        `tokenize` not callable, `name` not a str, an item of `examples` not a `TaskExample`.
    """
    if not callable(tokenize):
        raise ParameterError(f"tokenize must be a callable from text to token ids; got {type(tokenize).__name__}")
    if not isinstance(name, str):
        raise ParameterError(f"name must be a str; got {type(name).__name__}")
    items = check_sequence(examples, "examples")
    if not items:
        raise EmptyInputError(f"task {name!r} holds no examples")
    clean, counterfactual, answers = [], [], []
    for i, ex in enumerate(items):
        if not isinstance(ex, TaskExample):
            raise ParameterError(f"example {i} must be a TaskExample; got {type(ex).__name__}")
        prompts = []
        for what, text in (("clean prompt", ex.clean), ("counterfactual prompt", ex.counterfactual)):
            if not text:
                raise EmptyInputError(f"example {i}: the {what} is empty")
            ids = _ids(tokenize, text, what, i)
            if ids.size == 0:
                raise EmptyInputError(f"example {i}: the {what} {text!r} tokenizes to no token")
            prompts.append(ids)
        if prompts[0].size != prompts[1].size:
            raise ShapeError(
                f"example {i}: the clean prompt has {prompts[0].size} tokens and the counterfactual "
                f"{prompts[1].size}; patching needs the same length (rephrase one, or drop the example)"
            )
        pair = []
        for what, text in (("answer", ex.answer), ("counterfactual answer", ex.counterfactual_answer)):
            ids = _ids(tokenize, text, what, i)
            if ids.size != 1:
                raise ShapeError(
                    f"example {i}: the {what} {text!r} tokenizes to {ids.size} tokens {ids.tolist()}; "
                    "the task metric needs a single token"
                )
            pair.append(int(ids[0]))
        clean.append(_frozen(prompts[0]))
        counterfactual.append(_frozen(prompts[1]))
        answers.append(pair)
    ans = np.asarray(answers, dtype=np.int64)
    return TokenizedTask(
        name,
        tuple(items),
        tuple(clean),
        tuple(counterfactual),
        _frozen(np.ascontiguousarray(ans[:, 0])),
        _frozen(np.ascontiguousarray(ans[:, 1])),
    )
