//! The metric facts the core declares, for `neuroneval.METRICS` and the generated functions.

use neuroneval_core::Metric;
use pyo3::prelude::*;

/// One metric's facts, in the field order of `neuroneval.MetricInfo`.
type Facts = (
    &'static str,
    bool,
    bool,
    bool,
    Option<(f64, f64)>,
    bool,
    &'static str,
);

/// The metric names, in the library's canonical order.
#[pyfunction]
pub fn metric_names() -> Vec<&'static str> {
    Metric::ALL.iter().map(|m| m.name()).collect()
}

/// Every metric's (name, uses_alpha, uses_lambda, uses_sampling, value_range,
/// passes_sanity, description), in the canonical order.
#[pyfunction]
pub fn metric_facts() -> Vec<Facts> {
    Metric::ALL
        .iter()
        .map(|m| {
            let f = m.facts();
            (
                f.name,
                f.uses_alpha,
                f.uses_lambda,
                f.uses_sampling,
                f.value_range,
                f.passes_sanity,
                f.description,
            )
        })
        .collect()
}
