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
use crate::unit::UnitProfile;

/// Forward sums over the unit's top set, for every concept.
pub fn forward(
    unit: &UnitProfile,
    set: &ConceptSet,
    rows: &RowIndex,
    needs: &Needs,
) -> Vec<ForwardSums> {
    let mut acc = vec![ForwardAccumulator::default(); set.len()];
    let ranked = !rows.rank.is_empty();
    for &i in &unit.top {
        for j in rows.ptr[i as usize]..rows.ptr[i as usize + 1] {
            let (rank, at_least) = if ranked {
                (rows.rank[j], rows.at_least[j])
            } else {
                (0.0, 0)
            };
            acc[rows.concept[j] as usize].add(rows.value[j], rank, at_least, needs);
        }
    }
    let (nb, n) = (unit.top.len(), unit.n());
    acc.iter_mut()
        .zip(&set.columns)
        .map(|(a, col)| a.finish(nb, n, col, needs))
        .collect()
}

/// Inverse sums over every concept's positive labels.
pub fn inverse(
    unit: &UnitProfile,
    set: &ConceptSet,
    labels: &LabelIndex,
    needs: &Needs,
) -> Vec<InverseSums> {
    let t = set.len();
    let n = unit.n();
    let mid = (n as f64 + 1.0) / 2.0;
    // Both sums of a concept side by side: each label touches one cache line.
    let mut out = vec![InverseSums::default(); t];
    for i in (0..n).filter(|_| needs.inverse_sums) {
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
        // Walk tie groups in descending activation: count each concept's positives in the
        // group, then add cnt * TP / (group end) once per concept, as ap_with_tail does.
        // One 16-byte state per concept: each label touches one cache line.
        let mut state = vec![ApState::default(); t];
        let mut start = 0;
        while start < n {
            // Label lists are read in activation order, i.e. at random: fetch ahead.
            // Two stages: the list's offset further ahead, then the list itself.
            if let Some(&far) = unit.order.get(start + 2 * PREFETCH_DISTANCE) {
                prefetch(labels.ptr.as_ptr().wrapping_add(far as usize));
                prefetch(unit.at_least.as_ptr().wrapping_add(far as usize));
            }
            if let Some(&ahead) = unit.order.get(start + PREFETCH_DISTANCE) {
                prefetch(
                    labels
                        .concept
                        .as_ptr()
                        .wrapping_add(labels.ptr[ahead as usize]),
                );
            }
            let end = unit.at_least[unit.order[start] as usize] as usize;
            let group = &unit.order[start..end];
            let weight = group_weight(end);
            if group.len() == 1 {
                // The common case: cnt = 1, so one pass adds 1 * TP / end per concept.
                let i = group[0] as usize;
                for &c in &labels.concept[labels.ptr[i]..labels.ptr[i + 1]] {
                    let s = &mut state[c as usize];
                    s.tp += 1;
                    s.ap += 1.0 * s.tp as f64 * weight;
                }
                start = end;
                continue;
            }
            for &i in group {
                for &c in &labels.concept[labels.ptr[i as usize]..labels.ptr[i as usize + 1]] {
                    let s = &mut state[c as usize];
                    s.tp += 1;
                    s.in_group += 1;
                }
            }
            for &i in group {
                for &c in &labels.concept[labels.ptr[i as usize]..labels.ptr[i as usize + 1]] {
                    let s = &mut state[c as usize];
                    if s.in_group > 0 {
                        s.ap += s.in_group as f64 * s.tp as f64 * weight;
                        s.in_group = 0;
                    }
                }
            }
            start = end;
        }
        for (c, o) in out.iter_mut().enumerate() {
            o.ap = finish_ap(state[c].ap, set.columns[c].n_positive());
        }
    }
    out
}

/// A concept's running sums in the AP walk.
#[derive(Clone, Copy, Default)]
struct ApState {
    ap: f64,
    tp: u32,
    in_group: u32,
}

/// How many inputs ahead the AP walk prefetches label lists.
const PREFETCH_DISTANCE: usize = 16;

/// A hint to load the cache line at `p`; never faults, whatever the address.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: _mm_prefetch only hints the cache; it does not dereference for the program
    // and cannot fault, even for an invalid address. SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Units whose products one pass over the concept rows accumulates together.
pub const PRODUCT_UNITS: usize = 4;

/// Products over all inputs of up to [`PRODUCT_UNITS`] units with every concept, from the
/// concepts' nonzero entries: one read of each entry serves all the units. Returns
/// `out[u][c]`. Each sum still adds its terms in ascending input order.
pub fn products(
    units: &[UnitProfile],
    set: &ConceptSet,
    rows: &RowIndex,
    needs: &Needs,
) -> Vec<Vec<Products>> {
    assert!(units.len() <= PRODUCT_UNITS);
    let t = set.len();
    let nu = units.len();
    // Per unit one dense array per sum, side by side: raw[u * t + c].
    let (mut raw, mut rank_cov) = (vec![0.0; nu * t], vec![0.0; nu * t]);
    let n = units.first().map_or(0, |u| u.n());
    let mut w = [0.0; PRODUCT_UNITS];
    for i in 0..n {
        let (s, e) = (rows.ptr[i], rows.ptr[i + 1]);
        if s == e {
            continue;
        }
        let concepts = &rows.concept[s..e];
        if needs.products {
            for (wu, u) in w.iter_mut().zip(units) {
                *wu = u.centred[i];
            }
            scatter(&mut raw, t, &w[..nu], concepts, &rows.value[s..e]);
        }
        if needs.rank_products {
            for (wu, u) in w.iter_mut().zip(units) {
                *wu = u.centred_rank[i];
            }
            scatter(
                &mut rank_cov,
                t,
                &w[..nu],
                concepts,
                &rows.rank_above_zero[s..e],
            );
        }
    }
    units
        .iter()
        .enumerate()
        .map(|(u, unit)| {
            set.columns
                .iter()
                .enumerate()
                .map(|(c, col)| {
                    Products::from_centred(raw[u * t + c], rank_cov[u * t + c], unit, col)
                })
                .collect()
        })
        .collect()
}

/// acc[u * t + c] += w[u] * x for each entry (c, x) and unit u.
#[inline(always)]
fn scatter(acc: &mut [f64], t: usize, w: &[f64], concepts: &[u32], x: &[f64]) {
    for (&c, &x) in concepts.iter().zip(x) {
        for (u, &wu) in w.iter().enumerate() {
            acc[u * t + c as usize] += wu * x;
        }
    }
}
