//! Midranks, tie groups and the two rank statistics (ROC AUC, average precision) on single
//! vectors. The sort they rest on is [`crate::radix`]'s.

use crate::numeric::resize_for_overwrite;
use crate::radix::{
    bin_starts, descending_key, pack_keys, radix_sort_packed, sort_descending_into, Bins, Packing,
    RadixKeys, SortScratch, SortedKeys,
};

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
    rank_into_with(values, r, scratch, RankOutputs::ALL, 0.0);
}

/// Which of a [`Ranking`]'s per-element outputs a caller reads, besides the tie sum (always
/// there). An output not asked for is left empty (and costs no pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankOutputs {
    /// `order` and `group_end`, for walks down the ranking.
    pub order: bool,
    /// `at_least`, by element.
    pub at_least: bool,
    /// `midrank`, by element (a walk down the order alone does not read them).
    pub midrank: bool,
}

impl RankOutputs {
    pub const ALL: RankOutputs = RankOutputs {
        order: true,
        at_least: true,
        midrank: true,
    };
}

/// [`rank_into`] with only `outputs` asked for, and with `midrank_offset` subtracted from
/// every midrank as it is written ((N + 1) / 2 centres them; the midranks and that offset are
/// half-integers, so the difference is exact).
///
/// Values whose float32 keys span few bins (float16 and bfloat16 values, small integers:
/// `radix::COUNTING_BINS`) are ranked by counting: a histogram of the bins, its
/// prefix sum, then each value's midrank from its bin's start and end, in input order, with
/// no sort at all unless the order is asked for (then one stable counting pass). Other values
/// are sorted by the radix sort and ranked by a walk over the sorted keys. Both give the same
/// bits: the same integers (a group's start and end in the descending order) enter the same
/// formula.
pub fn rank_into_with(
    values: &[f64],
    r: &mut Ranking,
    scratch: &mut SortScratch,
    outputs: RankOutputs,
    midrank_offset: f64,
) {
    // (each path sizes the outputs for overwriting: a buffer kept at its length from the
    // last unit costs no clearing)
    match pack_keys(values, scratch) {
        Packing::Counting(bins) => counting_ranks(r, scratch, bins, outputs, midrank_offset),
        Packing::Radix(keys) => ranks_by_sorting(values, r, scratch, keys, outputs, midrank_offset),
        Packing::Short => {
            // (under 64 values: the radix path's two steps, on an order sorted by comparisons)
            let mut order = Vec::with_capacity(values.len());
            sort_descending_into(values, &mut order, scratch);
            let n = order.len();
            resize_outputs(r, n, outputs);
            let top = (n + 1) as f64 - midrank_offset;
            for (q, &i) in order.iter().enumerate() {
                if let Some(m) = r.midrank.get_mut(i as usize) {
                    *m = top - (q + 1) as f64;
                }
                if let Some(a) = r.at_least.get_mut(i as usize) {
                    *a = (q + 1) as u32;
                }
            }
            let out = GroupOutputs {
                midrank: &mut r.midrank,
                at_least: &mut r.at_least,
                order: &mut r.order,
                group_end: &mut r.group_end,
                top,
            };
            let key = |q: usize| descending_key(values[order[q] as usize]);
            r.tie_sum = fix_tie_groups(out, n, key, |q| order[q]);
        }
    }
}

/// [`rank_into_with`] by the radix sort of the keys packed in `scratch.packed`. The sort's
/// last pass writes each input's midrank (and `at_least`) as if its key were unique, from
/// the position it puts the input at; a walk over the sorted keys then rewrites the tie
/// groups' members and gives the order outputs when asked. Without ties that walk only
/// compares neighbours: no second scatter by input.
fn ranks_by_sorting(
    values: &[f64],
    r: &mut Ranking,
    scratch: &mut SortScratch,
    keys: RadixKeys,
    outputs: RankOutputs,
    midrank_offset: f64,
) {
    let n = values.len();
    resize_outputs(r, n, outputs);
    let top = (n + 1) as f64 - midrank_offset;
    {
        // a unique key at descending position q: the midrank top - (q + 1), group end q + 1
        let (midrank, at_least) = (&mut r.midrank[..], &mut r.at_least[..]);
        match (outputs.midrank, outputs.at_least) {
            (true, true) => radix_sort_packed(values, scratch, keys, &mut |q, i| {
                midrank[i as usize] = top - (q + 1) as f64;
                at_least[i as usize] = (q + 1) as u32;
            }),
            (true, false) => radix_sort_packed(values, scratch, keys, &mut |q, i| {
                midrank[i as usize] = top - (q + 1) as f64;
            }),
            (false, true) => radix_sort_packed(values, scratch, keys, &mut |q, i| {
                at_least[i as usize] = (q + 1) as u32;
            }),
            (false, false) => radix_sort_packed(values, scratch, keys, &mut |_, _| {}),
        }
    }
    let out = GroupOutputs {
        midrank: &mut r.midrank,
        at_least: &mut r.at_least,
        order: &mut r.order,
        group_end: &mut r.group_end,
        top,
    };
    r.tie_sum = match scratch.sorted {
        SortedKeys::Packed => {
            let packed = &scratch.packed[..n];
            fix_tie_groups(out, n, |q| packed[q] >> 32, |q| packed[q] as u32)
        }
        _ => {
            let keyed = &scratch.keyed[..n];
            fix_tie_groups(out, n, |q| keyed[q].0, |q| keyed[q].1)
        }
    };
}

/// After [`ranks_by_sorting`]'s sort: the order and group ends (when asked for, that is when
/// `out.order` is not empty), and each tie group's members rewritten with the group's
/// midrank and end; returns the tie sum.
fn fix_tie_groups(
    out: GroupOutputs<'_>,
    n: usize,
    key: impl Fn(usize) -> u64,
    index: impl Fn(usize) -> u32,
) -> u128 {
    let with_order = !out.order.is_empty();
    if with_order {
        for (q, (o, g)) in out
            .order
            .iter_mut()
            .zip(out.group_end.iter_mut())
            .enumerate()
        {
            *o = index(q);
            *g = q as u32 + 1;
        }
    }
    let mut tie_sum = 0u128;
    let mut q = 0;
    while q + 1 < n {
        let k = key(q);
        if key(q + 1) != k {
            q += 1;
            continue;
        }
        let start = q;
        let mut end = q + 2;
        while end < n && key(end) == k {
            end += 1;
        }
        let m = out.top - (start + 1 + end) as f64 / 2.0;
        for p in start..end {
            let i = index(p) as usize;
            if let Some(r) = out.midrank.get_mut(i) {
                *r = m;
            }
            if let Some(a) = out.at_least.get_mut(i) {
                *a = end as u32;
            }
            if with_order {
                out.group_end[p] = end as u32;
            }
        }
        tie_sum += tie_term(end - start);
        q = end;
    }
    tie_sum
}

/// Sizes `r`'s outputs for `n` inputs as `outputs` asks (cleared when not).
fn resize_outputs(r: &mut Ranking, n: usize, outputs: RankOutputs) {
    if outputs.midrank {
        resize_for_overwrite(&mut r.midrank, n);
    } else {
        r.midrank.clear();
    }
    for (asked, v) in [
        (outputs.at_least, &mut r.at_least),
        (outputs.order, &mut r.order),
        (outputs.order, &mut r.group_end),
    ] {
        if asked {
            resize_for_overwrite(v, n);
        } else {
            v.clear();
        }
    }
}

/// [`rank_into_with`] for keys packed in `scratch.packed` that span `bins`.
fn counting_ranks(
    r: &mut Ranking,
    scratch: &mut SortScratch,
    bins: Bins,
    outputs: RankOutputs,
    midrank_offset: f64,
) {
    let packed = &scratch.packed;
    let n = packed.len();
    let starts = &mut scratch.starts;
    bin_starts(packed, bins, starts, &mut scratch.cursor);
    r.tie_sum = starts
        .windows(2)
        .map(|w| tie_term((w[1] - w[0]) as usize))
        .sum();
    // descending positions start+1..=end average (start + 1 + end) / 2, as in `fix_tie_groups`
    let top = (n + 1) as f64 - midrank_offset;
    let bounds = |item: u64| {
        let b = bins.of(item);
        (starts[b], starts[b + 1])
    };
    let midrank = |(start, end): (u32, u32)| top - (start + 1 + end) as f64 / 2.0;
    resize_outputs(r, n, outputs);
    match (outputs.midrank, outputs.at_least) {
        (true, true) => {
            for ((m, g), &item) in r.midrank.iter_mut().zip(r.at_least.iter_mut()).zip(packed) {
                let group = bounds(item);
                (*m, *g) = (midrank(group), group.1);
            }
        }
        (true, false) => {
            for (m, &item) in r.midrank.iter_mut().zip(packed) {
                *m = midrank(bounds(item));
            }
        }
        (false, true) => {
            for (g, &item) in r.at_least.iter_mut().zip(packed) {
                *g = bounds(item).1;
            }
        }
        (false, false) => {}
    }
    if outputs.order {
        // a stable counting pass: ties keep input order, as the radix sort's
        let cursor = &mut scratch.cursor;
        cursor.clear();
        cursor.extend_from_slice(&starts[..bins.count]);
        for (i, &item) in packed.iter().enumerate() {
            let b = bins.of(item);
            let q = cursor[b] as usize;
            cursor[b] += 1;
            r.order[q] = i as u32;
            r.group_end[q] = starts[b + 1];
        }
    }
}

/// Where [`fix_tie_groups`] writes, each as long as the ranking or, when not asked for, empty.
struct GroupOutputs<'a> {
    midrank: &'a mut [f64],
    at_least: &'a mut [u32],
    order: &'a mut [u32],
    group_end: &'a mut [u32],
    /// (n + 1) less the midrank offset: descending positions start+1..=end average
    /// (start + 1 + end) / 2, so the ascending midrank is top less that.
    top: f64,
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
    1.0 / exact_f64(at_least)
}

/// A count or position as a float, the value of `x as f64`, in one instruction (from usize
/// the conversion is a sequence that handles values past 2^63; from i64 it is one, and
/// counts and positions stay far below 2^63).
#[inline(always)]
fn exact_f64(x: usize) -> f64 {
    debug_assert!(x <= i64::MAX as usize);
    x as i64 as f64
}

/// As [`ap_from_group_sizes`], with `tail_count` more positives at threshold size `tail_at`,
/// which must be at least every value in `at_least`.
pub fn ap_with_tail(at_least: &mut [u32], n_pos: usize, tail_count: usize, tail_at: usize) -> f64 {
    at_least.sort_unstable();
    ap_of_sorted(at_least, tail_at, tail_count, n_pos)
}

/// [`ap_with_tail`] of group sizes already sorted ascending, with `extra_count` more
/// positives in a group of size `extra_at` taken in its place (after the groups of sizes up
/// to `extra_at`; as the tail when it is at least every size): the prediction sets in turn,
/// each tie group's positives at once (cnt * TP / size).
pub fn ap_of_sorted(at_least: &[u32], extra_at: usize, extra_count: usize, n_pos: usize) -> f64 {
    // the extra group goes after the groups of sizes up to `extra_at`
    let split = if extra_count > 0 {
        at_least.partition_point(|&g| g as usize <= extra_at)
    } else {
        at_least.len()
    };
    let (before, after) = at_least.split_at(split);
    let mut sum = sorted_groups_sum(before, 0, 0.0);
    if extra_count > 0 {
        let tp = exact_f64(split + extra_count);
        sum += exact_f64(extra_count) * tp * group_weight(extra_at);
    }
    sum = sorted_groups_sum(after, split + extra_count, sum);
    finish_ap(sum, n_pos)
}

/// `sum` plus the term cnt * TP / size of each tie group of sorted `at_least`, in order,
/// with `before` positives ahead of them. Every item computes its group's term so far and
/// only a group's last adds it (the others add +0.0, which changes no bit): no branch on a
/// group's length, which float16 units' short, uneven runs of ties mispredict.
fn sorted_groups_sum(at_least: &[u32], before: usize, mut sum: f64) -> f64 {
    let mut start = 0;
    for (j, &g) in at_least.iter().enumerate() {
        let next = at_least.get(j + 1).map_or(!g, |&x| x);
        // all ones at a group's last item; hidden from the optimiser, which would branch on it
        let ends = crate::simd::opaque(u64::from(g != next)).wrapping_neg();
        let term = exact_f64(j + 1 - start) * exact_f64(before + j + 1) * group_weight(g as usize);
        sum += f64::from_bits(term.to_bits() & ends);
        start = if ends != 0 { j + 1 } else { start };
    }
    sum
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
                RankOutputs::ALL,
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

    /// Vectors of 16-bit values: float16 (ReLU-like, with zeros of both signs, subnormals,
    /// negatives and heavy ties), bfloat16, small integers, and one huge tie group.
    fn sixteen_bit_vectors() -> Vec<(&'static str, Vec<f64>)> {
        let mut state = 2024u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        // rounds to float16 by keeping 11 significant bits (and flushing below 2^-24)
        let to_f16 = |v: f64| -> f64 {
            if v.abs() < 2f64.powi(-24) {
                return 0.0;
            }
            let e = v.abs().log2().floor().max(-14.0);
            let step = 2f64.powf(e - 10.0);
            (v / step).round() * step
        };
        let n = 20_000;
        let relu: Vec<f64> = (0..n)
            .map(|_| {
                let z = next() * 4.0 - 2.6;
                if z <= 0.0 {
                    if next() < 0.5 {
                        0.0
                    } else {
                        -0.0
                    }
                } else {
                    to_f16(z * z * z)
                }
            })
            .collect();
        let signed_tiny: Vec<f64> = (0..n)
            .map(|_| to_f16((next() - 0.5) * 2f64.powi(-12) * next()))
            .collect();
        let wide: Vec<f64> = (0..n)
            .map(|_| to_f16((next() - 0.5) * 2f64.powf(next() * 40.0 - 24.0)))
            .collect();
        let bf16: Vec<f64> = (0..n)
            .map(|_| {
                let v = ((next() - 0.3) * 1e4) as f32;
                f32::from_bits(v.to_bits() & 0xffff_0000) as f64
            })
            .collect();
        let integers: Vec<f64> = (0..n).map(|_| (next() * 300.0).floor() - 40.0).collect();
        let mut one_group = vec![0.5; n];
        one_group[7] = 0.25;
        vec![
            ("float16 relu", relu.clone()),
            ("float16 relu, short", relu[..5000].to_vec()),
            ("float16 signed tiny", signed_tiny),
            ("float16 wide", wide),
            ("bfloat16", bf16),
            ("integers, long", integers),
            ("one group", one_group),
        ]
    }

    /// Counting ranks and the radix path give the same bits: midranks (centred or not), tie
    /// sums, group ends by input, and the order with its group ends.
    #[test]
    fn counting_ranks_equal_sorted_ranks() {
        for (name, values) in sixteen_bit_vectors() {
            let mut scratch = SortScratch::default();
            assert!(
                matches!(pack_keys(&values, &mut scratch), Packing::Counting(_)),
                "{name}: not ranked by counting"
            );
            for offset in [0.0, (values.len() as f64 + 1.0) / 2.0] {
                let mut counted = Ranking::default();
                rank_into_with(
                    &values,
                    &mut counted,
                    &mut scratch,
                    RankOutputs::ALL,
                    offset,
                );
                let mut sorted = Ranking::default();
                let keys = crate::radix::radix_keys(&values, &mut scratch);
                ranks_by_sorting(
                    &values,
                    &mut sorted,
                    &mut scratch,
                    keys,
                    RankOutputs::ALL,
                    offset,
                );
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&counted.midrank), bits(&sorted.midrank), "{name}");
                assert_eq!(counted.tie_sum, sorted.tie_sum, "{name}");
                assert_eq!(counted.at_least, sorted.at_least, "{name}");
                assert_eq!(counted.order, sorted.order, "{name}");
                assert_eq!(counted.group_end, sorted.group_end, "{name}");
                // each set of outputs, over a ranking that held every output: what is asked
                // for as above, the rest empty; then every output again over that
                let mut reused = std::mem::take(&mut counted);
                for set in 0..8 {
                    let outputs = RankOutputs {
                        order: set & 1 != 0,
                        at_least: set & 2 != 0,
                        midrank: set & 4 != 0,
                    };
                    rank_into_with(&values, &mut reused, &mut scratch, outputs, offset);
                    let case = format!("{name}, {outputs:?}");
                    let or_empty = |asked: bool, v: &[f64]| if asked { bits(v) } else { vec![] };
                    let midrank = or_empty(outputs.midrank, &sorted.midrank);
                    assert_eq!(bits(&reused.midrank), midrank, "{case}");
                    let at_least = if outputs.at_least {
                        &sorted.at_least[..]
                    } else {
                        &[]
                    };
                    assert_eq!(reused.at_least, at_least, "{case}");
                    let (order, ends) = match outputs.order {
                        true => (&sorted.order[..], &sorted.group_end[..]),
                        false => (&[][..], &[][..]),
                    };
                    assert_eq!(
                        (&reused.order[..], &reused.group_end[..]),
                        (order, ends),
                        "{case}"
                    );
                    assert_eq!(reused.tie_sum, sorted.tie_sum, "{case}");
                    rank_into_with(&values, &mut reused, &mut scratch, RankOutputs::ALL, offset);
                }
            }
        }
        // float32 values that span many bins take the radix path
        let spread: Vec<f64> = (0..5000)
            .map(|i| (i as f64 * 0.377).sin() as f32 as f64)
            .collect();
        assert!(matches!(
            pack_keys(&spread, &mut SortScratch::default()),
            Packing::Radix(_)
        ));
    }

    /// The radix path against a slow ranking by counting, for each of the 8 sets of outputs, into a
    /// ranking reused from a different vector (stale contents must not survive): float32
    /// keys with ties, float64 keys with ties, and every value equal (no sort pass runs).
    #[test]
    fn radix_ranks_match_a_slow_ranking_for_every_output_set() {
        let mut state = 5u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = 700;
        let f32_ties: Vec<f64> = (0..n)
            .map(|_| (((next() * 40.0).floor() - 20.0) * 1.1e7 + next() * 1e-3) as f32 as f64)
            .collect();
        let f64_ties: Vec<f64> = (0..n)
            .map(|_| (next() * 25.0).floor() * 0.1 - 1.0)
            .collect();
        let f64_spread: Vec<f64> = (0..n).map(|_| next() - 0.5).collect();
        let all_equal = vec![0.1; n];
        for (name, values) in [
            ("float32 ties", f32_ties),
            ("float64 ties", f64_ties),
            ("float64 spread", f64_spread),
            ("all equal", all_equal),
        ] {
            // the slow ranking: a value's ascending midrank is #below + (#equal + 1) / 2
            let below = |v: f64| values.iter().filter(|&&w| w < v).count();
            let equal = |v: f64| values.iter().filter(|&&w| w == v).count();
            let midrank: Vec<f64> = values
                .iter()
                .map(|&v| below(v) as f64 + (equal(v) as f64 + 1.0) / 2.0 - 3.0)
                .collect();
            let at_least: Vec<u32> = values.iter().map(|&v| (n - below(v)) as u32).collect();
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_by(|&i, &j| values[j as usize].total_cmp(&values[i as usize]));
            let group_end: Vec<u32> = order.iter().map(|&i| at_least[i as usize]).collect();
            for asked in 0..8 {
                let (with_order, with_at_least, with_midrank) =
                    (asked & 1 != 0, asked & 2 != 0, asked & 4 != 0);
                let outputs = RankOutputs {
                    order: with_order,
                    at_least: with_at_least,
                    midrank: with_midrank,
                };
                let mut scratch = SortScratch::default();
                // stale contents: a ranking of other values, with every output
                let mut r = Ranking::default();
                let other: Vec<f64> = (0..n).map(|i| (i * 7 % 13) as f64).collect();
                rank_into_with(&other, &mut r, &mut scratch, RankOutputs::ALL, 0.0);
                let Packing::Radix(keys) = pack_keys(&values, &mut scratch) else {
                    panic!("{name}: not on the radix path");
                };
                ranks_by_sorting(&values, &mut r, &mut scratch, keys, outputs, 3.0);
                let case = format!("{name}, {outputs:?}");
                assert_eq!(r.midrank.is_empty(), !with_midrank, "{case}");
                if with_midrank {
                    assert_eq!(r.midrank, midrank, "{case}");
                }
                assert_eq!(r.at_least.is_empty(), !with_at_least, "{case}");
                if with_at_least {
                    assert_eq!(r.at_least, at_least, "{case}");
                }
                assert_eq!(r.order.is_empty(), !with_order, "{case}");
                if with_order {
                    assert_eq!(r.order, order, "{case}");
                    assert_eq!(r.group_end, group_end, "{case}");
                }
                let mut sorted = values.clone();
                sorted.sort_by(f64::total_cmp);
                let tie_sum: u128 = sorted
                    .chunk_by(|a, b| a == b)
                    .map(|g| tie_term(g.len()))
                    .sum();
                assert_eq!(r.tie_sum, tie_sum, "{case}");
            }
        }
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

    /// [`ap_of_sorted`] group by group with a branch per group, the extra group merged in
    /// where a sorted list would hold it: the same terms in the same order.
    fn ap_of_sorted_by_groups(
        at_least: &[u32],
        extra_at: usize,
        extra: usize,
        n_pos: usize,
    ) -> f64 {
        let mut groups: Vec<(usize, usize)> = Vec::new();
        for &g in at_least {
            match groups.last_mut() {
                Some((size, cnt)) if *size == g as usize => *cnt += 1,
                _ => groups.push((g as usize, 1)),
            }
        }
        if extra > 0 {
            let at = groups.partition_point(|&(size, _)| size <= extra_at);
            groups.insert(at, (extra_at, extra));
        }
        let (mut sum, mut tp) = (0.0, 0.0);
        for (size, cnt) in groups {
            tp += cnt as f64;
            sum += cnt as f64 * tp * (1.0 / size as f64);
        }
        finish_ap(sum, n_pos)
    }

    #[test]
    fn ap_of_sorted_matches_the_group_by_group_sum() {
        let mut rng = crate::rng::SplitMix64::new(11);
        for case in 0..400 {
            let len = rng.below(300);
            // from every item its own group to a few groups holding all
            let span = 1 + rng.below(if case % 2 == 0 { 4 } else { 2000 });
            let mut at_least: Vec<u32> = (0..len).map(|_| 1 + rng.below(span) as u32).collect();
            at_least.sort_unstable();
            let extra = if case % 3 == 0 { 0 } else { 1 + rng.below(50) };
            // before every group, at a group's own size, between, past the last
            let extra_at = match case % 4 {
                0 => 0,
                1 => at_least.get(len / 2).map_or(5, |&g| g as usize),
                2 => rng.below(span + 2),
                _ => span + 10,
            };
            let n_pos = len + extra;
            let got = ap_of_sorted(&at_least, extra_at, extra, n_pos);
            let want = ap_of_sorted_by_groups(&at_least, extra_at, extra, n_pos);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "case {case}: {got} vs {want}"
            );
        }
    }
}
