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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
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
