"""The experiments: demos, bundled real data and models, and reproductions of the paper.

- `neuroneval.experiments.digits`: a small CNN on scikit-learn's digits, end to end
  (``python -m neuroneval.experiments.digits``, ``neuroneval demo``);
- `neuroneval.experiments.text_demo`: MiniLM's FFN neurons over gensim's Lee corpus
  (``neuroneval demo --text``);
- `neuroneval.experiments.text`: the Lee-corpus sentences, lexicon concepts and MiniLM helpers;
- `neuroneval.experiments.composite`: a CNN on two-digit composites of the digits, and the
  paper-like sanity-check settings built from it;
- `neuroneval.experiments.numbers`: the paper-like crowd setting (two-digit numbers, rare concepts)
  that ``neuroneval demo`` simulates;
- `neuroneval.experiments.reproduce`: the paper's Table 3 and crowd study on these models
  (``python -m neuroneval.experiments.reproduce``);
- `neuroneval.experiments.common`: what the demos share.

They build on the library's public names; the library never imports them. Importing this
package imports none of its modules (nor torch).
"""
