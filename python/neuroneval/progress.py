"""Progress bars and notices: the one mechanism that `evaluate`, `distributed.evaluate`,
`torch.extract`, the crowd simulator and the CLI share.

Bars are `tqdm` bars drawn on stderr only when it is a terminal; notices ("resuming ...")
go to stderr whenever progress is enabled, so a log or a redirected stream keeps them.

Examples
--------
>>> import io
>>> stream = io.StringIO()
>>> report = Progress(True, stream=stream)
>>> with report.bar("scoring", total=3) as bar:
...     bar.update(3)
>>> report.say("resuming out.parquet: 2 of 3 blocks already finished")
>>> stream.getvalue()
'neuroneval: resuming out.parquet: 2 of 3 blocks already finished\\n'
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """Where a long job reports: bars on a terminal, notices on stderr.

    Parameters
    ----------
    enabled : bool
        False silences bars and notices alike.
    stream : text stream, optional
        stderr (looked up at each call, so a redirected `sys.stderr` receives the output).
    """

    def __init__(self, enabled: bool, *, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def tty(self) -> bool:
        return self.enabled and self.stream.isatty()

    def say(self, message: str) -> None:
        """One notice line, printed above any bar that is running."""
        if self.enabled:
            tqdm.write(f"neuroneval: {message}", file=self.stream)
            self.stream.flush()

    def bar(self, what: str, *, total: int | None, initial: int = 0, unit: str = "it") -> tqdm[Any]:
        """A bar counting to `total` (None: a counter without end), drawn only on a terminal.

        Use it as a context manager and call `update(n)` as work finishes.
        """
        return tqdm(
            total=total,
            initial=initial,
            desc=what,
            unit=unit,
            file=self.stream,
            disable=not self.tty,
            leave=True,
            dynamic_ncols=True,
        )
