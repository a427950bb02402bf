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
use crate::unit::{SparseEntries, UnitProfile};

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
    let (nb, n) = (unit.n_top, unit.n());
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

/// Inputs whose values the product sweep copies into one row-major tile at a time.
const PRODUCT_TILE: usize = 256;

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
            scatter(&mut raw, nu, &tile, rows, start..end, &rows.value);
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
#[inline(always)]
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
    let t = set.len();
    let (mut raw, mut rank_cov) = (vec![0.0; t], vec![0.0; t]);
    for (e, &i) in sp.rows.iter().enumerate() {
        let entries = rows.ptr[i as usize]..rows.ptr[i as usize + 1];
        if needs.products {
            let a = sp.values[e];
            for j in entries.clone() {
                raw[rows.concept[j] as usize] += a * rows.value[j];
            }
        }
        if needs.rank_products {
            let w = sp.centred_rank[e] - sp.zero_centred_rank;
            for j in entries {
                rank_cov[rows.concept[j] as usize] += w * rows.rank_above_zero[j];
            }
        }
    }
    set.columns
        .iter()
        .enumerate()
        .map(|(c, col)| {
            let rc = rank_cov[c] + sp.zero_centred_rank * col.rank_above_zero_sum;
            Products::from_centred(raw[c] - unit.mean * col.sum, rc, unit, col)
        })
        .collect()
}

/// [`inverse`] of a sparse unit: label sums over its entries plus the zero group's closed
/// form, and the AP walk over its entries with the zero group as one tie group in between.
pub fn inverse_sparse(
    unit: &UnitProfile,
    sp: &SparseEntries,
    set: &ConceptSet,
    labels: &LabelIndex,
    needs: &Needs,
) -> Vec<InverseSums> {
    let t = set.len();
    let n = unit.n();
    let mid = (n as f64 + 1.0) / 2.0;
    let mut out = vec![InverseSums::default(); t];
    // positives among the entries, per concept
    let mut in_entries = vec![0u32; t];
    for (e, &i) in sp.rows.iter().enumerate() {
        let list = &labels.concept[labels.ptr[i as usize]..labels.ptr[i as usize + 1]];
        let a = sp.values[e];
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
        let mut state = vec![ApState::default(); t];
        let nnz = sp.rows.len();
        let mut start = 0;
        // The zero group comes after the positive entries (and is skipped when empty).
        let mut zeros_done = sp.n_zero == 0;
        while start < nnz || !zeros_done {
            if !zeros_done && start == sp.n_above {
                let weight = group_weight(sp.zero_at_least as usize);
                for ((st, col), &k) in state.iter_mut().zip(&set.columns).zip(&in_entries) {
                    let cnt = col.n_positive() as u32 - k;
                    if cnt > 0 {
                        st.tp += cnt;
                        st.ap += cnt as f64 * st.tp as f64 * weight;
                    }
                }
                zeros_done = true;
                continue;
            }
            let end_entry = {
                let mut end = start + 1;
                let v = sp.values[sp.order[start] as usize];
                while end < nnz && sp.values[sp.order[end] as usize] == v {
                    end += 1;
                }
                end
            };
            let group = &sp.order[start..end_entry];
            let weight = group_weight(sp.at_least[group[0] as usize] as usize);
            for &e in group {
                let i = sp.rows[e as usize] as usize;
                for &c in &labels.concept[labels.ptr[i]..labels.ptr[i + 1]] {
                    let s = &mut state[c as usize];
                    s.tp += 1;
                    s.in_group += 1;
                }
            }
            for &e in group {
                let i = sp.rows[e as usize] as usize;
                for &c in &labels.concept[labels.ptr[i]..labels.ptr[i + 1]] {
                    let s = &mut state[c as usize];
                    if s.in_group > 0 {
                        s.ap += s.in_group as f64 * s.tp as f64 * weight;
                        s.in_group = 0;
                    }
                }
            }
            start = end_entry;
        }
        for (c, o) in out.iter_mut().enumerate() {
            o.ap = finish_ap(state[c].ap, set.columns[c].n_positive());
        }
    }
    out
}
