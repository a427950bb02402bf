//! The extension module `neuroneval._core`: convert arguments, release the GIL, call the
//! core, map errors. No algorithm lives here.

use std::sync::{Arc, Mutex};

use neuroneval_core::single::{self, RankStatistic};
use neuroneval_core::{CoreError, Element, MatrixView, Metric, Params};
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyType;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// The kernels allocate and free per-unit buffers of N values; mimalloc reuses freed pages
/// where the system allocator returns them to the OS and faults them in again each time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A 2-D float array of either supported dtype, borrowed read-only from numpy.
#[derive(FromPyObject)]
enum FloatMatrix<'py> {
    F64(PyReadonlyArray2<'py, f64>),
    F32(PyReadonlyArray2<'py, f32>),
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
        }
    };
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

fn configured_threads() -> usize {
    std::env::var("NEURONEVAL_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn pool() -> PyResult<Arc<ThreadPool>> {
    let pid = std::process::id();
    let threads = configured_threads();
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

/// Every requested metric for all (unit, concept) pairs: a list of (K, T) float64 arrays.
#[pyfunction]
#[pyo3(signature = (activations, concepts, metrics, alpha, lam, k, top_alpha, seed))]
#[allow(clippy::too_many_arguments)]
fn score_matrix<'py>(
    py: Python<'py>,
    activations: FloatMatrix<'py>,
    concepts: FloatMatrix<'py>,
    metrics: Vec<String>,
    alpha: f64,
    lam: f64,
    k: usize,
    top_alpha: f64,
    seed: u64,
) -> PyResult<Vec<Bound<'py, PyArray2<f64>>>> {
    let metrics = parse_metrics(&metrics)?;
    let params = params(alpha, lam, k, top_alpha, seed);
    let (units, n_concepts, scores) = with_view!(&activations, "activations", |a| {
        with_view!(&concepts, "concepts", |c| {
            let (units, n_concepts) = (a.cols(), c.cols());
            let scores = run(py, || {
                neuroneval_core::score_matrix(a, c, &metrics, &params)
            })?;
            (units, n_concepts, scores)
        })
    });
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
    activations: FloatMatrix<'py>,
    concepts: FloatMatrix<'py>,
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
    let scores = with_view!(&activations, "activations", |a| {
        with_view!(&concepts, "concepts", |c| {
            run(py, || {
                neuroneval_core::score_pairs(a, c, &list, &metrics, &params)
            })?
        })
    });
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
fn num_threads() -> usize {
    configured_threads()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(score_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(score_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(rank_statistic_columns, m)?)?;
    m.add_function(wrap_pyfunction!(metric_names, m)?)?;
    m.add_function(wrap_pyfunction!(num_threads, m)?)?;
    Ok(())
}
