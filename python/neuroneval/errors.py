"""The exception hierarchy. Every error the library raises derives from `NeuronEvalError`;
errors caused by bad input also derive from `ValueError`; an output that cannot be written
(a full disk, an I/O error) raises `OutputWriteError`, which is an `OSError`."""

from __future__ import annotations

__all__ = [
    "NeuronEvalError",
    "InvalidInputError",
    "ShapeError",
    "EmptyInputError",
    "NonFiniteError",
    "ConceptRangeError",
    "ParameterError",
    "PairIndexError",
    "UnknownMetricError",
    "LabelError",
    "DTypeError",
    "SourceError",
    "ResumeError",
    "OutputError",
    "OutputLockedError",
    "OutputWriteError",
]


class NeuronEvalError(Exception):
    """Base class of every neuroneval error."""


class InvalidInputError(NeuronEvalError, ValueError):
    """The input is at fault; the message says which input and where."""


class ShapeError(InvalidInputError):
    """Wrong rank, or two inputs disagree on a dimension."""


class EmptyInputError(InvalidInputError):
    """An input with no rows or no columns, or no metric requested."""


class NonFiniteError(InvalidInputError):
    """NaN or infinity in activations, concepts or scores (the message names row and column)."""


class ConceptRangeError(InvalidInputError):
    """A concept value outside [0, 1] (the message names row and column)."""


class ParameterError(InvalidInputError):
    """A parameter outside its domain, such as alpha outside (0, 1]."""


class PairIndexError(InvalidInputError):
    """A (unit, concept) pair outside the matrices."""


class UnknownMetricError(InvalidInputError):
    """A metric name that is not in `neuroneval.METRICS`."""


class LabelError(InvalidInputError):
    """Labels that are not binary where binary labels are required."""


class DTypeError(InvalidInputError):
    """An array whose dtype cannot be read as numbers."""


class SourceError(InvalidInputError):
    """A file or directory that cannot be read as activations or concepts (a corrupt `.npy`,
    a bad shard manifest, an unreadable concept table)."""


class ResumeError(InvalidInputError):
    """An output whose unfinished run was started with different arguments or data."""


class OutputError(InvalidInputError):
    """An output path that cannot be used: its directory is missing, it is a directory, or
    it names one of the run's inputs."""


class OutputLockedError(OutputError):
    """Another run (the message names its process and host) is writing the same output."""


class OutputWriteError(NeuronEvalError, OSError):
    """Writing an output failed (a full disk, an I/O error): the message names the path and
    the step; what was written before (an unfinished run's parts) is intact and resumable."""
