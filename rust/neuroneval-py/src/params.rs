//! `ScoreParams`: the five scoring parameters as one frozen, validated Python object.
//!
//! Each value is extracted by type through `convert::parameter` (the one door of every
//! parameter); every rule is the core's (`Params::RULES`, `Params::validate`).

use neuroneval_core::Params;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyTuple};

use crate::convert::parameter;
use crate::errors::to_py_err;

/// The five scoring parameters, frozen and validated once by the core (`Params::validate`).
///
/// Parameters
/// ----------
/// alpha : float
///     Top-alpha fraction that binarises each unit, 0 < alpha <= 1.
/// lam : float
///     wpmi's lambda, a finite number >= 0.
/// k : int
///     Inputs the top-random metrics draw from the top and from all inputs, each; k >= 1.
/// top_alpha : float
///     The top fraction the top-random metrics draw from, 0 < top_alpha <= 1.
/// seed : int
///     Seed of every random draw, an integer in [0, 2^64).
///
/// The defaults are the core's declaration (`repr(ScoreParams())` shows them).
/// A value outside its domain, or of the wrong type (a bool, a string, a complex number, an
/// array; a float, even a whole one, for k or seed), raises
/// `neuroneval.errors.ParameterError` naming the parameter. None stands for the default.
/// `replace(**changes)` returns a validated copy; `to_dict()` the values as a JSON-able dict.
#[pyclass(
    frozen,
    eq,
    skip_from_py_object,
    module = "neuroneval._core",
    name = "ScoreParams"
)]
#[derive(Clone, PartialEq)]
pub struct ScoreParams(pub Params);

const FIELDS: [&str; 5] = ["alpha", "lam", "k", "top_alpha", "seed"];

impl ScoreParams {
    /// `base` with the named fields set from Python values, validated.
    fn with<'py>(
        base: Params,
        changes: impl IntoIterator<Item = (String, Option<Bound<'py, PyAny>>)>,
    ) -> PyResult<ScoreParams> {
        let mut p = base;
        for (key, value) in changes {
            let Some(value) = value.filter(|v| !v.is_none()) else {
                continue;
            };
            let unknown = || {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "unexpected parameter {key:?}; ScoreParams has {}",
                    FIELDS.join(", ")
                ))
            };
            let rule = Params::rule(&key).ok_or_else(unknown)?;
            match rule.name {
                "alpha" => p.alpha = parameter(rule, &value)?,
                "lam" => p.lambda = parameter(rule, &value)?,
                "k" => p.top_random_k = parameter(rule, &value)?,
                "top_alpha" => p.top_random_alpha = parameter(rule, &value)?,
                "seed" => p.seed = parameter(rule, &value)?,
                _ => return Err(unknown()),
            }
        }
        p.validate().map_err(to_py_err)?;
        Ok(ScoreParams(p))
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let p = &self.0;
        (
            p.alpha,
            p.lambda,
            p.top_random_k,
            p.top_random_alpha,
            p.seed,
        )
            .into_pyobject(py)
    }
}

#[pymethods]
impl ScoreParams {
    /// Each parameter defaults to the core's default (None also stands for it).
    #[new]
    #[pyo3(
        signature = (alpha=None, lam=None, k=None, top_alpha=None, seed=None),
        text_signature = "(alpha=None, lam=None, k=None, top_alpha=None, seed=None)"
    )]
    fn new(
        alpha: Option<Bound<'_, PyAny>>,
        lam: Option<Bound<'_, PyAny>>,
        k: Option<Bound<'_, PyAny>>,
        top_alpha: Option<Bound<'_, PyAny>>,
        seed: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let given = FIELDS
            .iter()
            .map(|f| f.to_string())
            .zip([alpha, lam, k, top_alpha, seed]);
        ScoreParams::with(Params::default(), given)
    }

    /// Top-alpha fraction that binarises each unit, 0 < alpha <= 1.
    #[getter]
    fn alpha(&self) -> f64 {
        self.0.alpha
    }

    /// wpmi's lambda, >= 0.
    #[getter]
    fn lam(&self) -> f64 {
        self.0.lambda
    }

    /// Inputs the top-random metrics draw per half, >= 1.
    #[getter]
    fn k(&self) -> usize {
        self.0.top_random_k
    }

    /// The top fraction the top-random metrics draw from, 0 < top_alpha <= 1.
    #[getter]
    fn top_alpha(&self) -> f64 {
        self.0.top_random_alpha
    }

    /// Seed of every random draw, in [0, 2^64).
    #[getter]
    fn seed(&self) -> u64 {
        self.0.seed
    }

    /// A copy with some parameters changed, validated again.
    #[pyo3(signature = (**changes))]
    fn replace(&self, changes: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut list = Vec::new();
        if let Some(changes) = changes {
            for (key, value) in changes.iter() {
                list.push((key.extract::<String>()?, Some(value)));
            }
        }
        ScoreParams::with(self.0, list)
    }

    /// The parameters as a JSON-able dict, in field order.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (key, value) in FIELDS.iter().zip(self.values(py)?.iter()) {
            d.set_item(key, value)?;
        }
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let p = &self.0;
        let float = |v: f64| -> PyResult<String> { Ok(PyFloat::new(py, v).repr()?.to_string()) };
        Ok(format!(
            "ScoreParams(alpha={}, lam={}, k={}, top_alpha={}, seed={})",
            float(p.alpha)?,
            float(p.lambda)?,
            p.top_random_k,
            float(p.top_random_alpha)?,
            p.seed
        ))
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.values(py)?.hash()
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, pyo3::types::PyType>, Bound<'py, PyTuple>)> {
        Ok((slf.get_type(), slf.get().values(slf.py())?))
    }
}
