"""`python -m neuroneval ...`: the command line (see `neuroneval.cli`)."""

from __future__ import annotations

import sys

from .cli import main  # light: the commands are imported inside `main`, where Ctrl-C is handled

if __name__ == "__main__":
    sys.exit(main())
