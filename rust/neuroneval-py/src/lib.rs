//! The extension module `neuroneval._core`: convert arguments, release the GIL, call the
//! core, map errors. No algorithm lives here.
//!
//! - `convert`: arguments as core views (numpy read in place);
//! - `errors`: core errors onto `neuroneval.errors`;
//! - `pool`: the thread pool, and running a core call without the GIL;
//! - `params`: `ScoreParams`, the scoring parameters as one validated object;
//! - `scoring`, `facts`: the functions;
//! - `entries`: sparse entries placed into compressed columns (the delphi cache reader).

use pyo3::prelude::*;

mod convert;
mod entries;
mod errors;
mod facts;
mod params;
mod pool;
mod scoring;

/// The kernels allocate and free per-unit buffers of N values; mimalloc reuses freed pages
/// where the system allocator returns them to the OS and faults them in again each time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e` of the v3 header that
/// libmimalloc-sys 0.1.49 builds; `Cargo.lock` pins it).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// How long freed pages stay with the process before mimalloc returns them to the OS. Its
/// default, 10 ms, is shorter than one unit's transforms at N = 10^6: the next block's buffers
/// then come back as fresh pages the kernel zeroes (8% of the CPU of a call measured at
/// N = 10^6). A second keeps them for the call and for a call right after; pages free for
/// longer still go back to the OS, at the allocator's next use.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// The allocator's purge delay, unless `MIMALLOC_PURGE_DELAY` sets it.
fn keep_freed_pages() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: setting an option is thread-safe in mimalloc and takes plain integers.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    keep_freed_pages();
    m.add_class::<params::ScoreParams>()?;
    m.add_class::<scoring::PreparedConcepts>()?;
    m.add_function(wrap_pyfunction!(scoring::prepare_concepts, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::check_arguments, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::check_finite, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::check_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::score_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::score_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::table_scores, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::rank_statistic_columns, m)?)?;
    m.add_function(wrap_pyfunction!(entries::count_entries, m)?)?;
    m.add_function(wrap_pyfunction!(entries::place_entries, m)?)?;
    m.add_function(wrap_pyfunction!(entries::unordered_columns, m)?)?;
    m.add_function(wrap_pyfunction!(facts::metric_names, m)?)?;
    m.add_function(wrap_pyfunction!(facts::metric_facts, m)?)?;
    m.add_function(wrap_pyfunction!(facts::score_param_rules, m)?)?;
    m.add_function(wrap_pyfunction!(pool::num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(pool::set_counting_ranks, m)?)?;
    Ok(())
}
