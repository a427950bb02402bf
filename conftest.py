"""Test collection: the torch-only modules' doctests need torch, which is an optional extra."""

import importlib.util

collect_ignore: list[str] = []
if importlib.util.find_spec("torch") is None:
    collect_ignore += ["python/neuroneval/torch.py", "python/neuroneval/demo.py"]
