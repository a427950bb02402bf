"""`python -m neuroneval ...`: the command line (see `neuroneval.cli`)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
