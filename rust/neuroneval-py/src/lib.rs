//! The extension module `neuroneval._core`: convert arguments, release the GIL, call the
//! core, map errors. No algorithm lives here.

use std::sync::{Arc, Mutex};

use half::f16;
use neuroneval_core::single::{self, RankStatistic};
use neuroneval_core::{
    ConceptSet, CoreError, Element, MatrixSource, MatrixView, Metric, Needs, Params, RowShards,
    SparseColumns,
};
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyType;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// The kernels allocate and free per-unit buffers of N values; mimalloc reuses freed pages
/// where the system allocator returns them to the OS and faults them in again each time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A 2-D float array of a supported dtype, borrowed read-only from numpy.
#[derive(FromPyObject)]
enum FloatMatrix<'py> {
    F64(PyReadonlyArray2<'py, f64>),
    F32(PyReadonlyArray2<'py, f32>),
    F16(PyReadonlyArray2<'py, f16>),
}

/// A strided core view of a numpy array, without copying.
fn view<'a, E: Element + numpy::Element>(
    array: &'a PyReadonlyArray2<'_, E>,
    name: &str,
) -> PyResult<MatrixView<'a, E>> {
    let shape = array.shape();
    let (rows, cols) = (shape[0], shape[1]);
    let item = std::mem::size_of::<E>() as isize;
    let strides = array.strides();
    if strides.iter().any(|&s| s < 0 || s % item != 0) {
        return Err(to_py_err(CoreError::Shape(format!(
            "{name} has negative or misaligned strides; pass a contiguous copy"
        ))));
    }
    let (rs, cs) = ((strides[0] / item) as usize, (strides[1] / item) as usize);
    let len = if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs + 1
    };
    // SAFETY: numpy guarantees that every element (i, j) with i < rows, j < cols lies at
    // data + i*rs + j*cs for this array, so [data, data + len) is inside its buffer; the
    // read-only borrow held by `array` keeps it alive and unwritten for 'a.
    let data = unsafe { std::slice::from_raw_parts(array.data(), len) };
    MatrixView::new(data, rows, cols, rs, cs).map_err(to_py_err)
}

/// Applies `f` to the core views of one float matrix, whatever its dtype.
macro_rules! with_view {
    ($m:expr, $name:expr, |$v:ident| $body:expr) => {
        match $m {
            FloatMatrix::F64(x) => {
                let $v = view(x, $name)?;
                $body
            }
            FloatMatrix::F32(x) => {
                let $v = view(x, $name)?;
                $body
            }
            FloatMatrix::F16(x) => {
                let $v = view(x, $name)?;
                $body
            }
        }
    };
}

/// A contiguous 1-D float array of a supported dtype (the values of a sparse matrix).
#[derive(FromPyObject)]
enum FloatVector<'py> {
    F64(PyReadonlyArray1<'py, f64>),
    F32(PyReadonlyArray1<'py, f32>),
    F16(PyReadonlyArray1<'py, f16>),
}

/// A matrix as Python hands it over: one array (in memory or memory-mapped), a CSC tuple
/// `(rows, indptr, indices, values)`, or a list of arrays stacked along the rows.
#[derive(FromPyObject)]
enum SourceArg<'py> {
    Dense(FloatMatrix<'py>),
    Sparse(
        (
            usize,
            PyReadonlyArray1<'py, i64>,
            PyReadonlyArray1<'py, i64>,
            FloatVector<'py>,
        ),
    ),
    Shards(Vec<FloatMatrix<'py>>),
}

/// Concepts as a matrix, or transformed once by `prepare_concepts`.
#[derive(FromPyObject)]
enum ConceptsArg<'py> {
    Prepared(Bound<'py, PreparedConcepts>),
    Source(SourceArg<'py>),
}

/// Concepts validated and transformed once, for scoring many blocks of units against them.
#[pyclass(frozen, module = "neuroneval._core")]
struct PreparedConcepts {
    set: ConceptSet,
}

#[pymethods]
impl PreparedConcepts {
    /// (N, T): the number of inputs and of concepts.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.set.n_inputs, self.set.len())
    }
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>, what: &str) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        to_py_err(CoreError::Shape(format!(
            "{what} must be a contiguous 1-D array"
        )))
    })
}

/// The core source that reads `arg` in place.
fn source<'a>(arg: &'a SourceArg<'_>, name: &str) -> PyResult<Box<dyn MatrixSource + 'a>> {
    Ok(match arg {
        SourceArg::Dense(m) => with_view!(m, name, |v| Box::new(v) as Box<dyn MatrixSource>),
        SourceArg::Sparse((rows, indptr, indices, values)) => {
            let (indptr, indices) = (slice(indptr, name)?, slice(indices, name)?);
            macro_rules! sparse {
                ($v:expr) => {
                    Box::new(
                        SparseColumns::new(*rows, indptr, indices, slice($v, name)?)
                            .map_err(to_py_err)?,
                    ) as Box<dyn MatrixSource>
                };
            }
            match values {
                FloatVector::F64(v) => sparse!(v),
                FloatVector::F32(v) => sparse!(v),
                FloatVector::F16(v) => sparse!(v),
            }
        }
        SourceArg::Shards(list) => {
            macro_rules! shards {
                ($variant:ident) => {{
                    let views = list
                        .iter()
                        .map(|m| match m {
                            FloatMatrix::$variant(x) => view(x, name),
                            _ => Err(to_py_err(CoreError::Shape(format!(
                                "the shards of {name} must all have the same dtype"
                            )))),
                        })
                        .collect::<PyResult<Vec<_>>>()?;
                    Box::new(RowShards::new(views).map_err(to_py_err)?) as Box<dyn MatrixSource>
                }};
            }
            match list.first() {
                Some(FloatMatrix::F32(_)) => shards!(F32),
                Some(FloatMatrix::F16(_)) => shards!(F16),
                _ => shards!(F64),
            }
        }
    })
}

/// Maps a core error onto the Python hierarchy in `neuroneval.errors`.
fn to_py_err(e: CoreError) -> PyErr {
    let class = match &e {
        CoreError::Shape(_) => "ShapeError",
        CoreError::Empty(_) => "EmptyInputError",
        CoreError::NonFinite { .. } => "NonFiniteError",
        CoreError::ConceptRange { .. } => "ConceptRangeError",
        CoreError::Parameter { .. } => "ParameterError",
        CoreError::PairOutOfRange { .. } => "PairIndexError",
        CoreError::UnknownMetric(..) => "UnknownMetricError",
        CoreError::NonBinaryLabel { .. } => "LabelError",
    };
    let message = e.to_string();
    Python::attach(|py| {
        match py
            .import("neuroneval.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| Ok(c.cast_into::<PyType>()?))
        {
            Ok(cls) => PyErr::from_type(cls, message),
            Err(import_error) => import_error,
        }
    })
}

/// The rayon pool, rebuilt after a fork (a forked child has no pool threads) or on request.
static POOL: Mutex<Option<(u32, usize, Arc<ThreadPool>)>> = Mutex::new(None);

/// `NEURONEVAL_NUM_THREADS` when set (a positive integer, else an error), else the CPU count.
fn configured_threads() -> PyResult<usize> {
    match std::env::var("NEURONEVAL_NUM_THREADS") {
        Err(_) => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(to_py_err(CoreError::Parameter {
                name: "NEURONEVAL_NUM_THREADS",
                value: format!("{v:?}"),
                reason: "must be a positive integer (or unset, for one thread per CPU)",
            })),
        },
    }
}

fn pool() -> PyResult<Arc<ThreadPool>> {
    let pid = std::process::id();
    let threads = configured_threads()?;
    let mut guard = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, t, pool)) = guard.as_ref() {
        if *p == pid && *t == threads {
            return Ok(pool.clone());
        }
    }
    let pool = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("neuroneval-{i}"))
            .build()
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?,
    );
    *guard = Some((pid, threads, pool.clone()));
    Ok(pool)
}

/// Runs `f` without the GIL on the library's thread pool.
fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, CoreError> + Send) -> PyResult<T> {
    let pool = pool()?;
    py.detach(|| pool.install(f)).map_err(to_py_err)
}

fn parse_metrics(names: &[String]) -> PyResult<Vec<Metric>> {
    names
        .iter()
        .map(|n| Metric::from_name(n).map_err(to_py_err))
        .collect()
}

fn params(alpha: f64, lam: f64, k: usize, top_alpha: f64, seed: u64) -> Params {
    Params {
        alpha,
        lambda: lam,
        top_random_k: k,
        top_random_alpha: top_alpha,
        seed,
    }
}

/// Checks metric names and parameters without scoring anything, so long jobs fail early.
#[pyfunction]
#[pyo3(signature = (metrics, alpha, lam, k, top_alpha, seed))]
fn check_arguments(
    metrics: Vec<String>,
    alpha: f64,
    lam: f64,
    k: usize,
    top_alpha: f64,
    seed: u64,
) -> PyResult<()> {
    parse_metrics(&metrics)?;
    params(alpha, lam, k, top_alpha, seed)
        .validate()
        .map_err(to_py_err)
}

/// Validates and transforms concepts once for matrix calls with these metrics.
#[pyfunction]
fn prepare_concepts(
    py: Python<'_>,
    concepts: SourceArg<'_>,
    metrics: Vec<String>,
) -> PyResult<PreparedConcepts> {
    let metrics = parse_metrics(&metrics)?;
    let c = source(&concepts, "concepts")?;
    let c = &*c;
    let set = run(py, || {
        ConceptSet::build(c, None, &Needs::of(&metrics), true)
    })?;
    Ok(PreparedConcepts { set })
}

/// Every requested metric for all (unit, concept) pairs: a list of (K, T) float64 arrays.
#[pyfunction]
#[pyo3(signature = (activations, concepts, metrics, alpha, lam, k, top_alpha, seed, first_unit=0))]
#[allow(clippy::too_many_arguments)]
fn score_matrix<'py>(
    py: Python<'py>,
    activations: SourceArg<'py>,
    concepts: ConceptsArg<'py>,
    metrics: Vec<String>,
    alpha: f64,
    lam: f64,
    k: usize,
    top_alpha: f64,
    seed: u64,
    first_unit: usize,
) -> PyResult<Vec<Bound<'py, PyArray2<f64>>>> {
    let metrics = parse_metrics(&metrics)?;
    let params = params(alpha, lam, k, top_alpha, seed);
    let a = source(&activations, "activations")?;
    let a = &*a;
    let (scores, n_concepts) = match &concepts {
        ConceptsArg::Prepared(prepared) => {
            let set = &prepared.get().set;
            let scores = run(py, || {
                neuroneval_core::score_matrix_with(a, set, &metrics, &params, first_unit)
            })?;
            (scores, set.len())
        }
        ConceptsArg::Source(arg) => {
            let c = source(arg, "concepts")?;
            let c = &*c;
            let scores = run(py, || {
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
#[pyfunction]
#[pyo3(signature = (activations, concepts, pairs, metrics, alpha, lam, k, top_alpha, seed))]
#[allow(clippy::too_many_arguments)]
fn score_pairs<'py>(
    py: Python<'py>,
    activations: SourceArg<'py>,
    concepts: SourceArg<'py>,
    pairs: PyReadonlyArray2<'py, i64>,
    metrics: Vec<String>,
    alpha: f64,
    lam: f64,
    k: usize,
    top_alpha: f64,
    seed: u64,
) -> PyResult<Vec<Bound<'py, PyArray1<f64>>>> {
    let metrics = parse_metrics(&metrics)?;
    let params = params(alpha, lam, k, top_alpha, seed);
    let pair_view = view(&pairs, "pairs")?;
    if pair_view.cols() != 2 {
        return Err(to_py_err(CoreError::Shape(format!(
            "pairs must have shape (P, 2), got ({}, {})",
            pair_view.rows(),
            pair_view.cols()
        ))));
    }
    let list: Vec<(i64, i64)> = (0..pair_view.rows())
        .map(|p| (pair_view.get_raw(p, 0), pair_view.get_raw(p, 1)))
        .collect();
    let (a, c) = (
        source(&activations, "activations")?,
        source(&concepts, "concepts")?,
    );
    let (a, c) = (&*a, &*c);
    let scores = run(py, || {
        neuroneval_core::score_pairs(a, c, &list, &metrics, &params)
    })?;
    Ok(scores.into_iter().map(|s| s.into_pyarray(py)).collect())
}

/// ROC AUC or average precision of each column pair (labels[:, j], scores[:, j]).
#[pyfunction]
fn rank_statistic_columns<'py>(
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
        with_view!(&scores, "scores", |s| run(py, || single::columns(
            stat, y, s
        ))?)
    });
    Ok(out.into_pyarray(py))
}

/// The metric names, in the library's canonical order.
#[pyfunction]
fn metric_names() -> Vec<&'static str> {
    Metric::ALL.iter().map(|m| m.name()).collect()
}

/// The number of threads the next call will use.
#[pyfunction]
fn num_threads() -> PyResult<usize> {
    configured_threads()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PreparedConcepts>()?;
    m.add_function(wrap_pyfunction!(prepare_concepts, m)?)?;
    m.add_function(wrap_pyfunction!(check_arguments, m)?)?;
    m.add_function(wrap_pyfunction!(score_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(score_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(rank_statistic_columns, m)?)?;
    m.add_function(wrap_pyfunction!(metric_names, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    Ok(())
}
