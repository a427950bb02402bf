//! Per-unit transforms: computed once per unit, shared by all of its concepts and metrics.

use crate::metric::{top_count, Needs, Params};
use crate::numeric::{
    centred_moments, centred_moments_in_place, lane_sum, magnitude_scale, max_abs_slice,
    resize_for_overwrite, robust_norm_shifted_slice, robust_norm_slice, robust_norm_slice_with_max,
    shifted_lane_sum, sum_and_max_abs,
};
use crate::radix::SortScratch;
use crate::ranks::{centred_rank_norm, rank, rank_into_with, tie_term, RankOutputs, Ranking};
use crate::rng::SplitMix64;

/// The ranking outputs the pair kernel reads: each input's midrank and group end
/// (`at_least`).
pub const PAIR_KERNEL_RANKS: RankOutputs = RankOutputs {
    order: false,
    at_least: true,
    midrank: true,
};

/// What a call asks of every unit's transform: the sums its metrics need, their parameters,
/// and which per-input outputs of the ranking its kernels read (the pair kernel:
/// [`PAIR_KERNEL_RANKS`]; a matrix call's walk down the order: `order` and `group_end`).
#[derive(Debug, Clone, Copy)]
pub struct TransformSpec<'a> {
    pub needs: &'a Needs,
    pub params: &'a Params,
    pub ranks: RankOutputs,
}

/// A unit's values as a rebuild receives them: lent, or given up to be centred in place.
enum UnitValues<'a> {
    Lent(&'a [f64]),
    Given(&'a mut Vec<f64>),
}

impl UnitValues<'_> {
    fn get(&self) -> &[f64] {
        match self {
            UnitValues::Lent(a) => a,
            UnitValues::Given(a) => a,
        }
    }
}

/// What a rebuild's moments start from, found before the ranking reads the values.
#[derive(Clone, Copy)]
struct MomentsFrom {
    /// the metrics need the moments (products or label sums)
    wanted: bool,
    constant: bool,
    max_abs: f64,
}

/// A unit of `n` inputs given by its nonzero entries (`rows` ascending, `values` != 0 and
/// finite), lent to [`UnitProfile::rebuild_sparse`], which moves them into the profile.
#[derive(Debug)]
pub struct UnitEntries<'e> {
    pub n: usize,
    pub rows: &'e mut Vec<u32>,
    pub values: &'e mut Vec<f64>,
}

/// What the pair kernels read about one unit a_k.
#[derive(Debug, Default)]
pub struct UnitProfile {
    /// N, the number of inputs.
    pub n: usize,
    /// The power of two the moments below are of a * `scale`: 1 for ordinary values, else
    /// what brings tiny (subnormal) or huge ones near 1, so that products keep every bit
    /// ([`magnitude_scale`]; present with the products and label sums, else 1). Data-valued
    /// results (mad) divide by it; Pearson r and cosine do not depend on it.
    pub scale: f64,
    /// The mean of a * scale.
    pub mean: f64,
    /// a * scale - mean; exactly 0 for a constant unit.
    pub centred: Vec<f64>,
    /// sum of `centred` (0 up to rounding; kept so products stay exact).
    pub centred_sum: f64,
    /// ||a * scale - mean|| and ||a * scale||.
    pub centred_norm: f64,
    pub norm: f64,
    /// Ascending midranks minus (N+1)/2 (present when `Needs::order`).
    pub centred_rank: Vec<f64>,
    pub centred_rank_norm: f64,
    /// #{j : a_j >= a_i} (present when `Needs::order`, for the pair kernel only: matrix
    /// calls read `group_end`).
    pub at_least: Vec<u32>,
    /// Descending order, ties by index (present when `Needs::order`).
    pub order: Vec<u32>,
    /// #{j : a_j >= a_i} for the input at each position of `order` (present when
    /// `Needs::order`).
    pub group_end: Vec<u32>,
    /// |b|, the size of the top-alpha set (ties at the cut included).
    pub n_top: usize,
    /// The top-alpha set b: members (ascending), and membership by input. Both empty for
    /// a sparse unit whose b is every input (`top_is_all`).
    pub top: Vec<u32>,
    pub in_top: Vec<bool>,
    pub top_is_all: bool,
    /// Present for a unit transformed from its nonzero entries only ([`SparseEntries`]);
    /// then `centred`, `centred_rank`, `at_least`, `order` and `in_top` are empty.
    pub sparse: Option<SparseEntries>,
    /// The buffers of the last sparse form while the profile is dense, kept for the next
    /// unit that is sparse: a block's units turn from one form to the other, and dropping
    /// them each time faulted in fresh pages for the next sparse unit (a tenth of the page
    /// faults of the out-of-core bench's evaluate run).
    spare: SparseEntries,
    /// The top-random subset (with duplicates), its activations and their midranks.
    pub subset: Vec<u32>,
    pub subset_a: Vec<f64>,
    pub subset_rank: Vec<f64>,
}

impl UnitProfile {
    /// Transforms unit `unit` (its activations `a`, already validated finite).
    pub fn build(a: &[f64], unit: usize, needs: &Needs, params: &Params) -> UnitProfile {
        let mut p = UnitProfile::default();
        let spec = TransformSpec {
            needs,
            params,
            ranks: PAIR_KERNEL_RANKS,
        };
        p.rebuild(a, unit, spec, &mut SortScratch::default());
        p
    }

    /// [`UnitProfile::build`] into this profile, reusing its vectors and the sort's buffers,
    /// so a thread that transforms many units faults in its memory once. Only what
    /// `spec.needs` asks for is computed, and of the ranking only what `spec.ranks` names.
    pub fn rebuild(
        &mut self,
        a: &[f64],
        unit: usize,
        spec: TransformSpec<'_>,
        scratch: &mut SortScratch,
    ) {
        self.rebuild_with(a, unit, spec, scratch, None);
    }

    /// [`UnitProfile::rebuild`] with `sums`, [`sum_and_max_abs`] of `a`, when the caller has
    /// them already (as the pairs call does, from its check of the copy): the same bits.
    pub fn rebuild_with(
        &mut self,
        a: &[f64],
        unit: usize,
        spec: TransformSpec<'_>,
        scratch: &mut SortScratch,
        sums: Option<(f64, f64)>,
    ) {
        let summary = self.rebuild_but_moments(a, unit, spec, scratch, sums);
        self.set_moments(UnitValues::Lent(a), summary);
    }

    /// [`UnitProfile::rebuild_with`] on a copy of the unit that the caller gives up: the
    /// centring writes over the copy instead of into a second buffer of N values, and `a` is
    /// left holding the profile's previous buffer (its values unspecified, its capacity kept
    /// for the next copy). The same bits.
    pub fn rebuild_taking(
        &mut self,
        a: &mut Vec<f64>,
        unit: usize,
        spec: TransformSpec<'_>,
        scratch: &mut SortScratch,
        sums: Option<(f64, f64)>,
    ) {
        let summary = self.rebuild_but_moments(a, unit, spec, scratch, sums);
        self.set_moments(UnitValues::Given(a), summary);
    }

    /// Everything of a rebuild but the moments (the centred values and norms), which come
    /// last so that they may overwrite `a`; returns what they start from.
    fn rebuild_but_moments(
        &mut self,
        a: &[f64],
        unit: usize,
        spec: TransformSpec<'_>,
        scratch: &mut SortScratch,
        sums: Option<(f64, f64)>,
    ) -> MomentsFrom {
        let TransformSpec {
            needs,
            params,
            ranks,
        } = spec;
        let n = a.len();
        self.n = n;
        let constant = a.iter().all(|&v| v == a[0]);
        // The centred values, their sum and the norms serve the products and label sums only.
        let wanted = needs.products || needs.inverse_sums;
        // the sum and the largest magnitude in one pass (the same lanes as apart)
        let (sum, max_abs) = if wanted || !constant {
            sums.unwrap_or_else(|| sum_and_max_abs(a))
        } else {
            (0.0, 0.0)
        };
        self.mean = if constant { a[0] } else { sum / n as f64 };
        self.scale = 1.0;
        let mut ranking = Ranking {
            order: std::mem::take(&mut self.order),
            midrank: std::mem::take(&mut self.centred_rank),
            at_least: std::mem::take(&mut self.at_least),
            group_end: std::mem::take(&mut self.group_end),
            tie_sum: 0,
        };
        if needs.order {
            // centred by (N + 1) / 2, the mean rank
            let mid = (n as f64 + 1.0) / 2.0;
            rank_into_with(a, &mut ranking, scratch, ranks, mid);
            self.centred_rank_norm = centred_rank_norm(n, ranking.tie_sum);
        } else {
            ranking.order.clear();
            ranking.midrank.clear();
            ranking.at_least.clear();
            ranking.group_end.clear();
            self.centred_rank_norm = 0.0;
        }
        (self.order, self.centred_rank, self.at_least, self.group_end) = (
            ranking.order,
            ranking.midrank,
            ranking.at_least,
            ranking.group_end,
        );

        if let Some(sp) = self.sparse.take() {
            self.spare = sp;
        }
        self.top_is_all = false;
        self.top.clear();
        self.in_top.clear();
        if needs.top_set {
            if params.binary_units {
                // already binary: b is where the unit is 1 (its nonzeros), ascending
                self.top.extend(nonzero_inputs(a));
            } else {
                top_alpha_set_into(
                    a,
                    params.alpha,
                    (!self.order.is_empty()).then_some(&self.order[..]),
                    &mut self.top,
                );
            }
            self.in_top.resize(n, false);
            for &i in &self.top {
                self.in_top[i as usize] = true;
            }
        }
        self.n_top = self.top.len();
        self.subset.clear();
        self.subset_a.clear();
        self.subset_rank.clear();
        if needs.top_random {
            self.subset = if params.binary_units {
                // b, the nonzeros, is already at hand when a metric needed the top set
                let ones = if needs.top_set {
                    self.top.clone()
                } else {
                    nonzero_inputs(a).collect()
                };
                binary_top_random_subset(ones, n, unit, params)
            } else if self.order.is_empty() {
                // only the top draws' pool needs ordering, not all N
                let pool = top_count(params.top_random_alpha, n);
                let head = descending_head(a, pool);
                top_random_subset_by(n, |j| head[j], unit, params)
            } else {
                top_random_subset(&self.order, unit, params)
            };
            self.subset_a = self.subset.iter().map(|&i| a[i as usize]).collect();
            self.subset_rank = rank(&self.subset_a).midrank;
        }
        MomentsFrom {
            wanted,
            constant,
            max_abs,
        }
    }

    /// The centred values, their sum and the norms, when `from.wanted` (else empty and 0),
    /// from the values and the mean set before.
    fn set_moments(&mut self, values: UnitValues<'_>, from: MomentsFrom) {
        let MomentsFrom {
            wanted,
            constant,
            max_abs,
        } = from;
        if !wanted {
            self.centred.clear();
            (self.centred_sum, self.centred_norm, self.norm) = (0.0, 0.0, 0.0);
            return;
        }
        self.scale = magnitude_scale(max_abs);
        if self.scale == 1.0 && !constant {
            // the centred values, their sum and both norms in one pass
            (self.norm, self.centred_sum, self.centred_norm) = match values {
                UnitValues::Lent(a) => centred_moments(a, self.mean, max_abs, &mut self.centred),
                UnitValues::Given(a) => {
                    let moments = centred_moments_in_place(a, self.mean, max_abs);
                    std::mem::swap(&mut self.centred, a);
                    moments
                }
            };
            return;
        }
        let a = values.get();
        let n = a.len();
        if self.scale == 1.0 {
            self.centred.clear();
            self.centred.resize(n, 0.0);
            self.norm = robust_norm_slice_with_max(a, max_abs);
            self.centred_sum = lane_sum(&self.centred);
            self.centred_norm = robust_norm_slice(&self.centred);
        } else {
            self.centred.clear();
            // Tiny or huge values: the same steps on a * scale (exact), held in
            // `centred` until they are centred in place.
            let scale = self.scale;
            self.centred.extend(a.iter().map(|v| v * scale));
            self.mean = if constant {
                self.centred[0]
            } else {
                lane_sum(&self.centred) / n as f64
            };
            self.norm = robust_norm_slice(&self.centred);
            let mean = self.mean;
            for v in self.centred.iter_mut() {
                *v = if constant { 0.0 } else { *v - mean };
            }
            self.centred_sum = lane_sum(&self.centred);
            self.centred_norm = robust_norm_slice(&self.centred);
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }
}

/// The top-alpha set {i : a_i >= cut}, cut the ceil(alpha N)-th largest value; ties at the
/// cut are all included (SPEC section 2). Ascending inputs, so that every sum over the set
/// runs in one order. Uses the full order when one is at hand.
pub fn top_alpha_set(a: &[f64], alpha: f64, order: Option<&[u32]>) -> Vec<u32> {
    let mut top = Vec::new();
    top_alpha_set_into(a, alpha, order, &mut top);
    top
}

/// [`top_alpha_set`] into `top` (cleared first).
pub fn top_alpha_set_into(a: &[f64], alpha: f64, order: Option<&[u32]>, top: &mut Vec<u32>) {
    top.clear();
    let n_top = top_count(alpha, a.len());
    match order {
        Some(order) => {
            let cut = a[order[n_top - 1] as usize];
            // One pass in input order: the set comes out ascending, whatever found the cut.
            top.extend((0..a.len() as u32).filter(|&i| a[i as usize] >= cut));
        }
        // the same set, ascending, by a selection ([`crate::radix::top_k_set_into`])
        None => crate::radix::top_k_set_into(a, n_top, top),
    }
}

/// k inputs drawn without replacement from the unit's top ceil(alpha N) (by the unique
/// descending order), plus k drawn without replacement from all N; duplicates kept.
/// Each unit seeds its own stream, so results do not depend on the thread count.
pub fn top_random_subset(order: &[u32], unit: usize, params: &Params) -> Vec<u32> {
    top_random_subset_by(order.len(), |j| order[j], unit, params)
}

/// The first `count` inputs of the descending order (ties by index, 0 and -0 equal, as the
/// full order has them), without ordering all N: the inputs at or above the count-th largest
/// value, sorted.
fn descending_head(a: &[f64], count: usize) -> Vec<u32> {
    let mut head = Vec::new();
    crate::radix::top_k_set_into(a, count, &mut head);
    // finite values: partial_cmp is total here, and equal for 0 and -0
    head.sort_unstable_by(|&i, &j| {
        a[j as usize]
            .partial_cmp(&a[i as usize])
            .expect("finite activations")
            .then(i.cmp(&j))
    });
    head.truncate(count);
    head
}

/// The inputs where `a` is nonzero, ascending: the top set of a unit that is already binary.
fn nonzero_inputs(a: &[f64]) -> impl Iterator<Item = u32> + '_ {
    (0..a.len() as u32).filter(|&i| a[i as usize] != 0.0)
}

/// The top-random subset of a unit of `n` inputs that is already binary
/// ([`Params::binary_units`]): every input where it is nonzero (`ones`, ascending), plus k
/// drawn without replacement from all N, duplicates kept, as the reference's
/// `*_top_and_random_binary` take it.
pub fn binary_top_random_subset(
    ones: Vec<u32>,
    n: usize,
    unit: usize,
    params: &Params,
) -> Vec<u32> {
    let mut rng = SplitMix64::for_stream(params.seed, unit as u64);
    let mut subset = ones;
    subset.extend(
        rng.sample_without_replacement(n, params.top_random_k.min(n))
            .into_iter()
            .map(|j| j as u32),
    );
    subset
}

/// [`top_random_subset`] with the descending order given as a function of the position.
fn top_random_subset_by(
    n: usize,
    order: impl Fn(usize) -> u32,
    unit: usize,
    params: &Params,
) -> Vec<u32> {
    let pool = top_count(params.top_random_alpha, n);
    let mut rng = SplitMix64::for_stream(params.seed, unit as u64);
    let mut subset: Vec<u32> = rng
        .sample_without_replacement(pool, params.top_random_k.min(pool))
        .into_iter()
        .map(order)
        .collect();
    subset.extend(
        rng.sample_without_replacement(n, params.top_random_k.min(n))
            .into_iter()
            .map(|j| j as u32),
    );
    subset
}

/// A unit stored by its entries other than 0, as SAE latents are: every per-input quantity
/// is kept for those entries only, and the zero entries form one tie group whose terms are
/// closed forms. Costs O(nnz log nnz) per unit instead of O(N).
#[derive(Debug, Default)]
pub struct SparseEntries {
    /// Inputs with a != 0, ascending, and a there.
    pub rows: Vec<u32>,
    pub values: Vec<f64>,
    /// Ascending midrank minus (N+1)/2 at those inputs (present when `Needs::order`).
    pub centred_rank: Vec<f64>,
    /// Positions in `rows`, by value descending (ties by input).
    pub order: Vec<u32>,
    /// For each position of `order`, the end of its tie group in the order of all inputs
    /// (#{j : a_j >= a_i}), read in order by the AP walk (present with the ranks).
    pub group_end: Vec<u32>,
    /// The same group end by entry (present with the ranks), read by the sweeps concept by
    /// concept.
    pub at_least: Vec<u32>,
    /// Entries above 0: in the descending order of all inputs, the zero group comes right
    /// after them.
    pub n_above: usize,
    /// The zero group: its size, centred midrank and #{j : a_j >= 0}.
    pub n_zero: usize,
    pub zero_centred_rank: f64,
    pub zero_at_least: u32,
}

impl SparseEntries {
    /// The input at `position` of the descending order of all N inputs (ties by input).
    fn input_at(&self, position: usize) -> u32 {
        if position < self.n_above {
            self.rows[self.order[position] as usize]
        } else if position < self.n_above + self.n_zero {
            // the k-th input (ascending) that is not an entry: k + the entries before it,
            // found as the first entry m with rows[m] - m (non-entries before it) > k
            let k = position - self.n_above;
            let (mut lo, mut hi) = (0, self.rows.len());
            while lo < hi {
                let m = (lo + hi) / 2;
                if self.rows[m] as usize - m <= k {
                    lo = m + 1;
                } else {
                    hi = m;
                }
            }
            (k + lo) as u32
        } else {
            self.rows[self.order[position - self.n_zero] as usize]
        }
    }

    /// a at input `i`.
    fn value_at(&self, i: u32) -> f64 {
        self.rows.binary_search(&i).map_or(0.0, |e| self.values[e])
    }
}

impl SparseEntries {
    /// Readies entries just moved in for a unit of `n` inputs: their counts, and nothing of
    /// an earlier unit's ranks (set again by the ranks when needed).
    fn reset_for(&mut self, n: usize) {
        self.n_zero = n - self.rows.len();
        self.n_above = self.values.iter().filter(|&&v| v > 0.0).count();
        // (the order, midranks and group sizes are sized by what computes them, or cleared
        // when nothing does: `UnitProfile::rebuild_sparse`)
        self.group_end.clear();
        self.zero_centred_rank = 0.0;
        self.zero_at_least = 0;
    }
}

impl UnitProfile {
    /// The profile of a unit given by its nonzero entries. Returns false, leaving the profile
    /// unusable, when the top-alpha set is neither inside the entries nor every input, or
    /// when the units are already binary ([`Params::binary_units`]) and a top set is needed:
    /// the caller then builds the dense profile. Requires at least one zero entry. The
    /// entries move into the profile: on success `entries.rows` and `entries.values` hold
    /// buffers of no meaning (for reuse), and on failure the entries as given.
    pub fn rebuild_sparse(
        &mut self,
        entries: UnitEntries<'_>,
        unit: usize,
        spec: TransformSpec<'_>,
        scratch: &mut SortScratch,
    ) -> bool {
        let TransformSpec {
            needs,
            params,
            ranks,
        } = spec;
        if params.binary_units && (needs.top_set || needs.top_random) {
            return false;
        }
        let UnitEntries { n, rows, values } = entries;
        debug_assert!(rows.len() < n);
        let mut sp = self
            .sparse
            .take()
            .unwrap_or_else(|| std::mem::take(&mut self.spare));
        // the entries move in (no copy); the caller gets the last unit's buffers back, or its
        // own entries when the sparse form cannot hold this unit
        std::mem::swap(&mut sp.rows, rows);
        std::mem::swap(&mut sp.values, values);
        self.n = n;
        self.sparse_moments(&sp.values, n);
        self.clear_dense_forms();
        sp.reset_for(n);
        let n_top = top_count(params.alpha, n);
        // A top set inside the positive entries needs only its cut (a selection); the ranks,
        // the top-random draws and a cut among the zeros or below read the order.
        let top_inside = needs.top_set && n_top <= sp.n_above;
        let walked = needs.order && ranks.order;
        if walked || needs.top_random || (needs.top_set && !top_inside) {
            crate::radix::sort_descending_into(&sp.values, &mut sp.order, scratch);
        } else {
            sp.order.clear();
        }
        self.centred_rank_norm = if !needs.order {
            sp.centred_rank.clear();
            sp.at_least.clear();
            0.0
        } else if sp.order.is_empty() {
            sparse_ranks_unordered(&mut sp, n, scratch)
        } else {
            sparse_ranks(&mut sp, n)
        };
        self.n_top = 0;
        if needs.top_set && !self.sparse_top_set(&sp, n_top, top_inside) {
            std::mem::swap(&mut sp.rows, rows);
            std::mem::swap(&mut sp.values, values);
            self.sparse = Some(sp);
            return false;
        }
        self.sparse_subset(&sp, unit, needs, params);
        self.sparse = Some(sp);
        true
    }

    /// The moments of a sparse unit's `values` times their magnitude scale, as the dense
    /// profile has them (a copy only for tiny or huge values: the entries keep the values
    /// themselves, which the ranks and the top set read).
    fn sparse_moments(&mut self, values: &[f64], n: usize) {
        let nnz = values.len();
        let n_zero = n - nnz;
        // (the sum and the largest magnitude in one pass, as the dense profile has them)
        let (sum, max_abs) = sum_and_max_abs(values);
        self.scale = magnitude_scale(max_abs);
        let scaled_copy: Vec<f64>;
        let (scaled, sum, max_abs) = if self.scale == 1.0 {
            (values, sum, max_abs)
        } else {
            scaled_copy = values.iter().map(|v| v * self.scale).collect();
            let (sum, max_abs) = (lane_sum(&scaled_copy), max_abs_slice(&scaled_copy));
            (&scaled_copy[..], sum, max_abs)
        };
        self.mean = sum / n as f64;
        let mean = self.mean;
        // (each sum in eight lanes, as the dense profile's)
        self.centred_sum = shifted_lane_sum(scaled, mean) - n_zero as f64 * mean;
        self.centred_norm = if nnz == 0 {
            0.0 // constant 0: exactly 0, as the dense profile has it
        } else {
            robust_norm_shifted_slice(scaled, mean, -mean, n_zero)
        };
        self.norm = robust_norm_slice_with_max(scaled, max_abs);
    }

    /// Empties what only a dense profile holds, and the top set.
    fn clear_dense_forms(&mut self) {
        for v in [&mut self.centred, &mut self.centred_rank] {
            v.clear();
        }
        self.at_least.clear();
        self.order.clear();
        self.group_end.clear();
        self.in_top.clear();
        self.top.clear();
        self.top_is_all = false;
    }

    /// A sparse unit's top set of `n_top` (ties at the cut included): inside the positive
    /// entries (`top_inside`), or else every input. Returns false when it is neither.
    fn sparse_top_set(&mut self, sp: &SparseEntries, n_top: usize, top_inside: bool) -> bool {
        if top_inside {
            // b lies inside the positive entries: ties at the cut included, ascending
            if sp.order.is_empty() {
                crate::radix::top_k_set_into(&sp.values, n_top, &mut self.top);
                for e in self.top.iter_mut() {
                    *e = sp.rows[*e as usize];
                }
            } else {
                let cut = sp.values[sp.order[n_top - 1] as usize];
                self.top.extend(
                    sp.rows
                        .iter()
                        .zip(&sp.values)
                        .filter(|(_, &v)| v >= cut)
                        .map(|(&i, _)| i),
                );
            }
            self.n_top = self.top.len();
            return true;
        }
        // b takes in the zero group; it is every input when no entry lies below its cut,
        // which (b holding the zeros) means no negative entry outside b.
        let nnz = sp.rows.len();
        let below_zero = nnz - sp.n_above;
        let cut_position = n_top - 1;
        let everything = below_zero == 0 || {
            let last = sp.values[sp.order[nnz - 1] as usize];
            let cut = if cut_position < sp.n_above + sp.n_zero {
                0.0
            } else {
                sp.values[sp.order[cut_position - sp.n_zero] as usize]
            };
            last >= cut
        };
        if everything {
            self.top_is_all = true;
            self.n_top = self.n;
        }
        everything
    }

    /// A sparse unit's top-random subset, its activations and their midranks.
    fn sparse_subset(&mut self, sp: &SparseEntries, unit: usize, needs: &Needs, params: &Params) {
        self.subset.clear();
        self.subset_a.clear();
        self.subset_rank.clear();
        if needs.top_random {
            let n = self.n;
            self.subset = top_random_subset_by(n, |j| sp.input_at(j), unit, params);
            self.subset_a = self.subset.iter().map(|&i| sp.value_at(i)).collect();
            self.subset_rank = rank(&self.subset_a).midrank;
        }
    }
}

/// [`sparse_ranks`] without the order, for callers that read the entries' midranks and
/// group ends by entry only (`centred_rank`, `at_least`; `group_end` stays empty): the
/// entries' own ranking (by counting, for 16-bit values) shifted around the zero group. Each
/// midrank is a half-integer reached by exact steps, so it has the bits `sparse_ranks` gives.
fn sparse_ranks_unordered(sp: &mut SparseEntries, n: usize, scratch: &mut SortScratch) -> f64 {
    let mut ranking = Ranking {
        midrank: std::mem::take(&mut sp.centred_rank),
        at_least: std::mem::take(&mut sp.at_least),
        ..Ranking::default()
    };
    let outputs = RankOutputs {
        order: false,
        at_least: true,
        midrank: true,
    };
    rank_into_with(&sp.values, &mut ranking, scratch, outputs, 0.0);
    let mid = (n as f64 + 1.0) / 2.0;
    let n_zero = sp.n_zero;
    for ((m, g), &v) in ranking
        .midrank
        .iter_mut()
        .zip(ranking.at_least.iter_mut())
        .zip(&sp.values)
    {
        // above 0: every zero ranks below the entry; below 0: every zero is at least it
        if v > 0.0 {
            *m += n_zero as f64;
        } else {
            *g += n_zero as u32;
        }
        *m -= mid;
    }
    (sp.centred_rank, sp.at_least) = (ranking.midrank, ranking.at_least);
    let (first, last) = (sp.n_above, sp.n_above + sp.n_zero);
    sp.zero_centred_rank = (n + 1) as f64 - (first + 1 + last) as f64 / 2.0 - mid;
    sp.zero_at_least = last as u32;
    centred_rank_norm(n, ranking.tie_sum + tie_term(sp.n_zero))
}

/// Midranks and group ends of the entries within all n inputs (the zero group sits between
/// the positive and the negative entries); returns the centred-rank norm.
fn sparse_ranks(sp: &mut SparseEntries, n: usize) -> f64 {
    let nnz = sp.rows.len();
    let mid = (n as f64 + 1.0) / 2.0;
    // position in the order of all inputs of the entry at position q of the entries' order
    let full = |q: usize| if q < sp.n_above { q } else { q + sp.n_zero };
    // (every entry's slot is written below, in the order's groups)
    resize_for_overwrite(&mut sp.centred_rank, nnz);
    resize_for_overwrite(&mut sp.at_least, nnz);
    sp.group_end.clear();
    // the tie terms of the entries' groups and of the zero group (see `centred_rank_norm`)
    let mut tie_sum = 0u128;
    let mut start = 0;
    while start < nnz {
        let v = sp.values[sp.order[start] as usize];
        let mut end = start + 1;
        while end < nnz && sp.values[sp.order[end] as usize] == v {
            end += 1;
        }
        // equal values share a sign, so the group is contiguous in the full order too
        let (first, last) = (full(start), full(end - 1) + 1);
        let midrank = (n + 1) as f64 - (first + 1 + last) as f64 / 2.0;
        for &e in &sp.order[start..end] {
            sp.centred_rank[e as usize] = midrank - mid;
            sp.at_least[e as usize] = last as u32;
        }
        sp.group_end
            .extend(std::iter::repeat_n(last as u32, end - start));
        tie_sum += tie_term(end - start);
        start = end;
    }
    let (first, last) = (sp.n_above, sp.n_above + sp.n_zero);
    sp.zero_centred_rank = (n + 1) as f64 - (first + 1 + last) as f64 / 2.0 - mid;
    sp.zero_at_least = last as u32;
    centred_rank_norm(n, tie_sum + tie_term(sp.n_zero))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile rebuilt from entries, then densely, then from entries again (as a block's
    /// profiles are when its units change form) holds what a fresh profile of the last unit
    /// holds: the buffers kept from the earlier forms carry nothing over.
    #[test]
    fn a_profile_reused_across_forms_equals_a_fresh_one() {
        let mut rng = SplitMix64::for_stream(5, 0);
        let n = 3000;
        // few distinct levels (ties), zeros with the given share, some negative entries
        let mut unit = |zeros: f64| -> Vec<f64> {
            (0..n)
                .map(|_| {
                    if rng.next_f64() < zeros {
                        0.0
                    } else {
                        (rng.next_f64() * 12.0).floor() - 2.0
                    }
                })
                .collect()
        };
        let (first, dense, last) = (unit(0.4), unit(0.0), unit(0.7));
        let params = Params::default();
        let entries = |a: &[f64]| -> (Vec<u32>, Vec<f64>) {
            (0..n as u32)
                .filter(|&i| a[i as usize] != 0.0)
                .map(|i| (i, a[i as usize]))
                .unzip()
        };
        let mut sort = SortScratch::default();
        let every = Needs::of(&crate::metric::Metric::ALL);
        // the last unit also under a call with no ranks (profiles are kept from call to
        // call), which leaves the rank fields of its entries unset
        let products = Needs::of(&[crate::metric::Metric::Correlation]);
        for (last_needs, ranks) in [
            (every, PAIR_KERNEL_RANKS),
            (every, RankOutputs::ALL),
            (products, PAIR_KERNEL_RANKS),
        ] {
            let from_entries =
                |p: &mut UnitProfile, a: &[f64], needs: &Needs, sort: &mut SortScratch| {
                    let (mut rows, mut values) = entries(a);
                    let built = p.rebuild_sparse(
                        UnitEntries {
                            n,
                            rows: &mut rows,
                            values: &mut values,
                        },
                        3,
                        TransformSpec {
                            needs,
                            params: &params,
                            ranks,
                        },
                        sort,
                    );
                    assert!(
                        built,
                        "the test's units hold their top set among the entries"
                    );
                };
            let mut reused = UnitProfile::default();
            from_entries(&mut reused, &first, &every, &mut sort);
            let spec = TransformSpec {
                needs: &every,
                params: &params,
                ranks,
            };
            reused.rebuild(&dense, 3, spec, &mut sort);
            assert!(reused.sparse.is_none());
            from_entries(&mut reused, &last, &last_needs, &mut sort);
            let mut fresh = UnitProfile::default();
            from_entries(&mut fresh, &last, &last_needs, &mut sort);
            assert_eq!(
                format!("{:?}", reused.sparse),
                format!("{:?}", fresh.sparse)
            );
            let scalars = |p: &UnitProfile| {
                (
                    p.n,
                    p.mean.to_bits(),
                    p.scale.to_bits(),
                    p.centred_sum.to_bits(),
                    p.centred_norm.to_bits(),
                    p.norm.to_bits(),
                    p.centred_rank_norm.to_bits(),
                    p.n_top,
                    p.top.clone(),
                    p.top_is_all,
                    p.subset.clone(),
                )
            };
            assert_eq!(scalars(&reused), scalars(&fresh));
            assert!(reused.centred.is_empty() && reused.centred_rank.is_empty());
        }
    }

    /// A unit given up to be centred in place transforms to the same profile, bit for bit,
    /// as one lent: ordinary, constant, tiny and huge values (the last two take a magnitude
    /// scale), under every metric and under the products alone, one profile reused for all.
    #[test]
    fn a_unit_centred_in_place_equals_one_lent() {
        let mut rng = SplitMix64::for_stream(9, 0);
        let n = 1001;
        let ordinary: Vec<f64> = (0..n).map(|_| rng.next_f64() * 4.0 - 1.0).collect();
        let units = [
            ordinary.clone(),
            vec![2.5; n],
            ordinary.iter().map(|v| v * 1e-310).collect(),
            ordinary.iter().map(|v| v * 1e300).collect(),
        ];
        let params = Params::default();
        let products = Needs::of(&[crate::metric::Metric::Cosine]);
        for needs in [Needs::of(&crate::metric::Metric::ALL), products] {
            let spec = TransformSpec {
                needs: &needs,
                params: &params,
                ranks: PAIR_KERNEL_RANKS,
            };
            let mut sort = SortScratch::default();
            let (mut lent, mut given) = (UnitProfile::default(), UnitProfile::default());
            given.centred = vec![7.0; 3];
            for a in &units {
                lent.rebuild(a, 4, spec, &mut sort);
                let mut copy = a.clone();
                given.rebuild_taking(&mut copy, 4, spec, &mut sort, None);
                let fields = |p: &UnitProfile| {
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    (
                        [p.mean, p.scale, p.centred_sum, p.centred_norm, p.norm].map(f64::to_bits),
                        bits(&p.centred),
                        bits(&p.centred_rank),
                        (p.top.clone(), p.subset.clone(), bits(&p.subset_a)),
                    )
                };
                assert_eq!(fields(&lent), fields(&given), "{:?}", &a[..3]);
            }
        }
    }

    /// The head of the descending order without the full sort equals the full sort's first
    /// positions, on ties, zeros of both signs, sorted runs, and every head length.
    #[test]
    fn descending_head_is_the_start_of_the_full_order() {
        let mut s = 7u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = 3000;
        let cases: Vec<Vec<f64>> = vec![
            (0..n).map(|_| (next() * 5.0).floor()).collect(),
            (0..n)
                .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
                .collect(),
            (0..n)
                .map(|_| if next() < 0.8 { -0.0 } else { next() - 0.5 })
                .collect(),
            (0..n).map(|i| i as f64).collect(),
            (0..n).map(|i| -(i as f64)).collect(),
            (0..n).map(|_| next()).collect(),
            vec![1.5],
        ];
        for a in &cases {
            let full = crate::radix::sort_descending(a);
            for count in [1, 2, 7, 31, 100, a.len() / 2, a.len()] {
                let count = count.clamp(1, a.len());
                assert_eq!(descending_head(a, count), full[..count], "count {count}");
            }
        }
    }
}
