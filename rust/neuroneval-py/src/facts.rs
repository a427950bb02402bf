//! The metric facts the core declares, for `neuroneval.METRICS` and the generated functions.

use neuroneval_core::{Metric, ParamKind, Params};
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

/// One scoring parameter's declaration: name, kind ("real" or "integer"), default, domain
/// (low, low_open, high, high_open), the domain as a sentence, and help.
type Rule = (
    &'static str,
    &'static str,
    f64,
    (f64, bool, f64, bool),
    &'static str,
    &'static str,
);

/// Each scoring parameter's declaration, in the order users pass them: the one declaration
/// that `neuroneval.options` turns into the API's defaults, the CLI's flags and the tests.
#[pyfunction]
pub fn score_param_rules() -> Vec<Rule> {
    Params::RULES
        .iter()
        .map(|r| {
            let kind = match r.kind {
                ParamKind::Real => "real",
                ParamKind::Integer => "integer",
            };
            let d = r.domain;
            (
                r.name,
                kind,
                r.default,
                (d.low, d.low_open, d.high, d.high_open),
                r.rule,
                r.help,
            )
        })
        .collect()
}
