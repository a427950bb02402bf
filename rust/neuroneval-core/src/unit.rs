//! Per-unit transforms: computed once per unit, shared by all of its concepts and metrics.

use crate::metric::{top_count, Needs, Params};
use crate::ranks::{lane_sum, rank, rank_into, robust_norm_slice, Ranking, SortScratch};
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
        let mut p = UnitProfile::default();
        p.rebuild(a, unit, needs, params, &mut SortScratch::default());
        p
    }

    /// [`UnitProfile::build`] into this profile, reusing its vectors and the sort's buffers,
    /// so a thread that transforms many units faults in its memory once.
    pub fn rebuild(
        &mut self,
        a: &[f64],
        unit: usize,
        needs: &Needs,
        params: &Params,
        scratch: &mut SortScratch,
    ) {
        let n = a.len();
        self.n = n;
        let constant = a.iter().all(|&v| v == a[0]);
        self.mean = if constant {
            a[0]
        } else {
            lane_sum(a) / n as f64
        };
        self.centred.clear();
        if constant {
            self.centred.resize(n, 0.0);
        } else {
            let mean = self.mean;
            self.centred.extend(a.iter().map(|v| v - mean));
        }
        self.centred_sum = lane_sum(&self.centred);
        self.centred_norm = robust_norm_slice(&self.centred);
        self.norm = robust_norm_slice(a);

        let mut ranking = Ranking {
            order: std::mem::take(&mut self.order),
            midrank: std::mem::take(&mut self.centred_rank),
            at_least: std::mem::take(&mut self.at_least),
        };
        if needs.order {
            rank_into(a, &mut ranking, scratch);
            // centred by (N + 1) / 2, the mean rank
            let mid = (n as f64 + 1.0) / 2.0;
            ranking.midrank.iter_mut().for_each(|m| *m -= mid);
            self.centred_rank_norm = robust_norm_slice(&ranking.midrank);
        } else {
            ranking.order.clear();
            ranking.midrank.clear();
            ranking.at_least.clear();
            self.centred_rank_norm = 0.0;
        }
        (self.order, self.centred_rank, self.at_least) =
            (ranking.order, ranking.midrank, ranking.at_least);

        self.top.clear();
        self.in_top.clear();
        if needs.top_set {
            top_alpha_set_into(
                a,
                params.alpha,
                (!self.order.is_empty()).then_some(&self.order[..]),
                &mut self.top,
            );
            self.in_top.resize(n, false);
            for &i in &self.top {
                self.in_top[i as usize] = true;
            }
        }
        self.subset.clear();
        self.subset_a.clear();
        self.subset_rank.clear();
        if needs.top_random {
            self.subset = top_random_subset(&self.order, unit, params);
            self.subset_a = self.subset.iter().map(|&i| a[i as usize]).collect();
            self.subset_rank = rank(&self.subset_a).midrank;
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
    let cut = match order {
        Some(order) => a[order[n_top - 1] as usize],
        None => {
            let mut scratch = a.to_vec();
            let (_, cut, _) = scratch.select_nth_unstable_by(n_top - 1, |x, y| y.total_cmp(x));
            *cut
        }
    };
    // One pass in input order: the set comes out ascending, whatever found the cut.
    top.extend((0..a.len() as u32).filter(|&i| a[i as usize] >= cut));
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
