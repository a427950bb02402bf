//! Sweeps over one unit's inputs that produce a sum for every concept at once.
//!
//! They read the concepts' entries by input (CSR) sequentially and add into short per-concept
//! accumulators, instead of gathering the unit's values once per concept. Each sum adds the
//! same terms in the same (ascending input) order as the pair kernel, so both paths give
//! bit-identical results.

use crate::concepts::{ConceptSet, LabelIndex, RowIndex};
use crate::metric::Needs;
use crate::pair::{ForwardAccumulator, ForwardSums, InverseSums, Products};
use crate::ranks::{finish_ap, group_weight};
use crate::simd::prefetch;
use crate::unit::{SparseEntries, UnitProfile};

pub use crate::by_concept::{inverse_by_concept, ByConcept};

/// Forward sums over the unit's top set, for every concept.
pub fn forward(
    unit: &UnitProfile,
    set: &ConceptSet,
    rows: &RowIndex,
    needs: &Needs,
) -> Vec<ForwardSums> {
    let mut acc = vec![ForwardAccumulator::default(); set.len()];
    let ranked = !rows.rank.is_empty();
    let top = &unit.top;
    for (q, &i) in top.iter().enumerate() {
        // The top set's inputs lie far apart (0.5% of them, say): each one's entries would
        // miss the cache, so fetch ahead in two stages, as the AP walk does.
        if let Some(&far) = top.get(q + 2 * WALK_PREFETCH_DISTANCE) {
            prefetch(rows.ptr.as_ptr().wrapping_add(far as usize));
        }
        if let Some(&ahead) = top.get(q + WALK_PREFETCH_DISTANCE) {
            let s = rows.ptr[ahead as usize];
            prefetch(rows.concept.as_ptr().wrapping_add(s));
            prefetch(rows.value.as_ptr().wrapping_add(s));
            if ranked {
                prefetch(rows.rank.as_ptr().wrapping_add(s));
                prefetch(rows.at_least.as_ptr().wrapping_add(s));
            }
        }
        for j in rows.ptr[i as usize]..rows.ptr[i as usize + 1] {
            let (rank, at_least) = if ranked {
                (rows.rank[j], rows.at_least[j])
            } else {
                (0.0, 0)
            };
            acc[rows.concept[j] as usize].add(rows.value[j], rank, at_least, needs);
        }
    }
    let (nb, n) = (unit.n_top, unit.n());
    acc.iter_mut()
        .zip(&set.columns)
        .map(|(a, col)| a.finish(nb, n, col, needs))
        .collect()
}

/// Inverse sums over every concept's positive labels.
/// `label_sums`, when given, are the label sums already computed for the block
/// ([`label_sums`]); then only the AP walk runs here.
pub fn inverse(
    unit: &UnitProfile,
    set: &ConceptSet,
    labels: &LabelIndex,
    needs: &Needs,
    walk: &mut WalkLabels,
    label_sums: Option<Vec<InverseSums>>,
) -> Vec<InverseSums> {
    let t = set.len();
    let n = unit.n();
    let mid = (n as f64 + 1.0) / 2.0;
    let summed = label_sums.is_some();
    // Both sums of a concept side by side: each label touches one cache line.
    let mut out = label_sums.unwrap_or_else(|| vec![InverseSums::default(); t]);
    for i in (0..n).filter(|_| needs.inverse_sums && !summed) {
        let (s, e) = (labels.ptr[i], labels.ptr[i + 1]);
        if s == e {
            continue;
        }
        let a = unit.centred[i];
        let r = if needs.order {
            unit.centred_rank[i] + mid
        } else {
            0.0
        };
        for &c in &labels.concept[s..e] {
            let o = &mut out[c as usize];
            o.centred_sum += a;
            o.rank_sum += r;
        }
    }
    if needs.inverse_ap {
        let ap = if labels.ptr.len() * std::mem::size_of::<usize>() > REORDER_ABOVE_BYTES {
            walk.fill(&unit.order, |e| e, labels);
            ap_walk(|q| walk.at(q), |_| {}, &unit.group_end, None, set)
        } else {
            let list = |i: usize| &labels.concept[labels.ptr[i]..labels.ptr[i + 1]];
            let order = &unit.order;
            // Label lists are read in activation order, i.e. at random: fetch ahead, in
            // two stages: the list's offset further ahead, then the list itself.
            let fetch_ahead = |q: usize| {
                if let Some(&far) = order.get(q + 2 * WALK_PREFETCH_DISTANCE) {
                    prefetch(labels.ptr.as_ptr().wrapping_add(far as usize));
                }
                if let Some(&ahead) = order.get(q + WALK_PREFETCH_DISTANCE) {
                    // the list's first and last label: a list may straddle two lines
                    let (s, e) = (labels.ptr[ahead as usize], labels.ptr[ahead as usize + 1]);
                    let concept = labels.concept.as_ptr();
                    prefetch(concept.wrapping_add(s));
                    prefetch(concept.wrapping_add(e.saturating_sub(1)));
                }
            };
            ap_walk(
                |q| list(order[q] as usize),
                fetch_ahead,
                &unit.group_end,
                None,
                set,
            )
        };
        for (o, ap) in out.iter_mut().zip(ap) {
            o.ap = ap;
        }
    }
    out
}

/// How the inverse metrics reach a unit's values ([`inverse_layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InverseLayout {
    /// Concept by concept ([`inverse_by_concept`]): one pass in input order appends each
    /// positive's group end to its concept's run; each run is then sorted for the AP sum.
    ByConcept,
    /// Input by input ([`inverse`], [`inverse_sparse`]): the label sums over every input's
    /// labels, and the AP walk down the unit's descending order.
    Walk,
}

/// Up to this many labels (positives of all concepts) per input, and up to
/// [`BY_CONCEPT_MAX_CONCEPTS`] concepts, the inverse metrics go concept by concept: a label
/// then costs an append and its share of a short radix sort, where the walk pays for every
/// walked value (each of N inputs, or of a sparse unit's entries) reads at random to lay out
/// its labels. Measured on the out-of-core workload (N = 10^6, 100 concepts of 1%
/// positives, float16 ReLU units): inverse_auprc 18-19 ns of CPU per value concept by
/// concept, 26-35 by the walk.
pub const BY_CONCEPT_LABELS_PER_INPUT: usize = 8;

/// Past this many concepts the appends of [`inverse_by_concept`] go to as many streams, more
/// than L1 holds: on the foundation workload (N = 50,000, 1,000 concepts of 1%) inverse_auprc
/// ran at 0.15 M pairs/s concept by concept against 0.77 M by the walk.
pub const BY_CONCEPT_MAX_CONCEPTS: usize = 256;

/// The layout for `labels` positive labels in all of `concepts` concepts over `n` inputs.
/// Both layouts add the same terms in the same order: the choice changes no bit of any
/// result.
pub fn inverse_layout(labels: usize, concepts: usize, n: usize) -> InverseLayout {
    if labels <= BY_CONCEPT_LABELS_PER_INPUT.saturating_mul(n)
        && concepts <= BY_CONCEPT_MAX_CONCEPTS
    {
        InverseLayout::ByConcept
    } else {
        InverseLayout::Walk
    }
}

/// Above this size of the label index (at N of about 130,000 inputs), the AP walk first
/// lays the label lists out in activation order: reading them at random would miss the
/// cache on nearly every input. Below it they stay in cache and are read in place.
const REORDER_ABOVE_BYTES: usize = 1 << 20;

/// How many entries ahead a sweep over a sparse unit's entries prefetches their label
/// offsets.
pub(crate) const PREFETCH_DISTANCE: usize = 16;

/// How many inputs ahead the in-place AP walk prefetches label lists (their offsets twice as
/// far): nearer than the entry sweeps, since a list fetched too early is evicted before the
/// walk reaches it (the distances measured are in benches/README.md's log, 2026-12-06).
const WALK_PREFETCH_DISTANCE: usize = 8;

/// The label lists of a unit's inputs laid out in its descending order, reused from unit
/// to unit. One pass in input order scatters them, so the AP walk then reads memory
/// sequentially instead of chasing each input's list at random.
#[derive(Debug, Default)]
pub struct WalkLabels {
    position: Vec<u32>,
    ptr: Vec<usize>,
    concept: Vec<u32>,
}

impl WalkLabels {
    /// Position q of the walk gets the labels of input `input(order[q])`.
    fn fill(&mut self, order: &[u32], input: impl Fn(usize) -> usize, labels: &LabelIndex) {
        let m = order.len();
        // Every slot of each buffer is written below; only the lengths have to be right.
        self.position.resize(m, 0);
        for (q, &e) in order.iter().enumerate() {
            self.position[e as usize] = q as u32;
        }
        self.ptr.resize(m + 1, 0);
        self.ptr[0] = 0;
        for e in 0..m {
            let i = input(e);
            self.ptr[self.position[e] as usize + 1] = labels.ptr[i + 1] - labels.ptr[i];
        }
        for q in 0..m {
            self.ptr[q + 1] += self.ptr[q];
        }
        // Every slot is written below; the length only has to be right.
        self.concept.resize(self.ptr[m], 0);
        for e in 0..m {
            let i = input(e);
            let list = &labels.concept[labels.ptr[i]..labels.ptr[i + 1]];
            let at = self.ptr[self.position[e] as usize];
            // lists are short: a plain loop beats a call to memmove
            for (slot, &c) in self.concept[at..at + list.len()].iter_mut().zip(list) {
                *slot = c;
            }
        }
    }

    fn at(&self, q: usize) -> &[u32] {
        &self.concept[self.ptr[q]..self.ptr[q + 1]]
    }
}

/// A sparse unit's zero entries in the AP walk: one tie group of `size` inputs (group end
/// `end`) that comes before walk position `before`, holding each concept's positives not
/// among the entries (n_positive - `positives_elsewhere[c]`).
struct ZeroGroup<'a> {
    before: usize,
    size: usize,
    end: u32,
    positives_elsewhere: &'a [u32],
}

impl ZeroGroup<'_> {
    /// Adds the group's term to each concept's sums (`sums`, in concept order): its count
    /// there, cnt, to TP, then cnt * TP / (group end) to the sum.
    fn add_to<'s>(&self, sums: impl Iterator<Item = &'s mut ApState>, set: &ConceptSet) {
        let weight = group_weight(self.end as usize);
        for ((s, col), &k) in sums.zip(&set.columns).zip(self.positives_elsewhere) {
            let cnt = col.n_positive() as u32 - k;
            if cnt > 0 {
                s.tp += cnt as f64;
                s.ap += cnt as f64 * s.tp * weight;
            }
        }
    }
}

/// Average precision of every concept's labels against the unit's activations, down the
/// walk positions in descending activation: `labels_at(q)` are the labels at position q,
/// `group_end[q]` the end, in the order of all inputs, of its tie group; `fetch_ahead(q)`
/// is called before position q is read. Group by group ([`ap_walk_by_groups`]), or label
/// by label when many groups tie ([`ap_walk_tied`]): the same terms in the same order, so
/// the choice changes no bit.
fn ap_walk<'l>(
    labels_at: impl Fn(usize) -> &'l [u32],
    fetch_ahead: impl Fn(usize),
    group_end: &[u32],
    zeros: Option<ZeroGroup<'_>>,
    set: &ConceptSet,
) -> Vec<f64> {
    if mostly_tied(group_end) {
        ap_walk_tied(labels_at, fetch_ahead, group_end, zeros, set)
    } else {
        ap_walk_by_groups(labels_at, fetch_ahead, group_end, zeros, set)
    }
}

/// [`ap_walk`] tie group by tie group: count each concept's positives in the group, then
/// add cnt * TP / (group end) once per concept, as `ap_with_tail` does. One 16-byte state
/// per concept: each label touches one cache line.
fn ap_walk_by_groups<'l>(
    labels_at: impl Fn(usize) -> &'l [u32],
    fetch_ahead: impl Fn(usize),
    group_end: &[u32],
    mut zeros: Option<ZeroGroup<'_>>,
    set: &ConceptSet,
) -> Vec<f64> {
    let mut state = vec![ApState::default(); set.len()];
    // each concept's positives in the current tie group (read only when groups tie)
    let mut in_group = vec![0u32; set.len()];
    let m = group_end.len();
    // walk positions after the zero group sit `offset` places earlier than in all inputs
    let mut offset = 0;
    let mut start = 0;
    loop {
        if let Some(z) = zeros.take_if(|z| z.before == start) {
            z.add_to(state.iter_mut(), set);
            offset = z.size;
        }
        if start >= m {
            break;
        }
        fetch_ahead(start);
        let end_all = group_end[start] as usize;
        let end = end_all - offset;
        let weight = group_weight(end_all);
        if end == start + 1 {
            // The common case: cnt = 1, so one pass adds 1 * TP / end per concept.
            for &c in labels_at(start) {
                debug_assert!((c as usize) < state.len());
                // SAFETY: a label's concept is below the set's length (`LabelIndex`), the
                // length of `state`.
                let s = unsafe { state.get_unchecked_mut(c as usize) };
                s.tp += 1.0;
                s.ap += 1.0 * s.tp * weight;
            }
        } else {
            for q in start..end {
                for &c in labels_at(q) {
                    state[c as usize].tp += 1.0;
                    in_group[c as usize] += 1;
                }
            }
            for q in start..end {
                for &c in labels_at(q) {
                    let (s, k) = (&mut state[c as usize], &mut in_group[c as usize]);
                    if *k > 0 {
                        s.ap += *k as f64 * s.tp * weight;
                        *k = 0;
                    }
                }
            }
        }
        start = end;
    }
    state
        .iter()
        .zip(&set.columns)
        .map(|(s, col)| finish_ap(s.ap, col.n_positive()))
        .collect()
}

/// Whether the walk positions of `group_end` (each position's group end) form fewer tie
/// groups than 4/5 of their number. The group-by-group walk branches on each group's size;
/// once many groups tie, the branch is mispredicted so often that [`ap_walk_tied`], which
/// does more per label and branches on nothing, is faster. Measured on 50,000 inputs and
/// 1,000 concepts of 1%, values rounded to 2^-b: 1.1 ms per unit by groups against 1.4 ms
/// tied at 90% groups, 1.8 against 1.4 at 68%, 3.8 against 1.4 at 11% (the log in
/// benches/README.md, 2026-12-07).
fn mostly_tied(group_end: &[u32]) -> bool {
    let m = group_end.len();
    let groups = 1 + group_end.windows(2).filter(|w| w[0] != w[1]).count();
    5 * groups < 4 * m
}

/// [`ap_walk`] for a unit with many tie groups: one pass over the labels, where each concept
/// keeps its last group's term pending (its count k in that group, the group's weight) and
/// adds k * TP * weight when its next label falls in a later group, or at the end: the same
/// terms in the same order as the group-by-group walk, hence the same bits, with no branch
/// on a group's size.
fn ap_walk_tied<'l>(
    labels_at: impl Fn(usize) -> &'l [u32],
    fetch_ahead: impl Fn(usize),
    group_end: &[u32],
    mut zeros: Option<ZeroGroup<'_>>,
    set: &ConceptSet,
) -> Vec<f64> {
    let mut state = vec![PendingState::default(); set.len()];
    let flush_all = |state: &mut [PendingState]| {
        for s in state.iter_mut() {
            s.sums.ap += s.k as f64 * s.sums.tp * s.w;
            s.k = 0;
        }
    };
    // the zero group's terms, when it comes before walk position q: after every pending one
    let mut zero_group = |q: usize, state: &mut [PendingState]| {
        if let Some(z) = zeros.take_if(|z| z.before == q) {
            flush_all(state);
            z.add_to(state.iter_mut().map(|s| &mut s.sums), set);
        }
    };
    for (q, &g) in group_end.iter().enumerate() {
        zero_group(q, &mut state);
        fetch_ahead(q);
        let w = group_weight(g as usize);
        for &c in labels_at(q) {
            debug_assert!((c as usize) < state.len());
            // SAFETY: a label's concept is below the set's length (`LabelIndex`), the
            // length of `state`.
            let s = unsafe { state.get_unchecked_mut(c as usize) };
            // Arithmetic rather than branches, which the groups' sizes would make
            // unpredictable: the pending term times 1 when the label opens the concept's
            // next group, else times 0 (+0.0, which leaves the sum's bits as they are).
            let same = crate::simd::opaque((s.g == g) as u64);
            let pending = s.k as f64 * s.sums.tp * s.w;
            s.sums.ap += f64::from_bits(pending.to_bits() & same.wrapping_sub(1));
            s.k = (s.k & (same as u32).wrapping_neg()) + 1;
            s.g = g;
            s.w = w;
            s.sums.tp += 1.0;
        }
    }
    zero_group(group_end.len(), &mut state);
    flush_all(&mut state);
    state
        .iter()
        .zip(&set.columns)
        .map(|(s, col)| finish_ap(s.sums.ap, col.n_positive()))
        .collect()
}

/// A concept's state in [`ap_walk_tied`]: its sums, and its last group (end `g`, weight `w`)
/// with its `k` positives there, whose term is pending. 32 bytes, aligned.
#[derive(Clone, Copy, Default)]
#[repr(align(32))]
struct PendingState {
    sums: ApState,
    w: f64,
    k: u32,
    g: u32,
}

/// A concept's running sums in the AP walk: 16 bytes, aligned so that none straddles two
/// cache lines.
#[derive(Clone, Copy, Default)]
#[repr(align(16))]
struct ApState {
    ap: f64,
    /// (a count, held as a float: exact below 2^53, and no conversion per label)
    tp: f64,
}

/// Inputs whose values the product sweep copies into one row-major tile at a time: with a
/// block of 32 units the tile is 32 KB and stays in L1 (twice that did not, and the copy
/// then cost as much as the sums). The tile size does not change any sum's order.
const PRODUCT_TILE: usize = 128;

/// Products over all inputs of a block of units with every concept, from the concepts'
/// nonzero entries: one read of each entry serves all the block's units. Returns
/// `out[u][c]`. Each sum still adds its terms in ascending input order.
///
/// The units' values are copied into a row-major tile (`tile[i][u]`) and the sums are kept
/// concept-major (`acc[c][u]`), so each entry adds one contiguous vector of unit values into
/// one contiguous vector of sums.
pub fn products(
    units: &[&UnitProfile],
    set: &ConceptSet,
    rows: &RowIndex,
    needs: &Needs,
) -> Vec<Vec<Products>> {
    let t = set.len();
    let nu = units.len();
    let n = units.first().map_or(0, |u| u.n());
    let size = |wanted: bool| if wanted { nu * t } else { 0 };
    let (mut raw, mut rank_cov) = (
        vec![0.0; size(needs.products)],
        vec![0.0; size(needs.rank_products)],
    );
    let mut tile = vec![0.0; PRODUCT_TILE * nu];
    for start in (0..n).step_by(PRODUCT_TILE) {
        let end = (start + PRODUCT_TILE).min(n);
        if needs.products {
            fill_tile(&mut tile, units.iter().map(|u| &u.centred[start..end]));
            scatter(&mut raw, nu, &tile, rows, start..end, rows.product_values());
        }
        if needs.rank_products {
            fill_tile(&mut tile, units.iter().map(|u| &u.centred_rank[start..end]));
            scatter(
                &mut rank_cov,
                nu,
                &tile,
                rows,
                start..end,
                &rows.rank_above_zero,
            );
        }
    }
    let at = |sums: &[f64], u: usize, c: usize| sums.get(c * nu + u).copied().unwrap_or(0.0);
    units
        .iter()
        .enumerate()
        .map(|(u, unit)| {
            set.columns
                .iter()
                .enumerate()
                .map(|(c, col)| {
                    Products::from_centred(at(&raw, u, c), at(&rank_cov, u, c), unit, col)
                })
                .collect()
        })
        .collect()
}

/// The label sums of [`inverse`] (each concept's sum over its positive labels of the
/// centred activations, and of the ascending midranks) for a block of dense units, by the
/// tiled sweep of [`products`]: one read of each concept entry serves all the units. Each
/// sum adds its terms in ascending input order, as the inverse sweep and the pair kernel do.
pub fn label_sums(
    units: &[&UnitProfile],
    set: &ConceptSet,
    rows: &RowIndex,
    needs: &Needs,
) -> Vec<Vec<InverseSums>> {
    let t = set.len();
    let nu = units.len();
    let n = units.first().map_or(0, |u| u.n());
    let mid = (n as f64 + 1.0) / 2.0;
    let (mut sums, mut rank_sums) = (vec![0.0; nu * t], vec![0.0; nu * t]);
    let mut tile = vec![0.0; PRODUCT_TILE * nu];
    for start in (0..n).step_by(PRODUCT_TILE) {
        let end = (start + PRODUCT_TILE).min(n);
        fill_tile(&mut tile, units.iter().map(|u| &u.centred[start..end]));
        add_labelled(&mut sums, nu, &tile, rows, start..end);
        if needs.order {
            // the terms are the midranks themselves: centred rank + (N + 1) / 2
            for (u, unit) in units.iter().enumerate() {
                for (i, &r) in unit.centred_rank[start..end].iter().enumerate() {
                    tile[i * nu + u] = r + mid;
                }
            }
            add_labelled(&mut rank_sums, nu, &tile, rows, start..end);
        }
    }
    (0..nu)
        .map(|u| {
            (0..t)
                .map(|c| InverseSums {
                    centred_sum: sums[c * nu + u],
                    rank_sum: rank_sums[c * nu + u],
                    ap: 0.0,
                })
                .collect()
        })
        .collect()
}

crate::simd::widest! {
/// acc[c * nu + u] += tile[i][u] for each positive label (c, value >= 0.5) of each input i.
fn add_labelled(
    acc: &mut [f64],
    nu: usize,
    tile: &[f64],
    rows: &RowIndex,
    inputs: std::ops::Range<usize>,
) {
    let first = inputs.start;
    for i in inputs {
        let values = &tile[(i - first) * nu..][..nu];
        for j in rows.ptr[i]..rows.ptr[i + 1] {
            if rows.value[j] >= 0.5 {
                let c = rows.concept[j] as usize;
                for (a, &v) in acc[c * nu..][..nu].iter_mut().zip(values) {
                    *a += v;
                }
            }
        }
    }
}

/// tile[i * nu + u] = columns[u][i]: the units' values of a run of inputs, input by input.
fn fill_tile<'a>(tile: &mut [f64], columns: impl ExactSizeIterator<Item = &'a [f64]>) {
    let nu = columns.len();
    for (u, column) in columns.enumerate() {
        for (i, &x) in column.iter().enumerate() {
            tile[i * nu + u] = x;
        }
    }
}

/// acc[c * nu + u] += tile[i][u] * x for each entry (c, x) of each input i of `inputs`.
fn scatter(
    acc: &mut [f64],
    nu: usize,
    tile: &[f64],
    rows: &RowIndex,
    inputs: std::ops::Range<usize>,
    x: &[f64],
) {
    let first = inputs.start;
    for i in inputs {
        let values = &tile[(i - first) * nu..][..nu];
        for j in rows.ptr[i]..rows.ptr[i + 1] {
            let (c, x) = (rows.concept[j] as usize, x[j]);
            for (a, &v) in acc[c * nu..][..nu].iter_mut().zip(values) {
                *a += v * x;
            }
        }
    }
}
}

/// [`forward`] when b is every input: the same sums, from each concept's own entries.
pub fn forward_all_inputs(set: &ConceptSet, needs: &Needs) -> Vec<ForwardSums> {
    let n = set.n_inputs;
    let mut acc = ForwardAccumulator::default();
    set.columns
        .iter()
        .map(|col| {
            acc.reset();
            for j in 0..col.nz_index.len() {
                let rank = col.nz_rank.get(j).copied().unwrap_or(0.0);
                let at_least = col.nz_at_least.get(j).copied().unwrap_or(0);
                acc.add(col.nz_value[j], rank, at_least, needs);
            }
            acc.finish(n, n, col, needs)
        })
        .collect()
}

/// [`products`] of a sparse unit: a sweep over its entries only. The zero entries add
/// closed-form terms: sum_i (a_i - mean) c_i = sum over entries of a_i c_i - mean sum(c),
/// and the centred ranks of the zero group are one constant.
pub fn products_sparse(
    unit: &UnitProfile,
    sp: &SparseEntries,
    set: &ConceptSet,
    rows: &RowIndex,
    needs: &Needs,
) -> Vec<Products> {
    let mut sums = SparseProducts::new(set.len(), false);
    for (e, &i) in sp.rows.iter().enumerate() {
        // (as in `inverse_by_concept`: the entries' offsets are read at a stride)
        if let Some(&ahead) = sp.rows.get(e + PREFETCH_DISTANCE) {
            prefetch(rows.ptr.as_ptr().wrapping_add(ahead as usize));
        }
        let entries = rows.ptr[i as usize]..rows.ptr[i as usize + 1];
        sums.add(unit, sp, e, entries, rows, needs);
    }
    sums.finish(unit, sp, set)
}

/// The sums of [`products_sparse`], entry by entry: the one home of their terms, which
/// [`inverse_by_concept`] also adds when it reads the same rows for its labels.
pub(crate) struct SparseProducts {
    raw: Vec<f64>,
    rank_cov: Vec<f64>,
    /// The raw sums are given at the end ([`SparseProducts::set_raw`]), not added.
    raw_given: bool,
    /// With binary concepts whose rows are their labels, each concept's rank above zero:
    /// the value every one of its rows holds ([`SparseProducts::add_label_rank`]).
    label_rank: Vec<f64>,
}

impl SparseProducts {
    pub(crate) fn new(t: usize, raw_given: bool) -> SparseProducts {
        SparseProducts {
            raw: vec![0.0; t],
            rank_cov: vec![0.0; t],
            raw_given,
            label_rank: Vec::new(),
        }
    }

    /// The sums of a pass over the labels of binary concepts whose rows are their labels
    /// ([`ConceptSet::rows_as_labels`] with every value 1): the raw sums are the label sums
    /// ([`SparseProducts::set_raw`]) and the rank terms come label by label
    /// ([`SparseProducts::add_label_rank`]).
    pub(crate) fn of_binary_labels(set: &ConceptSet) -> SparseProducts {
        let mut sums = SparseProducts::new(set.len(), true);
        // a column of ones has one midrank: its rows' `rank_above_zero` is this same difference
        sums.label_rank = set
            .columns
            .iter()
            .map(|col| col.nz_rank.first().map_or(0.0, |&r| r - col.zero_rank))
            .collect();
        sums
    }

    /// The rank terms' weight of entry `e`: its centred rank less the zero group's (whose
    /// own terms [`SparseProducts::finish`] adds in closed form).
    #[inline(always)]
    pub(crate) fn rank_weight(sp: &SparseEntries, e: usize) -> f64 {
        sp.centred_rank[e] - sp.zero_centred_rank
    }

    /// [`SparseProducts::add`]'s rank term of one label of concept `c` of an entry with
    /// centred rank above the zero group `w`, from the concept's one rank (binary concepts,
    /// [`SparseProducts::of_binary_labels`]): the same term, added in the same order, as
    /// `add` reads from the rows, without reading the rows.
    #[inline(always)]
    pub(crate) fn add_label_rank(&mut self, c: u32, w: f64) {
        self.rank_cov[c as usize] += w * self.label_rank[c as usize];
    }

    /// The raw sums, from a pass that added the same terms in the same order (the label
    /// sums, where every product value is 1 and the rows are the labels).
    pub(crate) fn set_raw(&mut self, raw: impl Iterator<Item = f64>) {
        debug_assert!(self.raw_given);
        self.raw.clear();
        self.raw.extend(raw);
    }

    /// Adds entry `e` of the unit, whose input's concept entries are `entries` of `rows`.
    #[inline(always)]
    pub(crate) fn add(
        &mut self,
        unit: &UnitProfile,
        sp: &SparseEntries,
        e: usize,
        entries: std::ops::Range<usize>,
        rows: &RowIndex,
        needs: &Needs,
    ) {
        if needs.products && !self.raw_given {
            let a = sp.values[e] * unit.scale;
            let values = rows.product_values();
            for j in entries.clone() {
                self.raw[rows.concept[j] as usize] += a * values[j];
            }
        }
        if needs.rank_products {
            let w = SparseProducts::rank_weight(sp, e);
            for j in entries {
                self.rank_cov[rows.concept[j] as usize] += w * rows.rank_above_zero[j];
            }
        }
    }

    /// The products, once every entry is added.
    pub(crate) fn finish(
        self,
        unit: &UnitProfile,
        sp: &SparseEntries,
        set: &ConceptSet,
    ) -> Vec<Products> {
        set.columns
            .iter()
            .enumerate()
            .map(|(c, col)| {
                let rc = self.rank_cov[c] + sp.zero_centred_rank * col.rank_above_zero_sum;
                Products::from_centred(self.raw[c] - unit.mean * col.sum, rc, unit, col)
            })
            .collect()
    }
}

/// [`inverse`] of a sparse unit: label sums over its entries plus the zero group's closed
/// form, and the AP walk over its entries with the zero group as one tie group in between.
pub fn inverse_sparse(
    unit: &UnitProfile,
    sp: &SparseEntries,
    set: &ConceptSet,
    labels: &LabelIndex,
    needs: &Needs,
    walk: &mut WalkLabels,
) -> Vec<InverseSums> {
    let t = set.len();
    let n = unit.n();
    let mid = (n as f64 + 1.0) / 2.0;
    let mut out = vec![InverseSums::default(); t];
    // positives among the entries, per concept
    let mut in_entries = vec![0u32; t];
    for (e, &i) in sp.rows.iter().enumerate() {
        let list = &labels.concept[labels.ptr[i as usize]..labels.ptr[i as usize + 1]];
        let a = sp.values[e] * unit.scale;
        let r = if needs.order {
            sp.centred_rank[e] + mid
        } else {
            0.0
        };
        for &c in list {
            let o = &mut out[c as usize];
            o.centred_sum += a;
            o.rank_sum += r;
            in_entries[c as usize] += 1;
        }
    }
    let zero_rank = sp.zero_centred_rank + mid;
    for ((o, col), &k) in out.iter_mut().zip(&set.columns).zip(&in_entries) {
        let zeros = col.n_positive() - k as usize;
        o.centred_sum -= unit.mean * col.n_positive() as f64;
        o.rank_sum += if needs.order {
            zeros as f64 * zero_rank
        } else {
            0.0
        };
    }
    if needs.inverse_ap {
        walk.fill(&sp.order, |e| sp.rows[e] as usize, labels);
        let zeros = ZeroGroup {
            before: sp.n_above,
            size: sp.n_zero,
            end: sp.zero_at_least,
            positives_elsewhere: &in_entries,
        };
        let ap = ap_walk(|q| walk.at(q), |_| {}, &sp.group_end, Some(zeros), set);
        for (o, ap) in out.iter_mut().zip(ap) {
            o.ap = ap;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::MatrixView;
    use crate::metric::{Metric, Params};
    use crate::radix::SortScratch;
    use crate::ranks::{average_precision, RankOutputs};
    use crate::unit::{TransformSpec, UnitEntries};

    /// Both layouts of the AP walk (label lists read in place, or first laid out in
    /// activation order) add the same terms in the same order, and give each concept's
    /// average precision against the unit.
    #[test]
    fn ap_walk_layouts_agree_with_average_precision() {
        let (n, t) = (300, 5);
        let mut s = 7u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as f64 / (1u64 << 31) as f64
        };
        // ties in the unit (a few levels) and overlapping labels
        let a: Vec<f64> = (0..n).map(|_| (next() * 6.0).floor()).collect();
        let c: Vec<f64> = (0..n * t)
            .map(|_| if next() < 0.2 { 1.0 } else { 0.0 })
            .collect();
        let needs = Needs::of(&[Metric::InverseAuprc]);
        let view = MatrixView::row_major(&c, n, t).unwrap();
        let set = ConceptSet::build(&view, None, &needs, true).unwrap();
        // the ranking with its order, as a matrix call's walk asks for it
        let mut unit = UnitProfile::default();
        let spec = TransformSpec {
            needs: &needs,
            params: &Params::default(),
            ranks: RankOutputs::ALL,
        };
        unit.rebuild(&a, 0, spec, &mut SortScratch::default());
        let labels = &set.labels;
        let in_place = ap_walk(
            |q| {
                let i = unit.order[q] as usize;
                &labels.concept[labels.ptr[i]..labels.ptr[i + 1]]
            },
            |_| {},
            &unit.group_end,
            None,
            &set,
        );
        let mut walk = WalkLabels::default();
        walk.fill(&unit.order, |e| e, labels);
        let laid_out = ap_walk(|q| walk.at(q), |_| {}, &unit.group_end, None, &set);
        for (j, (x, y)) in in_place.iter().zip(&laid_out).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "concept {j}");
            let y_true: Vec<bool> = (0..n).map(|i| c[i * t + j] == 1.0).collect();
            let expected = average_precision(&y_true, &a);
            assert!(
                (x - expected).abs() < 1e-12,
                "concept {j}: {x} vs {expected}"
            );
        }
    }

    /// The AP walk group by group and label by label ([`ap_walk_tied`]) add the same terms
    /// in the same order: the same bits, for dense units with no ties up to a few levels, and
    /// for sparse units (the zero group between the walked entries), each equal to the
    /// average precision against the unit.
    #[test]
    fn both_ap_walks_agree_bit_for_bit() {
        let (n, t) = (2000, 6);
        let mut rng = crate::rng::SplitMix64::new(11);
        let mut next = || rng.next_f64();
        // concepts of 0 to 40% positives (one with none: its AP is NaN on both walks)
        let density = [0.4, 0.1, 0.01, 0.0, 0.25, 0.05];
        let c: Vec<f64> = (0..n * t)
            .map(|j| f64::from(u8::from(next() < density[j % t])))
            .collect();
        let needs = Needs::of(&[Metric::InverseAuprc]);
        let view = MatrixView::row_major(&c, n, t).unwrap();
        let set = ConceptSet::build(&view, None, &needs, true).unwrap();
        let labels = &set.labels;
        let spec = TransformSpec {
            needs: &needs,
            params: &Params::default(),
            ranks: RankOutputs::ALL,
        };
        let mut scratch = SortScratch::default();
        let mut walk = WalkLabels::default();
        let mut tied_walks = 0;
        // 2 levels to no ties, with and without a third of zeros (a sparse unit)
        for levels in [2.0, 7.0, 60.0, 900.0, 1e9] {
            for zeros in [false, true] {
                let a: Vec<f64> = (0..n)
                    .map(|_| {
                        let v = (next() * levels).floor() / levels + 0.5;
                        if zeros && next() < 0.33 {
                            0.0
                        } else {
                            v
                        }
                    })
                    .collect();
                let mut unit = UnitProfile::default();
                let (walked, group_end, zero_group, in_entries) = if zeros {
                    let mut rows: Vec<u32> =
                        (0..n as u32).filter(|&i| a[i as usize] != 0.0).collect();
                    let mut values: Vec<f64> = rows.iter().map(|&i| a[i as usize]).collect();
                    let entries = UnitEntries {
                        n,
                        rows: &mut rows,
                        values: &mut values,
                    };
                    assert!(unit.rebuild_sparse(entries, 0, spec, &mut scratch));
                    let sp = unit.sparse.as_ref().unwrap();
                    let mut in_entries = vec![0u32; t];
                    for &i in &sp.rows {
                        for &c in
                            &labels.concept[labels.ptr[i as usize]..labels.ptr[i as usize + 1]]
                        {
                            in_entries[c as usize] += 1;
                        }
                    }
                    walk.fill(&sp.order, |e| sp.rows[e] as usize, labels);
                    let zero = (sp.n_above, sp.n_zero, sp.zero_at_least);
                    (true, sp.group_end.clone(), Some(zero), in_entries)
                } else {
                    unit.rebuild(&a, 0, spec, &mut scratch);
                    walk.fill(&unit.order, |e| e, labels);
                    (false, unit.group_end.clone(), None, vec![])
                };
                let zero_group = || {
                    zero_group.map(|(before, size, end)| ZeroGroup {
                        before,
                        size,
                        end,
                        positives_elsewhere: &in_entries,
                    })
                };
                tied_walks += usize::from(mostly_tied(&group_end));
                let by_groups =
                    ap_walk_by_groups(|q| walk.at(q), |_| {}, &group_end, zero_group(), &set);
                let tied = ap_walk_tied(|q| walk.at(q), |_| {}, &group_end, zero_group(), &set);
                for (j, (x, y)) in by_groups.iter().zip(&tied).enumerate() {
                    let case = format!("{levels} levels, sparse {walked}, concept {j}");
                    assert!(
                        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                        "{case}: {x} vs {y}"
                    );
                    let y_true: Vec<bool> = (0..n).map(|i| c[i * t + j] == 1.0).collect();
                    let expected = if y_true.contains(&true) {
                        average_precision(&y_true, &a)
                    } else {
                        f64::NAN
                    };
                    assert!(
                        (x - expected).abs() < 1e-12 || (x.is_nan() && expected.is_nan()),
                        "{case}: {x} vs {expected}"
                    );
                }
            }
        }
        // the call's own choice took each walk for some of the units
        assert!(
            (1..10).contains(&tied_walks),
            "{tied_walks} of 10 units mostly tied"
        );
    }

    /// One unit's inverse sums by every path: the walk (label sums by input, or tiled over a
    /// block, and the AP walk down the order) and concept by concept; sparse units with the
    /// order (the walk's) and without it (ranked by counting). Where the concepts' rows are
    /// their labels, the sparse unit's products from the pass concept by concept are checked
    /// bit for bit against [`products_sparse`]; returns how many times they were.
    fn inverse_paths(
        a: &[f64],
        c: &[f64],
        n: usize,
        t: usize,
    ) -> (Vec<(&'static str, Vec<InverseSums>)>, usize) {
        let needs = Needs::of(&[Metric::InverseAuc, Metric::InverseAuprc, Metric::Mad]);
        // with the products too (the concepts then have rows only when sparse enough)
        let with_products = Needs::of(&[
            Metric::InverseAuc,
            Metric::InverseAuprc,
            Metric::Mad,
            Metric::Correlation,
            Metric::Spearman,
        ]);
        let mut products_checked = 0;
        let view = MatrixView::row_major(c, n, t).unwrap();
        let set = ConceptSet::build(&view, None, &needs, true).unwrap();
        let pset = ConceptSet::build(&view, None, &with_products, true).unwrap();
        let params = Params::default();
        let mut scratch = SortScratch::default();
        let mut walk = WalkLabels::default();
        let mut by_concept = ByConcept::default();
        let mut dense = UnitProfile::default();
        let spec = TransformSpec {
            needs: &needs,
            params: &params,
            ranks: RankOutputs::ALL,
        };
        dense.rebuild(a, 0, spec, &mut scratch);
        let mut out = vec![
            (
                "dense walk",
                inverse(&dense, &set, &set.labels, &needs, &mut walk, None),
            ),
            (
                "dense by concept",
                inverse_by_concept(&dense, &set, &set.labels, &needs, &mut by_concept, None).0,
            ),
        ];
        // (with concepts sparse enough for sweeps by input)
        if let Some(rows) = &set.rows {
            let tiled = label_sums(&[&dense], &set, rows, &needs).pop();
            out.push((
                "dense walk, tiled sums",
                inverse(&dense, &set, &set.labels, &needs, &mut walk, tiled),
            ));
        }
        let rows: Vec<u32> = (0..n as u32).filter(|&i| a[i as usize] != 0.0).collect();
        let values: Vec<f64> = rows.iter().map(|&i| a[i as usize]).collect();
        if rows.len() < n {
            let bare = RankOutputs {
                order: false,
                at_least: false,
                midrank: true,
            };
            for (name, ranks) in [("sparse", RankOutputs::ALL), ("sparse unordered", bare)] {
                let mut p = UnitProfile::default();
                let (mut r, mut v) = (rows.clone(), values.clone());
                let entries = UnitEntries {
                    n,
                    rows: &mut r,
                    values: &mut v,
                };
                let spec = TransformSpec {
                    needs: &needs,
                    params: &params,
                    ranks,
                };
                assert!(p.rebuild_sparse(entries, 0, spec, &mut scratch));
                let sp = p.sparse.as_ref().unwrap();
                assert_eq!(sp.order.is_empty(), !ranks.order, "{name}");
                if ranks.order {
                    out.push((
                        "sparse walk",
                        inverse_sparse(&p, sp, &set, &set.labels, &needs, &mut walk),
                    ));
                }
                let all =
                    inverse_by_concept(&p, &set, &set.labels, &needs, &mut by_concept, None).0;
                // each metric alone (the pass specialised to what it needs) adds the same terms
                for metric in [Metric::InverseAuc, Metric::InverseAuprc, Metric::Mad] {
                    let alone = Needs::of(&[metric]);
                    let sums =
                        inverse_by_concept(&p, &set, &set.labels, &alone, &mut by_concept, None).0;
                    for (j, (x, y)) in sums.iter().zip(&all).enumerate() {
                        let pairs = [
                            (alone.inverse_ap, x.ap, y.ap),
                            (alone.inverse_sums, x.centred_sum, y.centred_sum),
                            (alone.inverse_sums && alone.order, x.rank_sum, y.rank_sum),
                        ];
                        for (_, u, v) in pairs.into_iter().filter(|p| p.0) {
                            let same = u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan());
                            assert!(same, "{name}, {metric:?} alone, concept {j}: {u} vs {v}");
                        }
                    }
                }
                out.push((name, all));
                let Some(rows_as_labels) = pset.rows_as_labels() else {
                    continue;
                };
                let (mut r, mut v) = (rows.clone(), values.clone());
                let entries = UnitEntries {
                    n,
                    rows: &mut r,
                    values: &mut v,
                };
                let spec = TransformSpec {
                    needs: &with_products,
                    params: &params,
                    ranks,
                };
                assert!(p.rebuild_sparse(entries, 0, spec, &mut scratch));
                let sp = p.sparse.as_ref().unwrap();
                let (sums, fused) = inverse_by_concept(
                    &p,
                    &pset,
                    &pset.labels,
                    &with_products,
                    &mut by_concept,
                    Some(rows_as_labels),
                );
                let swept = products_sparse(&p, sp, &pset, rows_as_labels, &with_products);
                let bits = |p: &Products| [p.cov, p.dot, p.rank_cov].map(f64::to_bits);
                for (j, (x, y)) in fused.unwrap().iter().zip(&swept).enumerate() {
                    assert_eq!(bits(x), bits(y), "{name} concept {j}: {x:?} vs {y:?}");
                }
                out.push(("sparse by concept with products", sums));
                products_checked += 1;
            }
        }
        (out, products_checked)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// The inverse metrics' sums concept by concept equal the walk's bit for bit, for dense
        /// and sparse units, float16 values with ties and zeros (and negatives), soft concepts,
        /// concepts with no positive, a few, or thousands (the radix-sorted runs), inputs with more
        /// than 4 labels.
        #[test]
        fn inverse_by_concept_equals_the_walk(seed in proptest::prelude::any::<u64>(), signed in proptest::prelude::any::<bool>(), sparse_concepts in proptest::prelude::any::<bool>(), binary in proptest::prelude::any::<bool>(), n in 300usize..9000) {
            let t = 8;
            let mut s = seed;
            let mut next = || {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 11) as f64 / (1u64 << 53) as f64
            };
            // float16 steps (11 significant bits), a third or more zeros, a few levels of ties
            let a: Vec<f64> = (0..n).map(|_| {
                let z = next() * 3.0 - 1.0;
                let z = if signed { z } else { z.max(0.0) };
                if next() < 0.2 { (z * 4.0).round() / 4.0 } else { ((z * 1024.0).round() / 1024.0) as f32 as f64 }
            }).collect();
            // dense concepts (one of them every input, so that some inputs have more than 4
            // labels) or, with `sparse_concepts`, under 5%
            let density = if sparse_concepts { [0.04, 0.1, 0.02, 0.003, 0.0, 0.0, 0.01, 0.05] } else { [0.4, 0.15, 0.02, 0.003, 0.0, 1.0, 0.9, 0.8] };
            let c: Vec<f64> = (0..n * t).map(|j| {
                let r = next();
                if r < density[j % t] { if next() < 0.7 { 1.0 } else { 0.5 + next() / 2.0 } }
                else if r < density[j % t] * 1.3 { 0.3 } else { 0.0 }
            }).map(|v| if binary { f64::from(u8::from(v >= 0.5)) } else { v }).collect();
            let (paths, products_checked) = inverse_paths(&a, &c, n, t);
            // binary sparse concepts: their rows are their labels, so the sparse units' products
            // came from the pass concept by concept (and were checked against the sweep's)
            let sparse_unit = a.contains(&0.0);
            proptest::prop_assert_eq!(products_checked > 0, binary && sparse_concepts && sparse_unit);
            let (first, reference) = &paths[0];
            for (name, sums) in &paths[1..] {
                // the dense and sparse transforms agree to rounding only (their moments differ)
                let exact = name.starts_with("dense") == first.starts_with("dense");
                for (j, (x, y)) in sums.iter().zip(reference).enumerate() {
                    let same = |u: f64, v: f64| u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan());
                    proptest::prop_assert!(same(x.ap, y.ap), "{} concept {}: ap {} vs {}", name, j, x.ap, y.ap);
                    proptest::prop_assert!(same(x.rank_sum, y.rank_sum), "{} concept {}: rank sum", name, j);
                    if exact {
                        proptest::prop_assert!(same(x.centred_sum, y.centred_sum), "{} concept {}: sum {} vs {}", name, j, x.centred_sum, y.centred_sum);
                    }
                }
            }
            // the sparse paths among themselves: bit for bit
            let sparse: Vec<_> = paths.iter().filter(|(name, _)| name.starts_with("sparse")).collect();
            for (name, sums) in &sparse[1..] {
                for (j, (x, y)) in sums.iter().zip(&sparse[0].1).enumerate() {
                    proptest::prop_assert!(x.centred_sum.to_bits() == y.centred_sum.to_bits(), "{} concept {}", name, j);
                }
            }
        }
    }
}
