//! The pair kernel: every metric of one (unit, concept) pair from the two transforms.
//!
//! Costs O(min(|b| log nnz, nnz)) for the top-set sums, O(|y|) for the label sums and
//! O(nnz) for sparse products, where nnz counts the concept's nonzero entries.

use crate::concepts::ConceptColumn;
use crate::error::{CoreError, Result};
use crate::metric::{harmonic, Metric, Needs, Params};
use crate::numeric::{magnitude_scale, robust_norm};
use crate::ranks::{
    ap_from_group_sizes, ap_with_tail, auc_from_rank_sum, finish_ap, group_weight, rank,
};
use crate::unit::UnitProfile;

/// log(max(c, 1e-8)) clips empty concepts as the reference implementation does.
const WPMI_FLOOR: f64 = 1e-8;

/// Sums over all inputs that a dense matrix product may supply instead of the kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Products {
    /// sum (a - mean a) (c - mean c)
    pub cov: f64,
    /// sum a c
    pub dot: f64,
    /// sum (rank a - mid) (rank c - mid)
    pub rank_cov: f64,
}

impl Products {
    /// cov and dot from raw = sum (a - mean a) c, the one product every path accumulates:
    /// cov = raw - mean(c) sum(a - mean a) (0 up to rounding) and dot = raw + mean(a) sum(c).
    pub fn from_centred(
        raw: f64,
        rank_cov: f64,
        unit: &UnitProfile,
        col: &ConceptColumn,
    ) -> Products {
        Products {
            cov: raw - col.mean * unit.centred_sum,
            dot: raw + unit.mean * col.sum,
            rank_cov,
        }
    }
}

/// Sums over the unit's top set b (forward metrics).
#[derive(Clone, Copy, Debug, Default)]
pub struct ForwardSums {
    /// TP = #{i in b : c_i >= 0.5}
    pub tp: f64,
    /// sum over b of the concept's ascending midranks
    pub rank_sum: f64,
    /// sum over b of log(max(c, 1e-8))
    pub log_sum: f64,
    /// average precision with label b and score c
    pub ap: f64,
}

/// The running forward sums of one (unit, concept) over the top set's nonzero members;
/// the pair kernel keeps one, the forward sweep one per concept.
#[derive(Clone, Debug, Default)]
pub struct ForwardAccumulator {
    tp: usize,
    members: usize,
    rank_sum: f64,
    log_sum: f64,
    at_least: Vec<u32>,
}

impl ForwardAccumulator {
    /// Adds a top-set member whose concept value is `value` > 0, with that entry's midrank
    /// and threshold size.
    #[inline(always)]
    pub fn add(&mut self, value: f64, rank: f64, at_least: u32, needs: &Needs) {
        self.members += 1;
        self.tp += (value >= 0.5) as usize;
        if needs.forward_rank_sum {
            self.rank_sum += rank;
        }
        if needs.forward_log_sum {
            self.log_sum += clipped_log(value);
        }
        if needs.forward_ap {
            self.at_least.push(at_least);
        }
    }

    /// Empties it for the next pair, keeping its buffer.
    pub fn reset(&mut self) {
        let mut at_least = std::mem::take(&mut self.at_least);
        at_least.clear();
        *self = ForwardAccumulator {
            at_least,
            ..Default::default()
        };
    }

    /// The sums over all of b: the `nb - members` members where c = 0 form the lowest tie
    /// group (rank `zero_rank`, threshold size N).
    pub fn finish(
        &mut self,
        nb: usize,
        n: usize,
        col: &ConceptColumn,
        needs: &Needs,
    ) -> ForwardSums {
        let zeros = nb - self.members;
        ForwardSums {
            tp: self.tp as f64,
            rank_sum: self.rank_sum + zeros as f64 * col.zero_rank,
            log_sum: self.log_sum + zeros as f64 * WPMI_FLOOR.ln(),
            ap: if needs.forward_ap {
                ap_with_tail(&mut self.at_least, nb, zeros, n)
            } else {
                0.0
            },
        }
    }
}

/// Sums over the concept's positive labels y (inverse metrics).
#[derive(Clone, Copy, Debug, Default)]
pub struct InverseSums {
    /// sum over y of (a - mean a)
    pub centred_sum: f64,
    /// sum over y of the unit's ascending midranks
    pub rank_sum: f64,
    /// average precision with label y and score a
    pub ap: f64,
}

/// Sums that a caller computed for many concepts at once (a sweep over a unit's inputs,
/// a matrix product); the kernel computes whatever is missing for the pair alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct Precomputed {
    pub products: Option<Products>,
    pub forward: Option<ForwardSums>,
    pub inverse: Option<InverseSums>,
}

/// Everything the metrics of one pair are computed from.
#[derive(Clone, Copy, Debug, Default)]
struct PairStats {
    n: f64,
    nb: f64,
    ny: f64,
    fwd: ForwardSums,
    inv: InverseSums,
    products: Products,
    top_random_corr: f64,
    top_random_spearman: f64,
    /// The size of the top-random subset (duplicates counted).
    subset_len: f64,
    unit: Moments,
    concept: Moments,
}

/// What the metrics read of one side (a unit or a concept) on its own. The moments are of
/// the values times `scale` (a power of two, 1 for ordinary values), as the products are.
#[derive(Clone, Copy, Debug, Default)]
struct Moments {
    scale: f64,
    mean: f64,
    /// sum (x - mean x): 0 up to rounding
    centred_sum: f64,
    norm: f64,
    centred_norm: f64,
    /// the norm of the centred midranks
    centred_rank_norm: f64,
}

impl Moments {
    fn of_unit(unit: &UnitProfile) -> Moments {
        Moments {
            scale: unit.scale,
            mean: unit.mean,
            centred_sum: unit.centred_sum,
            norm: unit.norm,
            centred_norm: unit.centred_norm,
            centred_rank_norm: unit.centred_rank_norm,
        }
    }

    fn of_concept(col: &ConceptColumn) -> Moments {
        Moments {
            scale: col.scale,
            mean: col.mean,
            centred_sum: 0.0,
            norm: col.norm,
            centred_norm: col.centred_norm,
            centred_rank_norm: col.rank_centred_norm,
        }
    }
}

/// Scratch space reused across the pairs a thread scores.
#[derive(Default)]
pub struct PairKernel {
    forward: ForwardAccumulator,
    at_least: Vec<u32>,
    subset_c: Vec<f64>,
}

/// A nonzero entry's midrank and threshold size; absent (0) when no metric asked for ranks.
#[inline(always)]
fn rank_at(col: &ConceptColumn, j: usize) -> f64 {
    col.nz_rank.get(j).copied().unwrap_or(0.0)
}

#[inline(always)]
fn at_least_at(col: &ConceptColumn, j: usize) -> u32 {
    col.nz_at_least.get(j).copied().unwrap_or(0)
}

/// a / b, NaN when b is 0 (SPEC section 1: undefined is NaN).
#[inline]
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

/// Pearson r of two equally long vectors (centred first), clipped to [-1, 1]; NaN when
/// either is constant. Each vector is first multiplied by its [`magnitude_scale`] (1 for
/// ordinary values), so tiny and huge values keep every bit.
pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    if x.iter().all(|&v| v == x[0]) || y.iter().all(|&v| v == y[0]) {
        return f64::NAN;
    }
    let scale_of = |v: &[f64]| magnitude_scale(v.iter().fold(0.0f64, |m, x| m.max(x.abs())));
    let (sx, sy) = (scale_of(x), scale_of(y));
    let n = x.len() as f64;
    let mx = x.iter().map(|v| v * sx).sum::<f64>() / n;
    let my = y.iter().map(|v| v * sy).sum::<f64>() / n;
    let sxy: f64 = x
        .iter()
        .zip(y)
        .map(|(a, b)| (a * sx - mx) * (b * sy - my))
        .sum();
    let nx = robust_norm(x.iter().map(|v| v * sx - mx), 0.0, 0);
    let ny = robust_norm(y.iter().map(|v| v * sy - my), 0.0, 0);
    correlation_from(sxy, nx, ny)
}

/// cov / (norm_x norm_y), divided in two steps so neither product over- or underflows;
/// NaN when a norm is 0 (SPEC section 1).
#[inline]
fn correlation_from(cov: f64, norm_x: f64, norm_y: f64) -> f64 {
    if norm_x == 0.0 || norm_y == 0.0 {
        return f64::NAN;
    }
    (cov / norm_x / norm_y).clamp(-1.0, 1.0)
}

impl PairKernel {
    /// Writes `metrics[j]` of the pair into `out[j]`, from the sums in `pre` where present.
    #[allow(clippy::too_many_arguments)]
    pub fn score(
        &mut self,
        unit: &UnitProfile,
        col: &ConceptColumn,
        needs: &Needs,
        params: &Params,
        pre: Precomputed,
        metrics: &[Metric],
        out: &mut [f64],
    ) {
        let n = unit.n();
        let mut s = PairStats {
            n: n as f64,
            nb: unit.n_top as f64,
            ny: col.n_positive() as f64,
            unit: Moments::of_unit(unit),
            concept: Moments::of_concept(col),
            ..Default::default()
        };
        if needs.forward {
            s.fwd = pre
                .forward
                .unwrap_or_else(|| self.forward(unit, col, needs));
        }
        if needs.inverse {
            s.inv = pre
                .inverse
                .unwrap_or_else(|| self.inverse(unit, col, needs));
        }
        if needs.products || needs.rank_products {
            s.products = pre
                .products
                .unwrap_or_else(|| sparse_products(unit, col, needs));
        }
        if needs.top_random {
            self.top_random(unit, col, &mut s);
        }
        for (m, o) in metrics.iter().zip(out.iter_mut()) {
            *o = value(*m, &s, params);
        }
    }

    /// Sums over the unit's top set b: TP, the concept's ranks, log values, AP groups.
    fn forward(&mut self, unit: &UnitProfile, col: &ConceptColumn, needs: &Needs) -> ForwardSums {
        let n = unit.n();
        let nnz = col.nz_index.len();
        let nb = unit.n_top;
        debug_assert!(
            unit.sparse.is_none(),
            "the pair kernel reads dense profiles"
        );
        let acc = &mut self.forward;
        acc.reset();
        let mut visit =
            |j: usize| acc.add(col.nz_value[j], rank_at(col, j), at_least_at(col, j), needs);
        // The cheapest way to meet b's members among the nonzeros, in ascending input order.
        if nnz == n {
            unit.top.iter().for_each(|&i| visit(i as usize));
        } else if nb * (usize::BITS - nnz.leading_zeros()) as usize <= nnz {
            for &i in &unit.top {
                if let Ok(j) = col.nz_index.binary_search(&i) {
                    visit(j);
                }
            }
        } else {
            for (j, &i) in col.nz_index.iter().enumerate() {
                if unit.in_top[i as usize] {
                    visit(j);
                }
            }
        }
        acc.finish(nb, n, col, needs)
    }

    /// Sums over the concept's positive labels y: activations, their ranks, AP groups.
    fn inverse(&mut self, unit: &UnitProfile, col: &ConceptColumn, needs: &Needs) -> InverseSums {
        let mid = (unit.n() as f64 + 1.0) / 2.0;
        let (mut sum, mut rank_sum) = (0.0, 0.0);
        self.at_least.clear();
        for &i in &col.positives {
            let i = i as usize;
            if needs.inverse_sums {
                sum += unit.centred[i];
                if needs.order {
                    rank_sum += unit.centred_rank[i] + mid;
                }
            }
            if needs.inverse_ap {
                self.at_least.push(unit.at_least[i]);
            }
        }
        InverseSums {
            centred_sum: sum,
            rank_sum,
            ap: if needs.inverse_ap {
                ap_from_group_sizes(&mut self.at_least, col.n_positive())
            } else {
                0.0
            },
        }
    }

    /// Pearson and Spearman on the unit's top-random subset.
    fn top_random(&mut self, unit: &UnitProfile, col: &ConceptColumn, s: &mut PairStats) {
        let n = unit.n();
        self.subset_c.clear();
        self.subset_c.extend(
            unit.subset
                .iter()
                .map(|&i| col.find(i, n).map_or(0.0, |j| col.nz_value[j])),
        );
        s.subset_len = unit.subset.len() as f64;
        s.top_random_corr = pearson(&unit.subset_a, &self.subset_c);
        // constant values have constant ranks, which pearson maps to NaN
        s.top_random_spearman = pearson(&unit.subset_rank, &rank(&self.subset_c).midrank);
    }
}

/// log(max(c, 1e-8)), wpmi's clipped log.
#[inline]
pub fn clipped_log(v: f64) -> f64 {
    v.max(WPMI_FLOOR).ln()
}

/// The all-input sums from the concept's nonzero entries (zeros contribute nothing once
/// the unit side is centred), both sides times their magnitude scales.
fn sparse_products(unit: &UnitProfile, col: &ConceptColumn, needs: &Needs) -> Products {
    let mut p = Products::default();
    if needs.products {
        let mut raw = 0.0;
        for (&i, &v) in col.nz_index.iter().zip(&col.nz_value) {
            raw += unit.centred[i as usize] * (v * col.scale);
        }
        p = Products::from_centred(raw, 0.0, unit, col);
    }
    if needs.rank_products {
        let mut rc = 0.0;
        for (&i, &r) in col.nz_index.iter().zip(&col.nz_rank) {
            rc += unit.centred_rank[i as usize] * (r - col.zero_rank);
        }
        p.rank_cov = rc;
    }
    p
}

fn value(m: Metric, s: &PairStats, params: &Params) -> f64 {
    if params.reference_values {
        reference_value(m, s, params)
    } else {
        library_value(m, s, params)
    }
}

/// The NeuronEval reference implementation's value ([`Params::reference_values`]), from the
/// same sums. Where SPEC's value is defined the two agree, except that the reference's
/// correlations are r (m - 1) / m (it divides by m after normalising by the sample standard
/// deviation). Where SPEC's value is NaN the reference's clamped denominators give: 0 for a
/// ratio of counts (precision, the balanced accuracies' halves, auc and inverse_auc with one
/// class), torcheval's 0 for an average precision without positives, 0 for the correlation or
/// cosine of a constant or all-zero vector, a side mean of 0 in mad (so -mean(a) for an empty
/// concept, mean(a) for a full one), and in wpmi a mean log over b of 0 for an empty b and
/// -lam log(0) = +inf for an empty concept (NaN when lam = 0, as 0 * inf is). recall, f1, iou
/// and accuracy divide without a clamp there, so their NaN stays.
fn reference_value(m: Metric, s: &PairStats, params: &Params) -> f64 {
    use Metric::*;
    let clamped = |num: f64, den: f64| num / den.max(1.0);
    let or_zero = |v: f64| if v.is_nan() { 0.0 } else { v };
    let scaled = |r: f64, m: f64| or_zero(r) * ((m - 1.0) / m);
    let tn = s.n - s.nb - s.ny + s.fwd.tp;
    let unit = &s.unit;
    match m {
        Precision => clamped(s.fwd.tp, s.ny),
        BalancedAccuracy => (clamped(s.fwd.tp, s.nb) + clamped(tn, s.n - s.nb)) / 2.0,
        InverseBalancedAccuracy => (clamped(s.fwd.tp, s.ny) + clamped(tn, s.n - s.ny)) / 2.0,
        Auc | InverseAuc | Auprc | InverseAuprc | Cosine => or_zero(library_value(m, s, params)),
        Correlation | Spearman => scaled(library_value(m, s, params), s.n),
        CorrelationTopRandom | SpearmanTopRandom => {
            scaled(library_value(m, s, params), s.subset_len)
        }
        Wpmi => {
            let mean = s.concept.mean / s.concept.scale;
            let log_mean = if mean == 0.0 {
                f64::NEG_INFINITY
            } else {
                mean.ln()
            };
            clamped(s.fwd.log_sum, s.nb) - params.lambda * log_mean
        }
        Mad => {
            let v = library_value(m, s, params);
            let mean = unit.mean / unit.scale;
            match (v.is_nan(), s.ny == 0.0) {
                (false, _) => v,
                (true, true) => -mean,
                (true, false) => mean,
            }
        }
        Recall | F1 | Iou | Accuracy => library_value(m, s, params),
        combined => {
            let (x, y) = combined
                .components()
                .expect("every other metric is a combination");
            harmonic(reference_value(x, s, params), reference_value(y, s, params))
        }
    }
}

/// SPEC section 3's value of metric `m` (NaN where undefined, SPEC section 1).
fn library_value(m: Metric, s: &PairStats, params: &Params) -> f64 {
    use Metric::*;
    let tn = s.n - s.nb - s.ny + s.fwd.tp;
    let (unit, col) = (&s.unit, &s.concept);
    match m {
        Recall => ratio(s.fwd.tp, s.nb),
        Precision => ratio(s.fwd.tp, s.ny),
        F1 => ratio(2.0 * s.fwd.tp, s.nb + s.ny),
        Iou => ratio(s.fwd.tp, s.nb + s.ny - s.fwd.tp),
        Accuracy => (s.fwd.tp + tn) / s.n,
        BalancedAccuracy => (ratio(s.fwd.tp, s.nb) + ratio(tn, s.n - s.nb)) / 2.0,
        InverseBalancedAccuracy => (ratio(s.fwd.tp, s.ny) + ratio(tn, s.n - s.ny)) / 2.0,
        Auc => nan_if_degenerate(
            s.nb,
            s.n,
            auc_from_rank_sum(s.fwd.rank_sum, s.nb as usize, s.n as usize),
        ),
        InverseAuc => nan_if_degenerate(
            s.ny,
            s.n,
            auc_from_rank_sum(s.inv.rank_sum, s.ny as usize, s.n as usize),
        ),
        Auprc => s.fwd.ap,
        InverseAuprc => s.inv.ap,
        Correlation => correlation_from(s.products.cov, unit.centred_norm, col.centred_norm),
        Cosine => correlation_from(s.products.dot, unit.norm, col.norm),
        Spearman => correlation_from(
            s.products.rank_cov,
            unit.centred_rank_norm,
            col.centred_rank_norm,
        ),
        Wpmi => {
            if col.mean == 0.0 {
                f64::NAN
            } else {
                s.fwd.log_sum / s.nb - params.lambda * (col.mean / col.scale).ln()
            }
        }
        // in units of a * scale, divided back
        Mad => nan_if_degenerate(
            s.ny,
            s.n,
            (s.inv.centred_sum / s.ny - (unit.centred_sum - s.inv.centred_sum) / (s.n - s.ny))
                / unit.scale,
        ),
        CorrelationTopRandom => s.top_random_corr,
        SpearmanTopRandom => s.top_random_spearman,
        combined => {
            let (x, y) = combined
                .components()
                .expect("every other metric is a combination");
            harmonic(library_value(x, s, params), library_value(y, s, params))
        }
    }
}

/// AUC and mad are undefined when the label is all 0 or all 1.
#[inline]
fn nan_if_degenerate(positives: f64, n: f64, v: f64) -> f64 {
    if positives == 0.0 || positives == n {
        f64::NAN
    } else {
        v
    }
}

/// One 2x2 table of a binary unit a against a binary concept c over `n` inputs:
/// n11 = #(a=1, c=1), n10 = #(a=1, c=0), n01 = #(a=0, c=1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Table {
    pub n: u64,
    pub n11: u64,
    pub n10: u64,
    pub n01: u64,
}

impl Table {
    /// The table of these counts, checked: whole numbers >= 0 that fit in `n` inputs.
    pub fn new(n: f64, n11: f64, n10: f64, n01: f64) -> Result<Table> {
        let whole = |v: f64| v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53);
        if !(whole(n) && whole(n11) && whole(n10) && whole(n01)) || n < 1.0 || n11 + n10 + n01 > n {
            return Err(CoreError::Parameter {
                name: "table",
                value: format!("(n={n}, n11={n11}, n10={n10}, n01={n01})"),
                reason: "counts must be whole numbers >= 0 with n >= 1 and n11 + n10 + n01 <= n"
                    .into(),
            });
        }
        Ok(Table {
            n: n as u64,
            n11: n11 as u64,
            n10: n10 as u64,
            n01: n01 as u64,
        })
    }

    /// The pair statistics the kernel would accumulate for these two binary vectors, with
    /// the unit used as already binarised (its top set b is {a = 1}).
    fn stats(&self) -> PairStats {
        let (n, n11, n10, n01) = (
            self.n as f64,
            self.n11 as f64,
            self.n10 as f64,
            self.n01 as f64,
        );
        let (nb, ny) = (n11 + n10, n11 + n01);
        // Ascending midranks of a 0/1 vector with `ones` ones: its zeros, then its ones.
        let midranks = |ones: f64| ((n - ones + 1.0) / 2.0, (n - ones) + (ones + 1.0) / 2.0);
        let (c_zero, c_one) = midranks(ny);
        let (a_zero, a_one) = midranks(nb);
        let moments = |ones: f64| {
            let mean = ones / n;
            // the centred norm of a 0/1 vector: sqrt(ones (1 - mean)^2 + (n - ones) mean^2)
            let centred_norm = (ones * (n - ones) / n).sqrt();
            Moments {
                scale: 1.0,
                mean,
                centred_sum: 0.0,
                norm: ones.sqrt(),
                centred_norm,
                // The midranks of a 0/1 vector are affine in it with slope n / 2, so its
                // rank products and norms are the plain ones times (n / 2)^2 and n / 2,
                // which cancel in Spearman's ratio: the plain ones stand in for them.
                centred_rank_norm: centred_norm,
            }
        };
        let (unit, concept) = (moments(nb), moments(ny));
        let cov = n11 - nb * concept.mean;
        PairStats {
            n,
            nb,
            ny,
            fwd: ForwardSums {
                tp: n11,
                rank_sum: n11 * c_one + n10 * c_zero,
                log_sum: n11 * clipped_log(1.0) + n10 * WPMI_FLOOR.ln(),
                ap: binary_ap(self.n11 + self.n10, self.n11 + self.n01, self.n11, self.n),
            },
            inv: InverseSums {
                centred_sum: n11 * (1.0 - unit.mean) - n01 * unit.mean,
                rank_sum: n11 * a_one + n01 * a_zero,
                ap: binary_ap(self.n11 + self.n01, self.n11 + self.n10, self.n11, self.n),
            },
            products: Products {
                cov,
                dot: n11,
                rank_cov: cov,
            },
            top_random_corr: f64::NAN,
            top_random_spearman: f64::NAN,
            subset_len: 0.0,
            unit,
            concept,
        }
    }
}

/// Average precision of a 0/1 score against labels with `n_pos` positives, of which `hits`
/// are among the `scored_one` inputs scored 1: two tie groups, summed with the arithmetic of
/// [`crate::ranks::ap_with_tail`] (a group of `hits` at threshold size `scored_one`, then
/// the other positives at threshold size `n`).
fn binary_ap(n_pos: u64, scored_one: u64, hits: u64, n: u64) -> f64 {
    let mut sum = 0.0;
    if hits > 0 {
        sum += hits as f64 * hits as f64 * group_weight(scored_one as usize);
    }
    if n_pos > hits {
        sum += (n_pos - hits) as f64 * n_pos as f64 * group_weight(n as usize);
    }
    finish_ap(sum, n_pos as usize)
}

/// Every metric in `metrics` of each 2x2 table: what the pair kernel returns for a binary
/// unit (used as already binarised: b = a, no top-alpha cut) against a binary concept with
/// these counts. `out[j][i]` is metric j of table i. The top-random metrics draw a subset,
/// so they are not functions of the table and are rejected.
pub fn table_scores(tables: &[Table], metrics: &[Metric], lambda: f64) -> Result<Vec<Vec<f64>>> {
    for &m in metrics {
        if m.facts().uses_sampling {
            return Err(CoreError::Parameter {
                name: "metrics",
                value: m.name().to_string(),
                reason: "a top-random metric draws a subset: it is not a function of the 2x2 table"
                    .into(),
            });
        }
    }
    let params = Params {
        lambda,
        ..Params::default()
    };
    params.validate()?;
    let mut out = vec![Vec::with_capacity(tables.len()); metrics.len()];
    for t in tables {
        let s = t.stats();
        for (column, &m) in out.iter_mut().zip(metrics) {
            column.push(value(m, &s, &params));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::MatrixView;

    /// Every 2x2 table of n = 6 against the kernels on the materialised 0/1 vectors, the unit
    /// binarised at exactly its ones (alpha = (nb - 0.5) / n).
    #[test]
    fn tables_match_the_kernels_on_binary_vectors() {
        let n = 6usize;
        let metrics: Vec<Metric> = Metric::ALL
            .iter()
            .copied()
            .filter(|m| !m.facts().uses_sampling)
            .collect();
        for n11 in 0..=n {
            for n10 in 0..=(n - n11) {
                for n01 in 0..=(n - n11 - n10) {
                    let nb = n11 + n10;
                    if nb == 0 {
                        continue;
                    }
                    let a: Vec<f64> = (0..n).map(|i| (i < nb) as u8 as f64).collect();
                    let c: Vec<f64> = (0..n)
                        .map(|i| (i < n11 || (nb..nb + n01).contains(&i)) as u8 as f64)
                        .collect();
                    let params = Params {
                        alpha: (nb as f64 - 0.5) / n as f64,
                        lambda: 0.7,
                        ..Params::default()
                    };
                    let av = MatrixView::new(&a, n, 1, 1, n).unwrap();
                    let cv = MatrixView::new(&c, n, 1, 1, n).unwrap();
                    let kernel = crate::score_matrix(&av, &cv, &metrics, &params, 0).unwrap();
                    let table = Table::new(n as f64, n11 as f64, n10 as f64, n01 as f64).unwrap();
                    let got = table_scores(&[table], &metrics, 0.7).unwrap();
                    for (j, m) in metrics.iter().enumerate() {
                        let (k, t) = (kernel[j][0], got[j][0]);
                        assert!(
                            (k.is_nan() && t.is_nan()) || (k - t).abs() <= 1e-12,
                            "{} of ({n11}, {n10}, {n01}): kernel {k}, table {t}",
                            m.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn tables_reject_sampled_metrics_and_bad_counts() {
        let t = Table::new(10.0, 2.0, 1.0, 1.0).unwrap();
        assert!(table_scores(&[t], &[Metric::CorrelationTopRandom], 1.0).is_err());
        assert!(table_scores(&[t], &[Metric::Wpmi], -1.0).is_err());
        for bad in [
            (10.0, 2.5, 1.0, 1.0),
            (10.0, 8.0, 2.0, 1.0),
            (0.0, 0.0, 0.0, 0.0),
            (5.0, -1.0, 0.0, 0.0),
        ] {
            assert!(Table::new(bad.0, bad.1, bad.2, bad.3).is_err(), "{bad:?}");
        }
    }
}
