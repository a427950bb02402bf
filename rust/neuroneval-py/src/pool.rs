//! The library's rayon pool, and `run`: a core call without the GIL on that pool.

use std::sync::{Arc, Mutex};

use neuroneval_core::CoreError;
use pyo3::exceptions::PyRuntimeWarning;
use pyo3::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::errors::to_py_err;

/// The rayon pool, rebuilt after a fork (a forked child has no pool threads) or on request.
static POOL: Mutex<Option<(u32, usize, Arc<ThreadPool>)>> = Mutex::new(None);

/// The requested counts above the CPU count already warned about: one warning per value.
static WARNED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The CPUs this process may run on, asked once (the query reads cgroup files, which costs
/// more than a small call).
fn cpu_count() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `NEURONEVAL_NUM_THREADS` when set (a positive integer, else an error), else the CPU count;
/// capped at the CPU count, since more threads than CPUs only add contention (at 100,000 a
/// call spends minutes starting them). A capped value warns (a `RuntimeWarning`), once per
/// distinct value.
fn configured_threads(py: Python<'_>) -> PyResult<usize> {
    let cpus = cpu_count();
    let text = match std::env::var("NEURONEVAL_NUM_THREADS") {
        Err(_) => return Ok(cpus),
        Ok(v) => v,
    };
    let requested = match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => n,
        // a positive integer beyond usize is just as capped
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => usize::MAX,
        _ => {
            return Err(to_py_err(CoreError::Parameter {
                name: "NEURONEVAL_NUM_THREADS",
                value: format!("{text:?}"),
                reason: "must be a positive integer (or unset, for one thread per CPU)".into(),
            }))
        }
    };
    if requested <= cpus {
        return Ok(requested);
    }
    let first_time = !WARNED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&requested);
    if first_time {
        let message = format!(
            "NEURONEVAL_NUM_THREADS={} exceeds the {cpus} CPUs of this machine; using {cpus}",
            text.trim()
        );
        let message = std::ffi::CString::new(message).expect("no NUL in the message");
        let category = py.get_type::<PyRuntimeWarning>();
        // Raises when warnings are errors; then it warns again on the next call.
        PyErr::warn(py, &category, &message, 1)?;
        WARNED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(requested);
    }
    Ok(cpus)
}

fn pool(py: Python<'_>) -> PyResult<Arc<ThreadPool>> {
    let pid = std::process::id();
    let threads = configured_threads(py)?;
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
    let pool = pool(py)?;
    py.detach(|| pool.install(f)).map_err(to_py_err)
}

/// Below this many input values a call runs on the calling thread: handing it to the pool
/// and back (two wake-ups) costs about as much as the work itself, and a second thread
/// could save at most part of it.
pub const INLINE_VALUES: usize = 1 << 18;

/// How much a call reads, for [`run_sized`]: `values` input values, and whether its work
/// splits at all (one unit against one concept does not: each is transformed by one thread).
#[derive(Clone, Copy, Debug)]
pub struct Work {
    pub values: usize,
    pub splits: bool,
}

impl Work {
    /// `n` inputs of `units` units and `concepts` concepts.
    pub fn of(n: usize, units: usize, concepts: usize) -> Work {
        Work {
            values: n.saturating_mul(units.saturating_add(concepts)),
            splits: units > 1 || concepts > 1,
        }
    }
}

thread_local! {
    /// A one-thread pool made of the calling thread itself (rayon's own fallback where
    /// threads cannot be spawned), so a small call runs where it was made. Built once per
    /// thread that makes one; a forked child keeps it, and it spawns nothing.
    static INLINE: Option<ThreadPool> = ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .ok();
}

/// [`run`], or on the calling thread (still without the GIL) when `work` is too small to
/// gain from the pool ([`INLINE_VALUES`]) or does not split. Results do not depend on which:
/// no value depends on the number of threads.
pub fn run_sized<T: Send>(
    py: Python<'_>,
    work: Work,
    f: impl FnOnce() -> Result<T, CoreError> + Send,
) -> PyResult<T> {
    if work.splits && work.values >= INLINE_VALUES {
        return run(py, f);
    }
    // The environment's thread count is still validated (and warned about) on every call.
    configured_threads(py)?;
    let mut f = Some(f);
    let inline = py.detach(|| {
        INLINE.with(|pool| {
            pool.as_ref()
                .map(|pool| pool.install(|| f.take().expect("called once")()))
        })
    });
    match inline {
        Some(result) => result.map_err(to_py_err),
        // (this thread already belongs to another rayon pool)
        None => run(py, f.take().expect("not called")),
    }
}

/// The number of threads the next call will use (`NEURONEVAL_NUM_THREADS`, at most the CPU
/// count).
#[pyfunction]
pub fn num_threads(py: Python<'_>) -> PyResult<usize> {
    configured_threads(py)
}

/// Ranks vectors of few distinct keys by counting (the default) or, off, by the radix sort:
/// the same results either way, for benchmarks that compare the two paths.
#[pyfunction]
pub fn set_counting_ranks(enabled: bool) {
    neuroneval_core::radix::set_counting_ranks(enabled);
}
