//! The library's rayon pool, and `run`: a core call without the GIL on that pool.

use std::sync::{Arc, Mutex};

use neuroneval_core::CoreError;
use pyo3::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::errors::to_py_err;

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
pub fn run<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, CoreError> + Send,
) -> PyResult<T> {
    let pool = pool()?;
    py.detach(|| pool.install(f)).map_err(to_py_err)
}

/// The number of threads the next call will use.
#[pyfunction]
pub fn num_threads() -> PyResult<usize> {
    configured_threads()
}
