//! Sorting, midranks and the two rank statistics (ROC AUC, average precision) on single vectors.

/// A u64 whose unsigned order is the numeric order of a finite f64 (with -0.0 == 0.0).
#[inline(always)]
fn order_key(v: f64) -> u64 {
    let v = if v == 0.0 { 0.0 } else { v };
    let bits = v.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// A power of two near `max_abs`, so that dividing by it is exact and squares stay in range.
#[inline]
fn norm_scale(max_abs: f64) -> f64 {
    2f64.powi(max_abs.log2().floor() as i32)
}

/// The Euclidean norm of `values` plus `extra_count` copies of `extra`, without overflow or
/// underflow of the squares: the terms are scaled by a power of two near their largest
/// magnitude (exact).
pub fn robust_norm(
    values: impl Iterator<Item = f64> + Clone,
    extra: f64,
    extra_count: usize,
) -> f64 {
    let mut max = values.clone().fold(0.0f64, |m, v| m.max(v.abs()));
    if extra_count > 0 {
        max = max.max(extra.abs());
    }
    scaled_norm(max, |inv| {
        let e = extra * inv;
        values.map(|v| (v * inv) * (v * inv)).sum::<f64>() + extra_count as f64 * e * e
    })
}

/// [`robust_norm`] of a long slice, with the sums in eight lanes (vectorised).
pub fn robust_norm_slice(values: &[f64]) -> f64 {
    let max = lanes(values, 0.0, |acc, v| acc.max(v.abs()), f64::max);
    scaled_norm(max, |inv| {
        lanes(
            values,
            0.0,
            |acc, v| acc + (v * inv) * (v * inv),
            |a, b| a + b,
        )
    })
}

/// sqrt(sum of (x / scale)^2) * scale for the power-of-two scale of `max_abs`; the closure
/// gets 1 / scale and returns the sum.
#[inline(always)]
fn scaled_norm(max_abs: f64, scaled_square_sum: impl FnOnce(f64) -> f64) -> f64 {
    if max_abs == 0.0 || !max_abs.is_finite() {
        return max_abs;
    }
    let scale = norm_scale(max_abs);
    scaled_square_sum(1.0 / scale).sqrt() * scale
}

/// The sum of a long slice in eight lanes: a fixed order, independent of threads.
pub fn lane_sum(values: &[f64]) -> f64 {
    lanes(values, 0.0, |acc, v| acc + v, |a, b| a + b)
}

/// Folds `values` into eight interleaved accumulators, then combines them pairwise.
#[inline(always)]
fn lanes(
    values: &[f64],
    init: f64,
    step: impl Fn(f64, f64) -> f64,
    combine: impl Fn(f64, f64) -> f64,
) -> f64 {
    let mut acc = [init; 8];
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            acc[j] = step(acc[j], c[j]);
        }
    }
    for (j, &v) in chunks.remainder().iter().enumerate() {
        acc[j] = step(acc[j], v);
    }
    let q = [
        combine(acc[0], acc[4]),
        combine(acc[1], acc[5]),
        combine(acc[2], acc[6]),
        combine(acc[3], acc[7]),
    ];
    combine(combine(q[0], q[2]), combine(q[1], q[3]))
}

/// Indices sorted by value descending, ties by index ascending (so the order is unique).
///
/// An LSD radix sort on 11-bit digits of an order key: stable, so ties keep index order.
/// Values that are all exact float32 (activations usually are) sort by a 32-bit key packed
/// with the index into one u64, halving the data moved; digits on which every key agrees
/// are skipped.
pub fn sort_descending(values: &[f64]) -> Vec<u32> {
    let mut order = Vec::new();
    sort_descending_into(values, &mut order, &mut SortScratch::default());
    order
}

/// Buffers a sort reuses from one call to the next: at N = 10^6 a fresh set costs more in
/// page faults than the sort itself.
#[derive(Debug, Default)]
pub struct SortScratch {
    packed: Vec<u64>,
    keyed: Vec<(u64, u32)>,
    packed_next: Vec<u64>,
    keyed_next: Vec<(u64, u32)>,
    /// Which buffer holds the last sort's keys, in sorted order.
    sorted: SortedKeys,
}

/// Where the last [`sort_descending_into`] left its sorted keys.
#[derive(Debug, Default, Clone, Copy)]
enum SortedKeys {
    /// A short vector, sorted by comparisons: no key buffer.
    #[default]
    None,
    /// `packed`: a 32-bit key in the high half of each item.
    Packed,
    /// `keyed`: a 64-bit key in each item.
    Keyed,
}

/// [`sort_descending`] into `order`, with reused buffers.
pub fn sort_descending_into(values: &[f64], order: &mut Vec<u32>, scratch: &mut SortScratch) {
    let n = values.len();
    order.clear();
    scratch.sorted = SortedKeys::None;
    if n < 64 {
        order.extend(0..n as u32);
        order.sort_by_key(|&i| (!order_key(values[i as usize]), i));
        return;
    }
    if values.iter().all(|&v| (v as f32) as f64 == v) {
        scratch.sorted = SortedKeys::Packed;
        // key in the high 32 bits, index in the low 32: sorting by the high bytes only
        let packed = &mut scratch.packed;
        packed.clear();
        packed.extend(
            values
                .iter()
                .enumerate()
                .map(|(i, &v)| ((!order_key_f32(v as f32) as u64) << 32) | i as u64),
        );
        radix_sort_bits(packed, &mut scratch.packed_next, 32..64, |x| x);
        order.extend(packed.iter().map(|&x| x as u32));
        return;
    }
    scratch.sorted = SortedKeys::Keyed;
    let keyed = &mut scratch.keyed;
    keyed.clear();
    keyed.extend(
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| (!order_key(v), i as u32)),
    );
    radix_sort_bits(keyed, &mut scratch.keyed_next, 0..64, |x| x.0);
    order.extend(keyed.iter().map(|&(_, i)| i));
}

/// The f32 analogue of [`order_key`].
#[inline(always)]
fn order_key_f32(v: f32) -> u32 {
    let v = if v == 0.0 { 0.0 } else { v };
    let bits = v.to_bits();
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | (1 << 31)
    }
}

/// Stable LSD radix sort of `items` by bits `bits` of `key(item)`, ascending, in digits of
/// 11 bits (three passes cover 32 bits); digits on which every key agrees are skipped.
fn radix_sort_bits<T: Copy + Default>(
    items: &mut Vec<T>,
    next: &mut Vec<T>,
    bits: std::ops::Range<u32>,
    key: impl Fn(T) -> u64,
) {
    const DIGIT: u32 = 11;
    const BUCKETS: usize = 1 << DIGIT;
    let n = items.len();
    let shifts: Vec<u32> = (bits.start..bits.end).step_by(DIGIT as usize).collect();
    let mut counts = vec![[0u32; BUCKETS]; shifts.len()];
    for &item in items.iter() {
        let k = key(item);
        for (c, &s) in counts.iter_mut().zip(&shifts) {
            c[((k >> s) as usize) & (BUCKETS - 1)] += 1;
        }
    }
    next.clear();
    next.resize(n, T::default());
    for (c, &s) in counts.iter().zip(&shifts) {
        if c.iter().any(|&x| x as usize == n) {
            continue; // every key has the same digit here
        }
        let mut offsets = [0u32; BUCKETS];
        let mut total = 0;
        for (o, &x) in offsets.iter_mut().zip(c.iter()) {
            *o = total;
            total += x;
        }
        for &item in items.iter() {
            let b = ((key(item) >> s) as usize) & (BUCKETS - 1);
            next[offsets[b] as usize] = item;
            offsets[b] += 1;
        }
        std::mem::swap(items, next);
    }
}

/// A vector's ranking: its descending order (ties by index), each element's ascending
/// midrank (1 = smallest, ties averaged) and the number of elements >= it (the end of its
/// tie group in the order, i.e. the prediction set size at its threshold).
#[derive(Debug, Default)]
pub struct Ranking {
    pub order: Vec<u32>,
    pub midrank: Vec<f64>,
    pub at_least: Vec<u32>,
    /// `at_least` of each position of `order` (read in order by walks down the ranking).
    pub group_end: Vec<u32>,
}

/// One sort, then one walk over the tie groups.
pub fn rank(values: &[f64]) -> Ranking {
    let mut r = Ranking::default();
    rank_into(values, &mut r, &mut SortScratch::default());
    r
}

/// [`rank`] into `r`, reusing its vectors and the sort's buffers.
pub fn rank_into(values: &[f64], r: &mut Ranking, scratch: &mut SortScratch) {
    rank_into_with(values, r, scratch, true);
}

/// [`rank_into`], leaving `r.at_least` empty unless `with_at_least` (callers that walk the
/// order read `group_end` instead and save a scattered write per value).
pub fn rank_into_with(
    values: &[f64],
    r: &mut Ranking,
    scratch: &mut SortScratch,
    with_at_least: bool,
) {
    sort_descending_into(values, &mut r.order, scratch);
    // Tie groups from the sorted keys, read in order (equal keys: equal values), rather
    // than from the values read at random through the order.
    match scratch.sorted {
        SortedKeys::Packed => {
            let packed = &scratch.packed;
            assign_ranks(r, with_at_least, |q| packed[q] >> 32);
        }
        SortedKeys::Keyed => {
            let keyed = &scratch.keyed;
            assign_ranks(r, with_at_least, |q| keyed[q].0);
        }
        SortedKeys::None => {
            let order = r.order.clone();
            assign_ranks(r, with_at_least, |q| order_key(values[order[q] as usize]));
        }
    }
}

/// Midranks, group sizes and group ends of the ranking whose order is `r.order` and whose
/// key at position q is `key(q)`.
#[inline(always)]
fn assign_ranks(r: &mut Ranking, with_at_least: bool, key: impl Fn(usize) -> u64) {
    let n = r.order.len();
    let (order, midrank, at_least) = (&r.order, &mut r.midrank, &mut r.at_least);
    midrank.clear();
    midrank.resize(n, 0.0);
    at_least.clear();
    if with_at_least {
        at_least.resize(n, 0);
    }
    r.group_end.clear();
    let mut start = 0;
    while start < n {
        let k = key(start);
        let mut end = start + 1;
        while end < n && key(end) == k {
            end += 1;
        }
        // descending positions start+1..=end average (start + 1 + end) / 2
        let mid = (n + 1) as f64 - (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            midrank[i as usize] = mid;
        }
        if with_at_least {
            for &i in &order[start..end] {
                at_least[i as usize] = end as u32;
            }
        }
        r.group_end
            .extend(std::iter::repeat_n(end as u32, end - start));
        start = end;
    }
}

/// Mann-Whitney ROC AUC with midranks; NaN when all labels agree.
pub fn roc_auc(labels: &[bool], scores: &[f64]) -> f64 {
    let r = rank(scores);
    let (mut n_pos, mut rank_sum) = (0usize, 0.0);
    for (&label, &m) in labels.iter().zip(&r.midrank) {
        if label {
            n_pos += 1;
            rank_sum += m;
        }
    }
    auc_from_rank_sum(rank_sum, n_pos, scores.len())
}

/// AUC from the sum of the positives' ascending midranks.
#[inline]
pub fn auc_from_rank_sum(rank_sum: f64, n_pos: usize, n: usize) -> f64 {
    let p = n_pos as f64;
    let q = (n - n_pos) as f64;
    (rank_sum - p * (p + 1.0) / 2.0) / (p * q)
}

/// Average precision over distinct score thresholds; NaN without a positive label.
pub fn average_precision(labels: &[bool], scores: &[f64]) -> f64 {
    let r = rank(scores);
    let mut at_least: Vec<u32> = labels
        .iter()
        .zip(&r.at_least)
        .filter(|(&label, _)| label)
        .map(|(_, &g)| g)
        .collect();
    let n_pos = at_least.len();
    ap_from_group_sizes(&mut at_least, n_pos)
}

/// Average precision from, for each positive, the size of the prediction set at its
/// threshold (#{j : score_j >= score_i}); NaN without positives. Sorts `at_least` in place.
pub fn ap_from_group_sizes(at_least: &mut [u32], n_pos: usize) -> f64 {
    ap_with_tail(at_least, n_pos, 0, 0)
}

/// 1 / (prediction set size) of a threshold. Every AP sum multiplies by it, so that the
/// pair kernel and the sweeps (which compute it once per tie group) agree bit for bit.
#[inline(always)]
pub fn group_weight(at_least: usize) -> f64 {
    1.0 / at_least as f64
}

/// As [`ap_from_group_sizes`], with `tail_count` more positives at threshold size `tail_at`,
/// which must be at least every value in `at_least`.
pub fn ap_with_tail(at_least: &mut [u32], n_pos: usize, tail_count: usize, tail_at: usize) -> f64 {
    at_least.sort_unstable();
    let mut ap = 0.0;
    let mut tp = 0usize;
    let mut j = 0;
    while j < at_least.len() {
        let g = at_least[j];
        let mut cnt = 0;
        while j < at_least.len() && at_least[j] == g {
            cnt += 1;
            j += 1;
        }
        tp += cnt;
        ap += cnt as f64 * tp as f64 * group_weight(g as usize);
    }
    if tail_count > 0 {
        tp += tail_count;
        ap += tail_count as f64 * tp as f64 * group_weight(tail_at);
    }
    finish_ap(ap, n_pos)
}

/// AP from the sum over thresholds: divided by the positives, NaN without any.
#[inline]
pub fn finish_ap(sum: f64, n_pos: usize) -> f64 {
    if n_pos == 0 {
        f64::NAN
    } else {
        // Each term cnt * TP / end rounds on its own, so a sum that is exactly n_pos in
        // exact arithmetic (every prediction set pure) can land an ulp above it.
        (sum / n_pos as f64).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midranks_average_ties() {
        let v = [3.0, 1.0, 3.0, 2.0];
        let r = rank(&v);
        assert_eq!(r.order, vec![0, 2, 3, 1]);
        assert_eq!(r.midrank, vec![3.5, 1.0, 3.5, 2.0]);
        assert_eq!(r.at_least, vec![2, 4, 2, 3]);
    }

    #[test]
    fn radix_sort_matches_a_comparison_sort() {
        let mut state = 12345u64;
        let mut values: Vec<f64> = (0..5000)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (state >> 33) as f64 / (1u64 << 31) as f64;
                // heavy ties, negatives, zeros of both signs, float32-rounded values
                match state % 5 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => (r * 10.0).floor() - 5.0,
                    3 => (r as f32) as f64,
                    _ => -r * 1e300,
                }
            })
            .collect();
        let check = |values: &[f64]| {
            let got = sort_descending(values);
            let mut want: Vec<u32> = (0..values.len() as u32).collect();
            want.sort_by(|&a, &b| {
                values[b as usize]
                    .partial_cmp(&values[a as usize])
                    .unwrap()
                    .then(a.cmp(&b))
            });
            assert_eq!(got, want);
        };
        // all exact float32: the packed 32-bit path
        let as_f32: Vec<f64> = values
            .iter()
            .map(|&v| (v as f32) as f64)
            .map(|v| if v.is_finite() { v } else { 0.0 })
            .collect();
        assert!(as_f32.iter().all(|&v| (v as f32) as f64 == v));
        check(&as_f32);
        // not float32: the 64-bit path
        values.push(f64::MAX);
        values.push(f64::MIN);
        values.push(0.1);
        check(&values);
    }

    #[test]
    fn negative_zero_ties_with_zero() {
        let r = rank(&[0.0, -0.0, 1.0]);
        assert_eq!(r.midrank, vec![1.5, 1.5, 3.0]);
    }

    #[test]
    fn auc_counts_tied_pairs_half() {
        // one positive tied with one negative, one negative below: (0.5 + 1) / 2
        let auc = roc_auc(&[true, false, false], &[1.0, 1.0, 0.0]);
        assert!((auc - 0.75).abs() < 1e-15);
    }

    #[test]
    fn ap_with_a_tied_threshold() {
        // scores 0.9 (pos), 0.5 (pos), 0.5 (neg): thresholds {0.9}: P=1, R=.5; {0.5}: P=2/3, R=1
        let ap = average_precision(&[true, true, false], &[0.9, 0.5, 0.5]);
        assert!((ap - (0.5 + 0.5 * 2.0 / 3.0)).abs() < 1e-15);
    }
}
