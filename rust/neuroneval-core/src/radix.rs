//! Indices in descending order of value, by an LSD radix sort of order keys.

use crate::numeric::resize_for_overwrite;

/// A key that decreases as the finite f64 `v` increases, equal for 0 and -0: 2^63 minus
/// the value in sign-magnitude form. Unlike a bitwise complement it keeps the magnitude's
/// trailing zero bits, which values of lower precision all share (float32, float16 or
/// bfloat16 values widened), so a radix sort can skip them whatever the signs.
#[inline(always)]
pub(crate) fn descending_key(v: f64) -> u64 {
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

/// Indices sorted by value descending, ties by index ascending (so the order is unique).
///
/// An LSD radix sort of an order key (`radix_sort`): stable, so ties keep index order.
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
    pub(crate) packed: Vec<u64>,
    pub(crate) keyed: Vec<(u64, u32)>,
    packed_next: Vec<u64>,
    keyed_next: Vec<(u64, u32)>,
    /// A counting sort's bin starts, its second count table and its write positions.
    pub(crate) starts: Vec<u32>,
    odd_counts: Vec<u32>,
    pub(crate) cursor: Vec<u32>,
    /// Which buffer holds the last sort's keys, in sorted order (read by the ranking).
    pub(crate) sorted: SortedKeys,
}

/// Where the last [`sort_descending_into`] left its sorted keys.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) enum SortedKeys {
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
    // (the counting sort writes every slot of `order`: kept at its length from the last
    // unit, it costs no clearing)
    match pack_keys(values, scratch) {
        Packing::Short => {
            order.clear();
            order.extend(0..values.len() as u32);
            order.sort_by_key(|&i| (descending_key(values[i as usize]), i));
        }
        Packing::Counting(bins) => {
            bin_starts(
                &scratch.packed,
                bins,
                &mut scratch.starts,
                &mut scratch.odd_counts,
            );
            let cursor = &mut scratch.cursor;
            cursor.clear();
            cursor.extend_from_slice(&scratch.starts[..bins.count]);
            resize_for_overwrite(order, values.len());
            for (i, &item) in scratch.packed.iter().enumerate() {
                let b = bins.of(item);
                order[cursor[b] as usize] = i as u32;
                cursor[b] += 1;
            }
        }
        Packing::Radix(facts) => {
            radix_sort_packed(values, scratch, facts, &mut |_, _| {});
            order.clear();
            match scratch.sorted {
                SortedKeys::Packed => order.extend(scratch.packed.iter().map(|&x| x as u32)),
                _ => order.extend(scratch.keyed.iter().map(|&(_, i)| i)),
            }
        }
    }
}

/// How [`pack_keys`] left a vector's keys.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Packing {
    /// Under 64 values: no keys (a comparison sort is faster).
    Short,
    /// Every value an exact float32 whose keys span few bins: `packed` holds them in input
    /// order, for a counting sort or counting ranks.
    Counting(Bins),
    /// Any other values: sorted by the radix sort ([`radix_sort_packed`]).
    Radix(RadixKeys),
}

/// Up to this many bins (512 KiB of u32 counts, which stay in L2) a vector is ranked by
/// counting: float16 values take at most about 82,000 (sign, 40 binades of 1,024 steps from
/// float16's smallest subnormal to its largest value), bfloat16 values and small integers
/// at most 65,536.
pub(crate) const COUNTING_BINS: usize = 1 << 17;

/// The bins of a counting sort: a packed item's float32 key less the smallest key, with the
/// low bits that every key shares shifted out. Ascending bins are descending values, and
/// equal values share a bin (a key is a function of the value, 0 and -0 alike).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bins {
    min: u32,
    low: u32,
    pub(crate) count: usize,
}

impl Bins {
    #[inline(always)]
    pub(crate) fn of(&self, item: u64) -> usize {
        (((item >> 32) as u32 - self.min) >> self.low) as usize
    }
}

/// Whether vectors of few distinct keys are ranked by counting ([`pack_keys`]); on by
/// default. Off, every vector takes the radix sort, with the same results: for benchmarks that
/// compare the two paths on the same data.
static COUNTING_RANKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turns counting ranks on or off for the whole process (see `COUNTING_RANKS`).
pub fn set_counting_ranks(enabled: bool) {
    COUNTING_RANKS.store(enabled, std::sync::atomic::Ordering::Relaxed);
}

/// Packs the keys of `values` into `scratch.packed` (a float32 key in the high half, the
/// index in the low half), one pass, and says which sort suits them: counting when every
/// value is an exact float32 and the keys span at most [`COUNTING_BINS`] bins and no more
/// than there are values (below that a table costs more than it saves), else radix.
pub(crate) fn pack_keys(values: &[f64], scratch: &mut SortScratch) -> Packing {
    let n = values.len();
    scratch.sorted = SortedKeys::None;
    if n < 64 {
        return Packing::Short;
    }
    resize_for_overwrite(&mut scratch.packed, n);
    let keys = pack_f32_keys(values, &mut scratch.packed);
    if keys.exact && COUNTING_RANKS.load(std::sync::atomic::Ordering::Relaxed) {
        let low = if keys.varying == 0 {
            0
        } else {
            keys.varying.trailing_zeros()
        };
        let count = ((keys.max - keys.min) >> low) as usize + 1;
        if count <= COUNTING_BINS && count <= n {
            return Packing::Counting(Bins {
                min: keys.min,
                low,
                count,
            });
        }
        // float16 values whose float32 keys span too many bins (ReLU units: between 0 and
        // float16's smallest magnitudes lie 100,000 float32 steps that no value takes):
        // float16's own order, at most 63,489 bins
        if low >= F16_SHARED_LOW_BITS && n >= 1 << 12 {
            if let Some((min, max)) = to_f16_keys(&mut scratch.packed) {
                return Packing::Counting(Bins {
                    min,
                    low: 0,
                    count: (max - min) as usize + 1,
                });
            }
            // not float16 after all: the float32 keys again
            pack_f32_keys(values, &mut scratch.packed);
        }
    }
    Packing::Radix(RadixKeys {
        varying: keys.varying,
        exact: keys.exact,
    })
}

/// Packs the keys of (at least 64) `values` for the radix sort whatever they span: the
/// sorting path that the counting path must agree with.
#[cfg(test)]
pub(crate) fn radix_keys(values: &[f64], scratch: &mut SortScratch) -> RadixKeys {
    resize_for_overwrite(&mut scratch.packed, values.len());
    let keys = pack_f32_keys(values, &mut scratch.packed);
    RadixKeys {
        varying: keys.varying,
        exact: keys.exact,
    }
}

/// The low mantissa bits that float32 copies of float16 values all leave zero (23 - 10).
const F16_SHARED_LOW_BITS: u32 = 13;

crate::simd::widest! {
/// Rewrites the float32 keys of `packed` as float16 order keys (0x8000 less the magnitude's
/// position among float16's for a value >= 0, plus it for a negative one; 0 and -0 alike), and
/// returns their extremes; None, leaving `packed` half rewritten, as soon as a chunk holds a
/// value that is not an exact float16. Ascending keys are descending values, as before. The
/// chunks' loops have no branch, so they vectorise.
fn to_f16_keys(packed: &mut [u64]) -> Option<(u32, u32)> {
    let (mut min, mut max) = (u32::MAX, 0);
    for chunk in packed.chunks_mut(256) {
        let mut exact = true;
        for item in chunk.iter_mut() {
            let k = (*item >> 32) as u32;
            let negative = k > 1 << 31;
            let magnitude = if negative {
                k.wrapping_sub(1 << 31)
            } else {
                (1u32 << 31).wrapping_sub(k)
            };
            let (position, ok) = f16_position(magnitude);
            exact &= ok;
            let k16 = if negative {
                0x8000 + position
            } else {
                0x8000u32.wrapping_sub(position)
            };
            min = min.min(k16);
            max = max.max(k16);
            *item = ((k16 as u64) << 32) | (*item & 0xffff_ffff);
        }
        if !exact {
            return None;
        }
    }
    Some((min, max))
}
}

/// The position of a float32 magnitude (its bits less the sign) among float16's magnitudes
/// (0, the 1,023 subnormals, then 30 binades of 1,024), and whether it is one of them. Both
/// cases are computed and one is selected, without branches (so the unselected case may
/// wrap: its arithmetic is wrapping).
#[inline(always)]
fn f16_position(magnitude: u32) -> (u32, bool) {
    let exponent = magnitude >> 23;
    // a normal float16: its exponent and the top ten mantissa bits
    let normal = ((exponent.wrapping_sub(112)) << 10) | ((magnitude >> 13) & 0x3ff);
    let normal_ok = exponent <= 142 && magnitude & 0x1fff == 0;
    // a subnormal float16 is an integer times 2^-24: the float32 significand (24 bits,
    // worth 2^(exponent - 150) each) shifted right by 126 - exponent (14 to 23); exponents
    // below 103 lie below float16's smallest magnitude
    let shift = 126u32.saturating_sub(exponent).min(31);
    let significand = (magnitude & 0x7f_ffff) | 0x80_0000;
    let subnormal = significand >> shift;
    let subnormal_ok = exponent >= 103 && significand & ((1u32 << shift) - 1) == 0;
    if exponent >= 113 {
        (normal, normal_ok)
    } else if magnitude == 0 {
        (0, true)
    } else {
        (subnormal, subnormal_ok)
    }
}

/// What the radix sort needs to know of the packed keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RadixKeys {
    varying: u32,
    exact: bool,
}

/// Into `starts` (count + 1 entries), where each bin's run begins in the ascending order of
/// bins, and n at the end. The counts come from two tables that take alternate items (`odd`
/// is the second), so that a run of equal values does not wait on one counter.
pub(crate) fn bin_starts(packed: &[u64], bins: Bins, starts: &mut Vec<u32>, odd: &mut Vec<u32>) {
    starts.clear();
    starts.resize(bins.count + 1, 0);
    odd.clear();
    odd.resize(bins.count, 0);
    let mut pairs = packed.chunks_exact(2);
    for pair in &mut pairs {
        starts[bins.of(pair[0])] += 1;
        odd[bins.of(pair[1])] += 1;
    }
    for &item in pairs.remainder() {
        starts[bins.of(item)] += 1;
    }
    let mut total = 0u32;
    for (s, &o) in starts.iter_mut().zip(odd.iter()) {
        let count = *s + o;
        *s = total;
        total += count;
    }
    starts[bins.count] = total;
}

/// Sorts the keys that [`pack_keys`] packed (when it answered [`Packing::Radix`]) by the
/// radix sort, and records where the sorted keys are (`scratch.sorted`). The sort's last
/// pass calls `place(q, i)` as it writes input i's key at its final position q, once for
/// every input, unless every key is equal (no pass runs).
pub(crate) fn radix_sort_packed(
    values: &[f64],
    scratch: &mut SortScratch,
    keys: RadixKeys,
    place: &mut impl FnMut(usize, u32),
) {
    // Key in the high 32 bits, index in the low 32: half the data moved, when every value
    // is an exact float32 (checked while packing); else 64-bit keys beside the index.
    if keys.exact {
        scratch.sorted = SortedKeys::Packed;
        sort_items(
            &mut scratch.packed,
            &mut scratch.packed_next,
            keys.varying as u64,
            |x| x >> 32,
            |x, k| (k << 32) | (x & 0xffff_ffff),
            &mut |q, x| place(q, x as u32),
        );
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
            &mut |q, x| place(q, x.1),
        );
    }
}

/// What [`pack_f32_keys`] noted about the keys.
#[derive(Debug, PartialEq, Eq)]
struct KeyFacts {
    /// The key bits in which some key differs from the first.
    varying: u32,
    /// Whether every value is an exact float32.
    exact: bool,
    min: u32,
    max: u32,
}

/// Writes each value's float32 [`descending_key_f32`] in the high half of `packed` (as long as
/// `values`) and its index in the low half, noting the keys' varying bits, extremes and
/// whether every value is an exact float32: with AVX-512 intrinsics where the CPU has them
/// (the compiler vectorises the portable loop with scatter stores, which took over twice as
/// long), else [`pack_f32_keys_portable`]. Both give the same items and facts.
fn pack_f32_keys(values: &[f64], packed: &mut [u64]) -> KeyFacts {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx512() {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { avx512::pack_f32_keys(values, packed) };
    }
    pack_f32_keys_portable(values, packed)
}

crate::simd::widest! {
/// [`pack_f32_keys`] without intrinsics. The folds run in eight lanes without early exit, so
/// the loop vectorises.
fn pack_f32_keys_portable(values: &[f64], packed: &mut [u64]) -> KeyFacts {
    let first = descending_key_f32(values[0] as f32);
    let (mut varying, mut exact) = ([0u32; 8], [true; 8]);
    let (mut min, mut max) = ([first; 8], [first; 8]);
    let mut pack = |lane: usize, v: f64, index: usize| {
        let k = descending_key_f32(v as f32);
        varying[lane] |= k ^ first;
        exact[lane] &= (v as f32) as f64 == v;
        min[lane] = min[lane].min(k);
        max[lane] = max[lane].max(k);
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
    KeyFacts {
        varying: varying.iter().fold(0, |a, &b| a | b),
        exact: exact.iter().all(|&e| e),
        min: min.iter().copied().fold(u32::MAX, u32::min),
        max: max.iter().copied().fold(0, u32::max),
    }
}
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{descending_key_f32, KeyFacts};
    use std::arch::x86_64::*;

    /// [`super::pack_f32_keys`] eight values at a time, in 64-bit lanes: each value narrowed
    /// to float32 (rounded to nearest, as `as f32`), its key (2^31 plus or minus the
    /// magnitude's bits) shifted above the index. The tail goes through the same steps,
    /// padded with the first value (which changes none of the facts).
    #[target_feature(enable = "avx512f")]
    pub(super) fn pack_f32_keys(values: &[f64], packed: &mut [u64]) -> KeyFacts {
        let n = values.len();
        let first = descending_key_f32(values[0] as f32);
        let middle = _mm512_set1_epi64(1 << 31);
        let magnitude_bits = _mm512_set1_epi64(0x7fff_ffff);
        let first_v = _mm512_set1_epi64(first as i64);
        let (mut varying, mut min, mut max) = (_mm512_setzero_si512(), first_v, first_v);
        let mut index = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
        let mut exact = 0xffu8;
        let mut pack8 = |v: &[f64; 8], out: &mut [u64; 8]| {
            // SAFETY: `v` holds 8 values; unaligned loads are allowed.
            let v = unsafe { _mm512_loadu_pd(v.as_ptr()) };
            let narrow = _mm512_cvtpd_ps(v);
            exact &= _mm512_cmpeq_pd_mask(_mm512_cvtps_pd(narrow), v);
            let bits = _mm512_cvtepu32_epi64(_mm256_castps_si256(narrow));
            let magnitude = _mm512_and_si512(bits, magnitude_bits);
            let negative = _mm512_test_epi64_mask(bits, middle);
            let key = _mm512_mask_add_epi64(
                _mm512_sub_epi64(middle, magnitude),
                negative,
                middle,
                magnitude,
            );
            varying = _mm512_or_si512(varying, _mm512_xor_si512(key, first_v));
            min = _mm512_min_epu64(min, key);
            max = _mm512_max_epu64(max, key);
            let item = _mm512_or_si512(_mm512_slli_epi64::<32>(key), index);
            // SAFETY: `out` holds 8 items; unaligned stores are allowed.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), item) };
            index = _mm512_add_epi64(index, _mm512_set1_epi64(8));
        };
        let whole = n - n % 8;
        for (v, out) in values[..whole]
            .chunks_exact(8)
            .zip(packed[..whole].chunks_exact_mut(8))
        {
            pack8(
                v.try_into().expect("8 values"),
                out.try_into().expect("8 items"),
            );
        }
        if whole < n {
            let (mut v, mut out) = ([values[0]; 8], [0u64; 8]);
            v[..n - whole].copy_from_slice(&values[whole..]);
            pack8(&v, &mut out);
            packed[whole..n].copy_from_slice(&out[..n - whole]);
        }
        KeyFacts {
            varying: _mm512_reduce_or_epi64(varying) as u32,
            exact: exact == 0xff,
            min: _mm512_reduce_min_epu64(min) as u32,
            max: _mm512_reduce_max_epu64(max) as u32,
        }
    }
}

/// Sorts `items` by `key` (see [`radix_sort`]), where `varying` has the key bits in which
/// some item differs from another (noted while filling them); `place` as in [`radix_sort`].
fn sort_items<T: Copy + Default>(
    items: &mut Vec<T>,
    next: &mut Vec<T>,
    varying: u64,
    key: impl Fn(T) -> u64,
    set_key: impl Fn(T, u64) -> T,
    place: &mut impl FnMut(usize, T),
) {
    if let Some(span) = drop_common_low_bits(items, varying, &key, set_key) {
        radix_sort(items, next, key, span, place);
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
/// integers), 11-bit digits: two passes instead of three; float32 keys of up to
/// [`ELEVEN_BIT_DIGITS_MAX_ITEMS`] items too (three instead of four). A digit on which every
/// key agrees is skipped. The counts come from one pass into two tables that take alternate items:
/// with few distinct digits (ties), consecutive items of one table would wait on each
/// other's counter updates. The last pass calls `place(q, item)` as it writes each item at
/// its final position q (a ranking then needs no pass of its own to learn the positions).
fn radix_sort<T: Copy + Default>(
    items: &mut Vec<T>,
    next: &mut Vec<T>,
    key: impl Fn(T) -> u64,
    span: u32,
    place: &mut impl FnMut(usize, T),
) {
    // Widths, bucket counts and digit counts are constants of each instance: constant
    // shifts, known bounds, unrolled digit loops, and 8-bit tables that stay in L1.
    match span {
        0..=11 => radix_passes::<T, 11, 2048, 1>(items, next, &key, place),
        12..=22 => radix_passes::<T, 11, 2048, 2>(items, next, &key, place),
        23..=24 => radix_passes::<T, 8, 256, 3>(items, next, &key, place),
        25..=33 if items.len() <= ELEVEN_BIT_DIGITS_MAX_ITEMS => {
            radix_passes::<T, 11, 2048, 3>(items, next, &key, place)
        }
        25..=32 => radix_passes::<T, 8, 256, 4>(items, next, &key, place),
        _ => radix_passes::<T, 8, 256, 8>(items, next, &key, place),
    }
}

/// Up to this many items, keys of 25 to 33 bits (a float32's) take three 11-bit digits
/// rather than four bytes: the 2,048 buckets' write positions no longer stay in L1, but
/// while the items fit in L2 a pass fewer pays more (float32 normal units transformed for
/// spearman on an AMD EPYC host: 9.5 against 10.3 ns per value at 50,000 inputs, 10.8-11.9
/// against 12.1-14.3 at 300,000; at 10^6 the bytes were 3-5% faster: benches/README.md's
/// log, 2026-12-07).
const ELEVEN_BIT_DIGITS_MAX_ITEMS: usize = 1 << 19;

/// Sorts integers below 2^span (span <= 22) ascending in place, by LSD passes from `items`
/// into `buffer` and back: bytes (two for spans up to 16 bits); above, two digits of half the
/// span for long runs, three bytes for short ones, where clearing and summing the wider
/// tables would cost more than the third pass. All digits' counts come from one read.
pub(crate) fn sort_small_u32(items: &mut [u32], buffer: &mut Vec<u32>, span: u32) {
    debug_assert!(span <= 22);
    let n = items.len();
    // Above 16 bits, two digits of half the span each, or three bytes: whichever costs less
    // in passes over the items plus buckets cleared and summed.
    let half = span.div_ceil(2);
    if span <= 16 || 3 * n + 3 * 256 <= 2 * n + (2 << half) {
        lsd_u32::<8, 256, 3>(items, buffer, span);
    } else if half <= 9 {
        lsd_u32::<9, 512, 2>(items, buffer, span);
    } else if half <= 10 {
        lsd_u32::<10, 1024, 2>(items, buffer, span);
    } else {
        lsd_u32::<11, 2048, 2>(items, buffer, span);
    }
}

/// [`sort_small_u32`] with `DIGITS` digits of `WIDTH` bits (`BUCKETS` = 2^WIDTH), skipping the
/// digits above `span`.
fn lsd_u32<const WIDTH: u32, const BUCKETS: usize, const DIGITS: usize>(
    items: &mut [u32],
    buffer: &mut Vec<u32>,
    span: u32,
) {
    const { assert!(DIGITS <= 3, "lsd_u32_digits sorts by up to three digits") };
    // the digits used, fixed at compile time in each loop below
    match (span.div_ceil(WIDTH) as usize).clamp(1, DIGITS) {
        1 => lsd_u32_digits::<WIDTH, BUCKETS, 1>(items, buffer),
        2 => lsd_u32_digits::<WIDTH, BUCKETS, 2>(items, buffer),
        _ => lsd_u32_digits::<WIDTH, BUCKETS, 3>(items, buffer),
    }
}

/// [`lsd_u32`] with its `USED` (1 to 3) lowest digits: one count table per digit, the digits
/// fixed at compile time and the writes unchecked ([`scatter_by_digit`]). Runs of 10,000
/// items sorted 1.2-1.8 times as fast as with a table of tables, the digits counted at run
/// time and checked writes (an AMD EPYC host; benches/README.md's log, 2026-12-07).
fn lsd_u32_digits<const WIDTH: u32, const BUCKETS: usize, const USED: usize>(
    items: &mut [u32],
    buffer: &mut Vec<u32>,
) {
    // the counts are u32: the unchecked writes rely on them not wrapping
    assert!(
        u32::try_from(items.len()).is_ok(),
        "more items than a u32 counts"
    );
    let digit = |x: u32, d: usize| (x >> (WIDTH * d as u32)) as usize & (BUCKETS - 1);
    let (mut c0, mut c1, mut c2) = ([0u32; BUCKETS], [0u32; BUCKETS], [0u32; BUCKETS]);
    for &x in items.iter() {
        c0[digit(x, 0)] += 1;
        if USED > 1 {
            c1[digit(x, 1)] += 1;
        }
        if USED > 2 {
            c2[digit(x, 2)] += 1;
        }
    }
    resize_for_overwrite(buffer, items.len());
    let mut start = [0usize; BUCKETS];
    for (d, counts) in [&c0, &c1, &c2].into_iter().enumerate().take(USED) {
        let mut total = 0;
        for (s, &c) in start.iter_mut().zip(counts) {
            (*s, total) = (total, total + c as usize);
        }
        let (from, to): (&[u32], &mut [u32]) = if d % 2 == 0 {
            (&*items, &mut buffer[..])
        } else {
            (&buffer[..], &mut *items)
        };
        // `from` holds the items counted (or the permutation the last pass wrote)
        scatter_by_digit(from, to, &mut start, |x| digit(x, d), &mut |_, _| {});
    }
    if USED % 2 == 1 {
        items.copy_from_slice(buffer);
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
    place: &mut impl FnMut(usize, T),
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
    let [even, odd] = &counts;
    let count = |d: usize, b: usize| (even[d][b] + odd[d][b]) as usize;
    // a digit on which every key agrees moves nothing
    let moves = |d: usize| !(0..BUCKETS).any(|b| count(d, b) == n);
    let last = (0..DIGITS).rev().find(|&d| moves(d));
    let mut start = [0usize; BUCKETS];
    for d in (0..DIGITS).filter(|&d| moves(d)) {
        let mut total = 0;
        for (b, s) in start.iter_mut().enumerate() {
            *s = total;
            total += count(d, b);
        }
        let digit_d = |item: T| digit(item, d);
        if Some(d) == last {
            scatter_by_digit(items, next, &mut start, digit_d, place);
        } else {
            scatter_by_digit(items, next, &mut start, digit_d, &mut |_, _| {});
        }
        std::mem::swap(items, next);
    }
}

/// One pass of [`radix_passes`]: each item of `items` to `next` at its bucket's cursor
/// (`start`, by `digit`), calling `visit(q, item)` as it writes item at q.
#[inline(always)]
fn scatter_by_digit<T: Copy>(
    items: &[T],
    next: &mut [T],
    start: &mut [usize],
    digit: impl Fn(T) -> usize,
    visit: &mut impl FnMut(usize, T),
) {
    let dst = next.as_mut_ptr();
    for &item in items {
        let b = digit(item);
        let q = start[b];
        // SAFETY: bucket b's items go to start[b].. in turn, as many as it counted, and the
        // buckets' ranges tile 0..n, the length of `next`: every write is in bounds and none
        // lands twice.
        unsafe { dst.add(q).write(item) };
        visit(q, item);
        start[b] = q + 1;
    }
}

/// Into `top` (cleared first), ascending, the inputs i with `values[i] >= cut`, where cut is
/// the `k`-th largest value (1 <= k <= n; by `total_cmp`, descending; the cut is only
/// compared with `>=`, so which zero it is does not matter). For a small k the cut is
/// found among the candidates at or above a threshold read off a sample, which holds every
/// input at or above the cut whenever at least k candidates hold it: one scan of the values
/// and a selection among a few thousand, instead of a selection over a copy of all N.
pub fn top_k_set_into(values: &[f64], k: usize, top: &mut Vec<u32>) {
    let n = values.len();
    debug_assert!(1 <= k && k <= n);
    top.clear();
    // Every STRIDE-th value, and the position in its descending order whose value about
    // twice k inputs reach, less likely to be over k by chance.
    const STRIDE: usize = 32;
    let sample_len = n / STRIDE;
    let position = 2 * k / STRIDE + 16;
    if sample_len >= 256 && position < sample_len / 4 {
        let mut sample: Vec<f64> = values
            .iter()
            .step_by(STRIDE)
            .take(sample_len)
            .copied()
            .collect();
        let (_, threshold, _) = sample.select_nth_unstable_by(position, |x, y| y.total_cmp(x));
        let threshold = *threshold;
        indices_at_least(values, threshold, top);
        // {v >= threshold} holds the largest values in the total order too (a value below
        // it is below every candidate), so the k-th largest candidate is the k-th overall.
        if top.len() >= k {
            let mut candidates: Vec<f64> = top.iter().map(|&i| values[i as usize]).collect();
            let (_, cut, _) = candidates.select_nth_unstable_by(k - 1, |x, y| y.total_cmp(x));
            let cut = *cut;
            top.retain(|&i| values[i as usize] >= cut);
            return;
        }
        top.clear();
    }
    let mut scratch = values.to_vec();
    let (_, cut, _) = scratch.select_nth_unstable_by(k - 1, |x, y| y.total_cmp(x));
    indices_at_least(values, *cut, top);
}

crate::simd::widest! {
/// Appends to `out`, ascending, the inputs i with `values[i] >= threshold`; eight values
/// are compared at once and only a group with a member is walked.
fn indices_at_least(values: &[f64], threshold: f64, out: &mut Vec<u32>) {
    let mut groups = values.chunks_exact(8);
    for (g, group) in (&mut groups).enumerate() {
        if group.iter().fold(false, |any, &v| any | (v >= threshold)) {
            for (j, &v) in group.iter().enumerate() {
                if v >= threshold {
                    out.push((g * 8 + j) as u32);
                }
            }
        }
    }
    let start = values.len() - groups.remainder().len();
    for (j, &v) in groups.remainder().iter().enumerate() {
        if v >= threshold {
            out.push((start + j) as u32);
        }
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sampled selection against a full selection over a copy, on ties, equal values,
    /// zeros of both signs, a single value, k = n, sorted runs and values that only the
    /// sampled positions hold (the sample then overshoots and the full selection runs).
    #[test]
    fn top_k_set_matches_a_full_selection() {
        let simple = |values: &[f64], k: usize| -> Vec<u32> {
            let mut copy = values.to_vec();
            let (_, cut, _) = copy.select_nth_unstable_by(k - 1, |x, y| y.total_cmp(x));
            let cut = *cut;
            (0..values.len() as u32)
                .filter(|&i| values[i as usize] >= cut)
                .collect()
        };
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = 40_000;
        let mut cases: Vec<Vec<f64>> = vec![
            (0..n).map(|_| next() - 0.5).collect(),
            (0..n).map(|_| (next() * 5.0).floor()).collect(),
            vec![1.5; n],
            (0..n)
                .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
                .collect(),
            (0..n)
                .map(|_| if next() < 0.9 { -0.0 } else { next() })
                .collect(),
            (0..n).map(|i| i as f64).collect(),
            (0..n).map(|i| -(i as f64)).collect(),
            // large values only at the sampled positions
            (0..n)
                .map(|i| if i % 32 == 0 { 10.0 + next() } else { next() })
                .collect(),
            vec![3.0],
            vec![-0.0, 0.0],
        ];
        let ties_at_cut: Vec<f64> = (0..n)
            .map(|i| {
                if i < 300 {
                    2.0
                } else if i < 900 {
                    1.0
                } else {
                    next()
                }
            })
            .collect();
        cases.push(ties_at_cut);
        for values in &cases {
            let n = values.len();
            for k in [1, 2, 7, 100, 301, 500, 901, n / 10, n / 3, n - 1, n] {
                if !(1..=n).contains(&k) {
                    continue;
                }
                let mut got = Vec::new();
                top_k_set_into(values, k, &mut got);
                assert_eq!(got, simple(values, k), "n = {n}, k = {k}");
            }
        }
    }

    /// float16's bit pattern of a value >= 0 is its position among float16 magnitudes: every
    /// finite float16, widened to float32, maps back to its own bits; values between float16
    /// steps, below its smallest subnormal or past its largest value are not float16.
    #[test]
    fn float16_positions_of_every_float16() {
        let widen = |h: u32| -> f32 {
            let (exponent, mantissa) = ((h >> 10) & 0x1f, h & 0x3ff);
            let v = if exponent == 0 {
                mantissa as f64 * 2f64.powi(-24)
            } else {
                (1024 + mantissa) as f64 * 2f64.powi(exponent as i32 - 25)
            };
            v as f32
        };
        for h in 0..0x7c00u32 {
            let bits = widen(h).to_bits();
            assert_eq!(f16_position(bits), (h, true), "float16 {h:#06x}");
            if h > 0 {
                // halfway to the next float16 (or to twice the largest one): not a float16
                let between = (widen(h) as f64 + widen(h + 1) as f64) / 2.0;
                assert!(!f16_position((between as f32).to_bits()).1, "{h:#06x}");
            }
        }
        assert!(!f16_position((2f32).powi(-25).to_bits()).1);
        assert!(!f16_position(65536f32.to_bits()).1);
        assert!(!f16_position(f32::MIN_POSITIVE.to_bits()).1);
    }

    /// The small-integer sort against a comparison sort, for short and long runs (both digit
    /// widths), every span up to 22 bits, ties, and an odd number of passes.
    #[test]
    fn small_integer_sort_matches_a_comparison_sort() {
        let mut state = 5u64;
        let mut buffer = Vec::new();
        // (each way of sorting: one to three bytes, two digits of 9, 10 or 11 bits)
        for len in [0, 1, 2, 255, 1000, 1500, 3500, 4095, 4096, 20_000] {
            for span in [1, 7, 8, 9, 11, 12, 16, 17, 18, 19, 20, 21, 22] {
                let mut v: Vec<u32> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        ((state >> 40) as u32) & ((1 << span) - 1)
                    })
                    .collect();
                let mut want = v.clone();
                want.sort_unstable();
                sort_small_u32(&mut v, &mut buffer, span);
                assert_eq!(v, want, "len {len}, span {span}");
            }
        }
    }

    /// One order buffer reused across calls of every path (a comparison sort under 64
    /// values, the counting sort of float16 values, the radix sort), longer and shorter
    /// than the next call needs: each call's order is a fresh sort's.
    #[test]
    fn a_reused_order_buffer_sorts_as_a_fresh_one() {
        let mut rng = crate::rng::SplitMix64::new(21);
        let mut vector = |n: usize, halves: bool| -> Vec<f64> {
            (0..n)
                .map(|_| {
                    let v = rng.next_f64() * 8.0 - 2.0;
                    if halves {
                        half::f16::from_f64(v).to_f64()
                    } else {
                        v
                    }
                })
                .collect()
        };
        let calls = [
            vector(5000, true),
            vector(40, false),
            vector(3000, false),
            vector(7000, true),
            vector(2000, true),
            vector(10, true),
        ];
        let (mut order, mut scratch) = (vec![u32::MAX; 9000], SortScratch::default());
        for values in &calls {
            sort_descending_into(values, &mut order, &mut scratch);
            let mut want: Vec<u32> = (0..values.len() as u32).collect();
            want.sort_by(|&a, &b| {
                values[b as usize]
                    .total_cmp(&values[a as usize])
                    .then(a.cmp(&b))
            });
            assert_eq!(order, want, "n = {}", values.len());
        }
    }

    /// Keys of 25 to 32 bits sort alike by three 11-bit digits (up to
    /// [`ELEVEN_BIT_DIGITS_MAX_ITEMS`]) and by four bytes (above): stably, each item's final
    /// position reported as it is written.
    #[test]
    fn both_digit_widths_sort_wide_keys_alike() {
        let mut rng = crate::rng::SplitMix64::new(99);
        for span in [25u32, 32] {
            let items: Vec<u64> = (0..3001u64)
                .map(|i| {
                    let state = rng.next_u64();
                    // a tenth of the keys from a few values (ties), the rest spread
                    let key = if state.is_multiple_of(10) {
                        state >> 62
                    } else {
                        state >> (64 - span)
                    };
                    (key << 32) | i
                })
                .collect();
            let mut want = items.clone();
            want.sort_by_key(|&x| x >> 32);
            let key = |x: u64| x >> 32;
            let mut runs: Vec<(&str, Vec<u64>, Vec<usize>)> = Vec::new();
            for width in ["11-bit", "8-bit"] {
                let (mut sorted, mut next) = (items.clone(), Vec::new());
                let mut placed = vec![usize::MAX; items.len()];
                let mut place = |q: usize, x: u64| placed[(x & 0xffff_ffff) as usize] = q;
                match width {
                    "11-bit" => {
                        radix_passes::<u64, 11, 2048, 3>(&mut sorted, &mut next, &key, &mut place)
                    }
                    _ => radix_passes::<u64, 8, 256, 4>(&mut sorted, &mut next, &key, &mut place),
                }
                runs.push((width, sorted, placed));
            }
            for (width, sorted, placed) in runs {
                assert_eq!(sorted, want, "{width}, span {span}");
                for (q, &x) in want.iter().enumerate() {
                    assert_eq!(
                        placed[(x & 0xffff_ffff) as usize],
                        q,
                        "{width}, span {span}"
                    );
                }
            }
        }
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

    /// The AVX-512 packing against the portable one, item for item and fact for fact: tails
    /// of every length, values that are not float32 (rounded either way, to a tie, past
    /// float32's range to infinity, below its subnormals to zero), zeros of both signs,
    /// infinities, subnormals, and a first value that is the smallest, the largest or neither.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_packing_matches_the_portable_one() {
        if !crate::simd::has_avx512() {
            return;
        }
        let mut state = 99u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state
        };
        let special = [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f32::MAX as f64,
            f64::MAX,
            -1e300,
            1e-320,
            -1e-46,
            f32::MIN_POSITIVE as f64 / 3.0,
            1.0 + f64::EPSILON,
            1.0 + (f32::EPSILON as f64) / 2.0,
            -0.1,
            16_777_217.0,
        ];
        for len in (1..=40).chain([64, 67, 1000, 1003]) {
            for kind in 0..4 {
                let values: Vec<f64> = (0..len)
                    .map(|i| {
                        let r = next();
                        let f = (r >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0;
                        match (kind, r % 4) {
                            (0, _) => (f as f32) as f64,
                            (1, 0) => special[(r >> 40) as usize % special.len()],
                            (1, _) | (2, _) => f,
                            _ => (i % 3) as f64 - 1.0,
                        }
                    })
                    .collect();
                let mut exact = values.clone();
                exact.iter_mut().for_each(|v| *v = (*v as f32) as f64);
                for v in [&values, &exact] {
                    let (mut wide, mut portable) = (vec![0u64; len], vec![0u64; len]);
                    // SAFETY: the CPU has AVX-512F (checked above).
                    let got = unsafe { avx512::pack_f32_keys(v, &mut wide) };
                    let want = pack_f32_keys_portable(v, &mut portable);
                    assert_eq!(got, want, "len {len}, kind {kind}");
                    assert_eq!(wide, portable, "len {len}, kind {kind}");
                }
            }
        }
    }
}
