//! Sorting, midranks and the two rank statistics (ROC AUC, average precision) on single vectors.

/// A key that decreases as the finite f64 `v` increases, equal for 0 and -0: 2^63 minus
/// the value in sign-magnitude form. Unlike a bitwise complement it keeps the magnitude's
/// trailing zero bits, which values of lower precision all share (float32, float16 or
/// bfloat16 values widened), so a radix sort can skip them whatever the signs.
#[inline(always)]
fn descending_key(v: f64) -> u64 {
    let bits = v.to_bits();
    let magnitude = bits & !(1 << 63); // at most that of infinity: no overflow below
    if bits >> 63 == 1 {
        (1 << 63) + magnitude
    } else {
        (1 << 63) - magnitude
    }
}

/// [`descending_key`] for a float32.
#[inline(always)]
fn descending_key_f32(v: f32) -> u32 {
    let bits = v.to_bits();
    let magnitude = bits & !(1 << 31);
    if bits >> 31 == 1 {
        (1 << 31) + magnitude
    } else {
        (1 << 31) - magnitude
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

crate::simd::widest! {
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

crate::simd::widest! {
/// The sum of a long slice in eight lanes: a fixed order, independent of threads.
pub fn lane_sum(values: &[f64]) -> f64 {
    lanes(values, 0.0, |acc, v| acc + v, |a, b| a + b)
}
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
/// An LSD radix sort of an order key ([`radix_sort`]): stable, so ties keep index order.
/// Values that are all exact float32 (activations usually are) sort by a 32-bit key packed
/// with the index into one u64, halving the data moved; only the key bits that vary are
/// sorted, so float16 values take two passes and float32 values four.
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
        order.sort_by_key(|&i| (descending_key(values[i as usize]), i));
        return;
    }
    // Key in the high 32 bits, index in the low 32: half the data moved. Whether every value
    // is an exact float32 is checked while packing (folds without early exit, so that the
    // loop vectorises; NaN never reaches a sort): one read of the values in the usual case.
    let packed = &mut scratch.packed;
    resize_for_overwrite(packed, n);
    let (varying, exact) = pack_f32_keys(values, packed);
    if exact {
        scratch.sorted = SortedKeys::Packed;
        sort_items(
            packed,
            &mut scratch.packed_next,
            varying as u64,
            |x| x >> 32,
            |x, k| (k << 32) | (x & 0xffff_ffff),
        );
        order.extend(scratch.packed.iter().map(|&x| x as u32));
    } else {
        scratch.sorted = SortedKeys::Keyed;
        let keyed = &mut scratch.keyed;
        keyed.clear();
        let first = descending_key(values[0]);
        let mut varying = 0;
        keyed.extend(values.iter().enumerate().map(|(i, &v)| {
            let k = descending_key(v);
            varying |= k ^ first;
            (k, i as u32)
        }));
        sort_items(
            keyed,
            &mut scratch.keyed_next,
            varying,
            |x| x.0,
            |x, k| (k, x.1),
        );
        order.extend(scratch.keyed.iter().map(|&(_, i)| i));
    }
}

crate::simd::widest! {
/// Writes each value's float32 [`descending_key_f32`] in the high half of `packed` (as long as
/// `values`) and its index in the low half; returns the key bits in which some key differs
/// from the first, and whether every value is an exact float32. The folds run in eight lanes
/// without early exit, so the loop vectorises.
fn pack_f32_keys(values: &[f64], packed: &mut [u64]) -> (u32, bool) {
    let first = descending_key_f32(values[0] as f32);
    let (mut varying, mut exact) = ([0u32; 8], [true; 8]);
    let mut pack = |lane: usize, v: f64, index: usize| {
        let k = descending_key_f32(v as f32);
        varying[lane] |= k ^ first;
        exact[lane] &= (v as f32) as f64 == v;
        ((k as u64) << 32) | index as u64
    };
    let whole = values.len() - values.len() % 8;
    for (c, (v, out)) in values[..whole]
        .chunks_exact(8)
        .zip(packed.chunks_exact_mut(8))
        .enumerate()
    {
        for lane in 0..8 {
            out[lane] = pack(lane, v[lane], c * 8 + lane);
        }
    }
    for (lane, (&v, out)) in values[whole..].iter().zip(&mut packed[whole..]).enumerate() {
        *out = pack(lane, v, whole + lane);
    }
    (
        varying.iter().fold(0, |a, &b| a | b),
        exact.iter().all(|&e| e),
    )
}
}

/// Sorts `items` by `key` (see [`radix_sort`]), where `varying` has the key bits in which
/// some item differs from another (noted while filling them).
fn sort_items<T: Copy + Default>(
    items: &mut Vec<T>,
    next: &mut Vec<T>,
    varying: u64,
    key: impl Fn(T) -> u64,
    set_key: impl Fn(T, u64) -> T,
) {
    if let Some(span) = drop_common_low_bits(items, varying, &key, set_key) {
        radix_sort(items, next, key, span);
    }
}

/// Shifts out the low bits on which all keys agree (`varying`: the bits in which some key
/// differs from another; `set_key` writes a key back), so that a radix sort's digits start at
/// bit 0 and its shifts are constants; equal keys stay equal and the order is kept. Returns
/// the number of bits left up to the highest one that varies, or None when all keys are
/// equal.
fn drop_common_low_bits<T: Copy>(
    items: &mut [T],
    varying: u64,
    key: impl Fn(T) -> u64,
    set_key: impl Fn(T, u64) -> T,
) -> Option<u32> {
    if varying == 0 {
        return None;
    }
    let low = varying.trailing_zeros();
    if low > 0 {
        for x in items.iter_mut() {
            *x = set_key(*x, key(*x) >> low);
        }
    }
    Some(64 - varying.leading_zeros() - low)
}

/// Stable LSD radix sort of `items` by `key(item)`, ascending, where the keys differ only in
/// their `span` lowest bits. Those take 8-bit digits (256 buckets: every bucket's write
/// position stays in L1), or, when at most 22 bits vary (float16 or bfloat16 values, small
/// integers), 11-bit digits: two passes instead of three. A digit on which every key agrees
/// is skipped. The counts come from one pass into two tables that take alternate items:
/// with few distinct digits (ties), consecutive items of one table would wait on each
/// other's counter updates.
fn radix_sort<T: Copy + Default>(
    items: &mut Vec<T>,
    next: &mut Vec<T>,
    key: impl Fn(T) -> u64,
    span: u32,
) {
    // Widths, bucket counts and digit counts are constants of each instance: constant
    // shifts, known bounds, unrolled digit loops, and 8-bit tables that stay in L1.
    match span {
        0..=11 => radix_passes::<T, 11, 2048, 1>(items, next, &key),
        12..=22 => radix_passes::<T, 11, 2048, 2>(items, next, &key),
        23..=24 => radix_passes::<T, 8, 256, 3>(items, next, &key),
        25..=32 => radix_passes::<T, 8, 256, 4>(items, next, &key),
        _ => radix_passes::<T, 8, 256, 8>(items, next, &key),
    }
}

/// The passes of [`radix_sort`]: `DIGITS` digits of `WIDTH` bits (`BUCKETS` = 2^WIDTH) from
/// bit 0 up (WIDTH * (DIGITS - 1) < 64).
fn radix_passes<
    T: Copy + Default,
    const WIDTH: usize,
    const BUCKETS: usize,
    const DIGITS: usize,
>(
    items: &mut Vec<T>,
    next: &mut Vec<T>,
    key: &impl Fn(T) -> u64,
) {
    debug_assert_eq!(BUCKETS, 1 << WIDTH);
    let n = items.len();
    let digit = |item: T, d: usize| ((key(item) >> (WIDTH * d)) as usize) & (BUCKETS - 1);
    // counts[table][d][b]
    let mut counts = [[[0u32; BUCKETS]; DIGITS]; 2];
    let [even, odd] = &mut counts;
    let mut pairs = items.chunks_exact(2);
    for pair in &mut pairs {
        for (d, (e, o)) in even.iter_mut().zip(odd.iter_mut()).enumerate() {
            e[digit(pair[0], d)] += 1;
            o[digit(pair[1], d)] += 1;
        }
    }
    for &item in pairs.remainder() {
        for (d, c) in even.iter_mut().enumerate() {
            c[digit(item, d)] += 1;
        }
    }
    resize_for_overwrite(next, n);
    let mut start = [0usize; BUCKETS];
    let [even, odd] = &counts;
    for (d, (even, odd)) in even.iter().zip(odd).enumerate() {
        let count = |b: usize| (even[b] + odd[b]) as usize;
        if (0..BUCKETS).any(|b| count(b) == n) {
            continue; // every key has the same digit here
        }
        let mut total = 0;
        for (b, s) in start.iter_mut().enumerate() {
            *s = total;
            total += count(b);
        }
        let dst = next.as_mut_ptr();
        for &item in items.iter() {
            let b = digit(item, d);
            // SAFETY: bucket b's items go to start[b].. in turn, count(b) of them, and the
            // buckets' ranges tile 0..n, the length of `next`: every write is in bounds and
            // none lands twice.
            unsafe { dst.add(start[b]).write(item) };
            start[b] += 1;
        }
        std::mem::swap(items, next);
    }
}

/// Gives `v` length `n` for a caller that writes every element before reading any: a vector
/// reused at the same length keeps its stale contents instead of being cleared (the sorts
/// and rankings of a block's units would otherwise zero megabytes each).
pub(crate) fn resize_for_overwrite<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, T::default());
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
    /// The sum over tie groups of t^3 - t (t the group's size): 0 without ties; with the
    /// length, it gives the midranks' spread in closed form ([`centred_rank_norm`]).
    pub tie_sum: u128,
}

/// A tie group's term of [`Ranking::tie_sum`]: t^3 - t for a group of t equal values.
#[inline]
pub fn tie_term(t: usize) -> u128 {
    let t = t as u128;
    t * t * t - t
}

/// sqrt(sum over i of (midrank_i - (n + 1) / 2)^2) for n values whose tie groups give
/// `tie_sum` (the sum of their [`tie_term`]s): the sum is (n^3 - n - tie_sum) / 12, an integer
/// count over 12, so the norm takes three roundings whatever n.
pub fn centred_rank_norm(n: usize, tie_sum: u128) -> f64 {
    let twelve_times_squares = tie_term(n) - tie_sum;
    (twelve_times_squares as f64 / 12.0).sqrt()
}

/// One sort, then one walk over the tie groups.
pub fn rank(values: &[f64]) -> Ranking {
    let mut r = Ranking::default();
    rank_into(values, &mut r, &mut SortScratch::default());
    r
}

/// [`rank`] into `r`, reusing its vectors and the sort's buffers.
pub fn rank_into(values: &[f64], r: &mut Ranking, scratch: &mut SortScratch) {
    rank_into_with(values, r, scratch, true, 0.0);
}

/// [`rank_into`], leaving `r.at_least` empty unless `with_at_least` (callers that walk the
/// order read `group_end` instead and save a scattered write per value), and with
/// `midrank_offset` subtracted from every midrank as it is written ((N + 1) / 2 centres
/// them; the midranks and that offset are half-integers, so the difference is exact).
pub fn rank_into_with(
    values: &[f64],
    r: &mut Ranking,
    scratch: &mut SortScratch,
    with_at_least: bool,
    midrank_offset: f64,
) {
    sort_descending_into(values, &mut r.order, scratch);
    // Tie groups from the sorted keys, read in order (equal keys: equal values), rather
    // than from the values read at random through the order.
    match scratch.sorted {
        SortedKeys::Packed => {
            let packed = &scratch.packed;
            assign_ranks(r, with_at_least, midrank_offset, |q| packed[q] >> 32);
        }
        SortedKeys::Keyed => {
            let keyed = &scratch.keyed;
            assign_ranks(r, with_at_least, midrank_offset, |q| keyed[q].0);
        }
        SortedKeys::None => {
            let order = r.order.clone();
            assign_ranks(r, with_at_least, midrank_offset, |q| {
                descending_key(values[order[q] as usize])
            });
        }
    }
}

/// Midranks (less `midrank_offset`), group sizes, group ends and the tie sum of the ranking
/// whose order is `r.order` and whose key at position q is `key(q)`: the group ends by one
/// backward pass over the keys, then each position's midrank from its group's start and end
/// (one forward pass), written to its input.
#[inline(always)]
fn assign_ranks(
    r: &mut Ranking,
    with_at_least: bool,
    midrank_offset: f64,
    key: impl Fn(usize) -> u64,
) {
    let n = r.order.len();
    let (order, midrank, at_least, group_end) =
        (&r.order, &mut r.midrank, &mut r.at_least, &mut r.group_end);
    resize_for_overwrite(group_end, n);
    r.tie_sum = 0;
    if n == 0 {
        midrank.clear();
        at_least.clear();
        return;
    }
    // group_end[q]: one past the last position whose key equals key(q)
    group_end[n - 1] = n as u32;
    let mut next_key = key(n - 1);
    for q in (0..n - 1).rev() {
        let k = key(q);
        group_end[q] = if k == next_key {
            group_end[q + 1]
        } else {
            q as u32 + 1
        };
        next_key = k;
    }
    resize_for_overwrite(midrank, n);
    at_least.clear();
    if with_at_least {
        at_least.resize(n, 0);
    }
    // descending positions start+1..=end average (start + 1 + end) / 2
    let top = (n + 1) as f64 - midrank_offset;
    let mut start = 0u32;
    // each of a group's t positions adds t^2 - 1, so a group adds its `tie_term` (branch-free)
    let mut tie_sum = 0u128;
    for (q, (&i, &end)) in order.iter().zip(group_end.iter()).enumerate() {
        if q > 0 && group_end[q - 1] as usize == q {
            start = q as u32;
        }
        midrank[i as usize] = top - (start + 1 + end) as f64 / 2.0;
        let t = (end - start) as u64;
        tie_sum += (t * t - 1) as u128;
        if with_at_least {
            at_least[i as usize] = end;
        }
    }
    r.tie_sum = tie_sum;
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
        // both parities of n (the counts alternate between two tables), from the smallest
        // radix-sorted length up
        for n in [64, 65, 66, 127, 1001] {
            check(&as_f32[..n]);
            check(&values[..n]);
        }
        // float16 values of both signs (13 low mantissa bits zero in every key: the 11-bit
        // digits), and bfloat16 ones (16 zero bits), with zeros of both signs among them
        for keep_bits in [10, 7] {
            let low = (1u32 << (23 - keep_bits)) - 1;
            let rounded: Vec<f64> = as_f32
                .iter()
                .map(|&v| f32::from_bits((v as f32).to_bits() & !low) as f64)
                .collect();
            check(&rounded);
            check(&rounded[..65]);
        }
        // not float32: the 64-bit path
        values.push(f64::MAX);
        values.push(f64::MIN);
        values.push(0.1);
        check(&values);
    }

    /// The centred midranks and their closed-form norm against the midranks less (n + 1) / 2
    /// and a direct sum of squares, with no ties, heavy ties, one group, and both paths of
    /// the sort (comparisons under 64 values, radix above).
    #[test]
    fn centred_midranks_and_their_norm_in_closed_form() {
        let mut state = 99u64;
        let mut draw = |levels: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % levels) as f64 - (levels / 2) as f64
        };
        for (n, levels) in [
            (1, 1),
            (2, 2),
            (7, 3),
            (63, 1 << 30),
            (64, 4),
            (500, 2),
            (3000, 50),
        ] {
            let values: Vec<f64> = (0..n).map(|_| draw(levels)).collect();
            let plain = rank(&values);
            let mid = (n as f64 + 1.0) / 2.0;
            let mut centred = Ranking::default();
            rank_into_with(
                &values,
                &mut centred,
                &mut SortScratch::default(),
                false,
                mid,
            );
            let want: Vec<f64> = plain.midrank.iter().map(|m| m - mid).collect();
            assert_eq!(centred.midrank, want, "n = {n}");
            // tie groups counted directly
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let tie_sum: u128 = sorted
                .chunk_by(|a, b| a == b)
                .map(|g| (g.len() as u128).pow(3) - g.len() as u128)
                .sum();
            assert_eq!(centred.tie_sum, tie_sum, "n = {n}");
            assert_eq!(plain.tie_sum, tie_sum, "n = {n}");
            let direct = want.iter().map(|c| c * c).sum::<f64>().sqrt();
            let closed = centred_rank_norm(n, centred.tie_sum);
            assert!(
                (closed - direct).abs() <= 1e-14 * direct,
                "n = {n}: {closed} vs {direct}"
            );
        }
        // one tie group: every midrank is the mean, the spread is 0
        assert_eq!(centred_rank_norm(10, 990), 0.0);
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
