//! Per-unit transforms: computed once per unit, shared by all of its concepts and metrics.

use crate::metric::{top_count, Needs, Params};
use crate::ranks::{lane_sum, rank, robust_norm_slice};
use crate::rng::SplitMix64;

/// What the pair kernels read about one unit a_k.
#[derive(Debug, Default)]
pub struct UnitProfile {
    /// N, the number of inputs.
    pub n: usize,
    pub mean: f64,
    /// a - mean; exactly 0 for a constant unit.
    pub centred: Vec<f64>,
    /// sum of `centred` (0 up to rounding; kept so products stay exact).
    pub centred_sum: f64,
    /// ||a - mean|| and ||a||.
    pub centred_norm: f64,
    pub norm: f64,
    /// Ascending midranks minus (N+1)/2 (present when `Needs::order`).
    pub centred_rank: Vec<f64>,
    pub centred_rank_norm: f64,
    /// #{j : a_j >= a_i} (present when `Needs::order`).
    pub at_least: Vec<u32>,
    /// Descending order, ties by index (present when `Needs::order`).
    pub order: Vec<u32>,
    /// The top-alpha set b: members, and membership by input.
    pub top: Vec<u32>,
    pub in_top: Vec<bool>,
    /// The top-random subset (with duplicates), its activations and their midranks.
    pub subset: Vec<u32>,
    pub subset_a: Vec<f64>,
    pub subset_rank: Vec<f64>,
}

impl UnitProfile {
    /// Transforms unit `unit` (its activations `a`, already validated finite).
    pub fn build(a: &[f64], unit: usize, needs: &Needs, params: &Params) -> UnitProfile {
        let n = a.len();
        let mut p = UnitProfile {
            n,
            ..UnitProfile::default()
        };
        let constant = a.iter().all(|&v| v == a[0]);
        p.mean = if constant {
            a[0]
        } else {
            lane_sum(a) / n as f64
        };
        p.centred = if constant {
            vec![0.0; n]
        } else {
            a.iter().map(|v| v - p.mean).collect()
        };
        p.centred_sum = lane_sum(&p.centred);
        p.centred_norm = robust_norm_slice(&p.centred);
        p.norm = robust_norm_slice(a);

        if needs.order {
            let r = rank(a);
            // centred by (N + 1) / 2, the mean rank
            let mid = (n as f64 + 1.0) / 2.0;
            p.centred_rank = r.midrank;
            p.centred_rank.iter_mut().for_each(|m| *m -= mid);
            p.order = r.order;
            p.at_least = r.at_least;
            p.centred_rank_norm = robust_norm_slice(&p.centred_rank);
        }
        if needs.top_set {
            p.top = top_alpha_set(
                a,
                params.alpha,
                (!p.order.is_empty()).then_some(&p.order[..]),
            );
            p.in_top = vec![false; n];
            for &i in &p.top {
                p.in_top[i as usize] = true;
            }
        }
        if needs.top_random {
            p.subset = top_random_subset(&p.order, unit, params);
            p.subset_a = p.subset.iter().map(|&i| a[i as usize]).collect();
            p.subset_rank = rank(&p.subset_a).midrank;
        }
        p
    }

    pub fn n(&self) -> usize {
        self.n
    }
}

/// The top-alpha set {i : a_i >= cut}, cut the ceil(alpha N)-th largest value; ties at the
/// cut are all included (SPEC section 2). Ascending inputs, so that every sum over the set
/// runs in one order. Uses the full order when one is at hand.
pub fn top_alpha_set(a: &[f64], alpha: f64, order: Option<&[u32]>) -> Vec<u32> {
    let n_top = top_count(alpha, a.len());
    let cut = match order {
        Some(order) => a[order[n_top - 1] as usize],
        None => {
            let mut scratch = a.to_vec();
            let (_, cut, _) = scratch.select_nth_unstable_by(n_top - 1, |x, y| y.total_cmp(x));
            *cut
        }
    };
    // One pass in input order: the set comes out ascending, whatever found the cut.
    (0..a.len() as u32)
        .filter(|&i| a[i as usize] >= cut)
        .collect()
}

/// k inputs drawn without replacement from the unit's top ceil(alpha N) (by the unique
/// descending order), plus k drawn without replacement from all N; duplicates kept.
/// Each unit seeds its own stream, so results do not depend on the thread count.
pub fn top_random_subset(order: &[u32], unit: usize, params: &Params) -> Vec<u32> {
    let n = order.len();
    let pool = top_count(params.top_random_alpha, n);
    let mut rng = SplitMix64::for_stream(params.seed, unit as u64);
    let mut subset: Vec<u32> = rng
        .sample_without_replacement(pool, params.top_random_k.min(pool))
        .into_iter()
        .map(|j| order[j])
        .collect();
    subset.extend(
        rng.sample_without_replacement(n, params.top_random_k.min(n))
            .into_iter()
            .map(|j| j as u32),
    );
    subset
}
