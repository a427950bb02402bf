"""MIB's circuit-localization track (SPEC section 7), its scoring side as pure functions.

- `transformer_graph`, `graph_of`: the computational graph of a decoder-only transformer (input,
  heads with query/key/value inputs, MLPs, logits), `Graph`, from its shape or from a Hugging
  Face or transformer-lens model;
- `select_edges` and `prune`: the circuit at a fraction of the edges, dangling parts removed;
  `select_greedy`: MIB's circuit grown from the logits; `select_nodes`, `select_neurons`: node-
  and neuron-level circuits;
- `faithfulness`, `cpr`, `cmd`, `mean_faithfulness` at the ten `FRACTIONS`;
- `weighted_edge_count` with node and neuron masks; `auroc` against a ground-truth circuit
  (MIB's greedy circuits, or ours: `AUROC_SELECTIONS`);
- `ioi_examples`, `arithmetic_examples`, `mcqa_examples`, `tokenize_task`: the tasks' seeded
  prompt pairs (`tasks`);
- `CircuitRun`, `MethodCurve`: a run of the track (edge scores, faithfulness curves, CPR, CMD),
  written and read as files, `circuit_table` across runs; `write_edge_scores` and
  `read_edge_scores` (and `read_node_scores` for a node-level method) in MIB's circuit JSON
  (`results`).

These take plain arrays; the model side (edge patching, attribution methods, the trained
model with a known circuit) is `neuroneval.torch.circuits`.

Examples
--------
>>> import numpy as np
>>> from neuroneval.circuits import FRACTIONS, cmd, cpr, select_edges, transformer_graph
>>> g = transformer_graph(2, 2)
>>> scores = np.linspace(1.0, 0.0, g.n_edges)
>>> int(select_edges(g, scores, 0.5).sum()) <= g.n_edges // 2
True
>>> round(cmd(FRACTIONS, np.linspace(0.2, 1.0, 10)), 4)
0.1225
"""

from __future__ import annotations

from .graph import (
    INPUT,
    LOGITS,
    SUPPORTED_MODEL_TYPES,
    Graph,
    graph_of,
    prune,
    select_edges,
    select_greedy,
    select_neurons,
    select_nodes,
    transformer_graph,
)
from .results import (
    CIRCUIT_METHODS,
    CIRCUIT_TRACK_OPTIONS,
    NODE_METHODS,
    CircuitRun,
    MethodCurve,
    circuit_table,
    edge_names,
    find_circuit_runs,
    format_circuit_table,
    read_circuit_run,
    read_edge_scores,
    read_node_scores,
    write_edge_scores,
)
from .scores import AUROC_SELECTIONS, FRACTIONS, auroc, cmd, cpr, faithfulness, mean_faithfulness, weighted_edge_count
from .tasks import (
    TASK_OPTIONS,
    TASKS,
    TaskExample,
    TokenizedTask,
    arithmetic_examples,
    ioi_examples,
    mcqa_examples,
    tokenize_task,
)

__all__ = [
    "AUROC_SELECTIONS",
    "CIRCUIT_METHODS",
    "CIRCUIT_TRACK_OPTIONS",
    "FRACTIONS",
    "NODE_METHODS",
    "TASKS",
    "TASK_OPTIONS",
    "CircuitRun",
    "MethodCurve",
    "TaskExample",
    "TokenizedTask",
    "arithmetic_examples",
    "circuit_table",
    "edge_names",
    "find_circuit_runs",
    "format_circuit_table",
    "ioi_examples",
    "mcqa_examples",
    "read_circuit_run",
    "read_edge_scores",
    "read_node_scores",
    "tokenize_task",
    "write_edge_scores",
    "INPUT",
    "LOGITS",
    "SUPPORTED_MODEL_TYPES",
    "Graph",
    "auroc",
    "cmd",
    "cpr",
    "faithfulness",
    "graph_of",
    "mean_faithfulness",
    "prune",
    "select_edges",
    "select_greedy",
    "select_neurons",
    "select_nodes",
    "transformer_graph",
    "weighted_edge_count",
]
