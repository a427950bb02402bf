//! The scoring functions: extract arguments, run the core without the GIL, convert back.

use neuroneval_core::pair::{table_scores as core_table_scores, Table};
use neuroneval_core::single::{self, RankStatistic};
use neuroneval_core::{ConceptSet, Needs, Params};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::convert::{self, with_view, ConceptsArg, FloatMatrix, SourceArg};
use crate::errors::{shape_error, to_py_err};
use crate::params::ScoreParams;
use crate::pool::{run_sized, Work};

/// Concepts validated and transformed once, for scoring many blocks of units against them.
#[pyclass(frozen, module = "neuroneval._core")]
pub struct PreparedConcepts {
    set: ConceptSet,
    /// The matrix calls' buffers, reused from block to block of a run (freed with this).
    kept: neuroneval_core::KeptBuffers,
}

#[pymethods]
impl PreparedConcepts {
    /// (N, T): the number of inputs and of concepts.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.set.n_inputs, self.set.len())
    }
}

/// Checks metric names (at least one, each known) and parameters without scoring anything,
/// so long jobs fail early.
#[pyfunction]
#[pyo3(signature = (metrics, params=None))]
pub fn check_arguments(
    metrics: Vec<String>,
    params: Option<PyRef<'_, ScoreParams>>,
) -> PyResult<()> {
    convert::metrics(&metrics)?;
    params.map_or(Ok(()), |p| p.0.validate().map_err(to_py_err))
}

/// Validates and transforms concepts once for matrix calls with these metrics.
#[pyfunction]
pub fn prepare_concepts(
    py: Python<'_>,
    concepts: SourceArg<'_>,
    metrics: Vec<String>,
) -> PyResult<PreparedConcepts> {
    let metrics = convert::metrics(&metrics)?;
    let c = convert::source(&concepts, "concepts")?;
    let c = &*c;
    let set = run_sized(py, Work::of(c.rows(), 0, c.cols()), || {
        ConceptSet::build(c, None, &Needs::of(&metrics), true)
    })?;
    Ok(PreparedConcepts {
        set,
        kept: Default::default(),
    })
}

/// The call's parameters: `params` with the two conventions of the NeuronEval reference
/// that only its drop-in (`neuroneval.compat.neuron_eval`) asks for.
fn with_conventions(params: &ScoreParams, binary_units: bool, reference_values: bool) -> Params {
    Params {
        binary_units,
        reference_values,
        ..params.0
    }
}

/// Every requested metric for all (unit, concept) pairs: a list of (K, T) float64 arrays.
/// `binary_units` and `reference_values` as in the core's `Params`.
#[pyfunction]
#[pyo3(signature = (
    activations, concepts, metrics, params, first_unit=0, *, binary_units=false, reference_values=false
))]
#[allow(clippy::too_many_arguments)]
pub fn score_matrix<'py>(
    py: Python<'py>,
    activations: SourceArg<'py>,
    concepts: ConceptsArg<'py>,
    metrics: Vec<String>,
    params: PyRef<'py, ScoreParams>,
    first_unit: usize,
    binary_units: bool,
    reference_values: bool,
) -> PyResult<Vec<Bound<'py, PyArray2<f64>>>> {
    let metrics = convert::metrics(&metrics)?;
    let params = with_conventions(&params, binary_units, reference_values);
    let a = convert::source(&activations, "activations")?;
    let a = &*a;
    let (scores, n_concepts) = match &concepts {
        ConceptsArg::Prepared(prepared) => {
            let prepared = prepared.get();
            let set = &prepared.set;
            let work = Work::of(a.rows(), a.cols(), set.len());
            let scores = run_sized(py, work, || {
                neuroneval_core::score_matrix_with(
                    a,
                    set,
                    &metrics,
                    &params,
                    first_unit,
                    Some(&prepared.kept),
                )
            })?;
            (scores, set.len())
        }
        ConceptsArg::Source(arg) => {
            let c = convert::source(arg, "concepts")?;
            let c = &*c;
            let work = Work::of(a.rows(), a.cols(), c.cols());
            let scores = run_sized(py, work, || {
                neuroneval_core::score_matrix(a, c, &metrics, &params, first_unit)
            })?;
            (scores, c.cols())
        }
    };
    let units = a.cols();
    scores
        .into_iter()
        .map(|s| s.into_pyarray(py).reshape([units, n_concepts]))
        .collect()
}

/// Every requested metric for the listed (unit, concept) pairs: a list of (P,) arrays.
/// `binary_units` and `reference_values` as in the core's `Params`.
#[pyfunction]
#[pyo3(signature = (
    activations, concepts, pairs, metrics, params, *, binary_units=false, reference_values=false
))]
#[allow(clippy::too_many_arguments)]
pub fn score_pairs<'py>(
    py: Python<'py>,
    activations: SourceArg<'py>,
    concepts: SourceArg<'py>,
    pairs: PyReadonlyArray2<'py, i64>,
    metrics: Vec<String>,
    params: PyRef<'py, ScoreParams>,
    binary_units: bool,
    reference_values: bool,
) -> PyResult<Vec<Bound<'py, PyArray1<f64>>>> {
    let metrics = convert::metrics(&metrics)?;
    let params = with_conventions(&params, binary_units, reference_values);
    let list = convert::pairs(&pairs)?;
    let (a, c) = (
        convert::source(&activations, "activations")?,
        convert::source(&concepts, "concepts")?,
    );
    let (a, c) = (&*a, &*c);
    // (a pairs call transforms at most one unit and one concept per pair)
    let work = Work::of(a.rows(), a.cols().min(list.len()), c.cols().min(list.len()));
    let scores = run_sized(py, work, || {
        neuroneval_core::score_pairs(a, c, &list, &metrics, &params)
    })?;
    Ok(scores.into_iter().map(|s| s.into_pyarray(py)).collect())
}

/// Every requested metric of each 2x2 table (n, n11, n10, n01) of a binary unit, used as
/// already binarised, against a binary concept: a list of (P,) arrays, the pair kernel's
/// values for such vectors.
#[pyfunction]
#[pyo3(
    signature = (n, n11, n10, n01, metrics, lam=None),
    text_signature = "(n, n11, n10, n01, metrics, lam=1.0)"
)]
pub fn table_scores<'py>(
    py: Python<'py>,
    n: PyReadonlyArray1<'py, f64>,
    n11: PyReadonlyArray1<'py, f64>,
    n10: PyReadonlyArray1<'py, f64>,
    n01: PyReadonlyArray1<'py, f64>,
    metrics: Vec<String>,
    lam: Option<Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyArray1<f64>>>> {
    let metrics = convert::metrics(&metrics)?;
    let lam = match lam.filter(|v| !v.is_none()) {
        Some(v) => convert::parameter(Params::rule("lam").expect("lam has a rule"), &v)?,
        None => Params::default().lambda,
    };
    let (n, n11, n10, n01) = (n.as_array(), n11.as_array(), n10.as_array(), n01.as_array());
    if [n11.len(), n10.len(), n01.len()]
        .iter()
        .any(|&l| l != n.len())
    {
        return Err(shape_error(format!(
            "the table counts must have one length; got n {}, n11 {}, n10 {}, n01 {}",
            n.len(),
            n11.len(),
            n10.len(),
            n01.len()
        )));
    }
    let tables = (0..n.len())
        .map(|i| Table::new(n[i], n11[i], n10[i], n01[i]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(to_py_err)?;
    let work = Work {
        values: 4 * tables.len(),
        splits: tables.len() > 1,
    };
    let scores = run_sized(py, work, || core_table_scores(&tables, &metrics, lam))?;
    Ok(scores.into_iter().map(|s| s.into_pyarray(py)).collect())
}

/// ROC AUC or average precision of each column pair (labels[:, j], scores[:, j]).
#[pyfunction]
pub fn rank_statistic_columns<'py>(
    py: Python<'py>,
    statistic: &str,
    labels: FloatMatrix<'py>,
    scores: FloatMatrix<'py>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let stat = match statistic {
        "roc_auc" => RankStatistic::RocAuc,
        "average_precision" => RankStatistic::AveragePrecision,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown statistic {other:?}"
            )))
        }
    };
    let out = with_view!(&labels, "labels", |y| {
        with_view!(&scores, "scores", |s| run_sized(
            py,
            Work::of(y.rows(), y.cols(), s.cols()),
            || single::columns(stat, y, s)
        )?)
    });
    Ok(out.into_pyarray(py))
}

/// The core's check of `activations` for NaN and infinities, the error's (row, column) moved by
/// (`first_row`, `first_column`): the one wording of that error, also for scans of a larger
/// matrix done in Python.
#[pyfunction]
#[pyo3(signature = (activations, first_row=0, first_column=0))]
pub fn check_finite(
    activations: SourceArg<'_>,
    first_row: usize,
    first_column: usize,
) -> PyResult<()> {
    let a = convert::source(&activations, "activations")?;
    let columns: Vec<usize> = (0..a.cols()).collect();
    a.check_finite("activations", &columns)
        .map_err(|e| to_py_err(e.offset_by(first_row, first_column)))
}

/// The core's check that every (unit, concept) pair of an (M, 2) int64 array indexes inside
/// `units` x `concepts`: the one wording of that error, also for pairs that are not scored here.
#[pyfunction]
pub fn check_pairs(
    pairs: PyReadonlyArray2<'_, i64>,
    units: usize,
    concepts: usize,
) -> PyResult<()> {
    let list = convert::pairs(&pairs)?;
    neuroneval_core::check_pairs(&list, units, concepts).map_err(to_py_err)
}
