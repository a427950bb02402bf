//! Numeric helpers of the transforms: norms without overflow, sums in a fixed lane order,
//! and reusable buffers.

use crate::matrix::Element;

/// 2^e for an exponent of a normal double (-1022 <= e <= 1023), exactly.
#[inline]
const fn pow2(e: i32) -> f64 {
    debug_assert!(-1022 <= e && e <= 1023);
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// floor(log2(x)) for finite x > 0, clamped to the exponents of normal doubles.
#[inline]
fn exponent(x: f64) -> i32 {
    (x.log2().floor() as i32).clamp(-1022, 1023)
}

/// A power of two near `max_abs`, so that dividing by it is exact and squares stay in range
/// (clamped so that its inverse is finite too: for subnormal values it is 2^-1022).
#[inline]
fn norm_scale(max_abs: f64) -> f64 {
    pow2(exponent(max_abs))
}

/// Magnitudes in which products of two values, and sums of 2^32 such products, neither
/// underflow (below 2^-1022 they would lose bits, as subnormals) nor overflow.
const SAFE_MAGNITUDES: std::ops::RangeInclusive<f64> = pow2(-500)..=pow2(500);

/// The power of two by which to multiply values whose largest magnitude is `max_abs` before
/// products and sums, so that tiny (subnormal) and huge (near 1e308) values are computed
/// with full precision: 1 for magnitudes in 2^-500 ..= 2^500 (all ordinary data, which is
/// then computed exactly as without it), else the power that brings `max_abs` near 1 (at
/// most 2^1022, which takes the smallest subnormals to 2^-52).
/// Multiplying by a power of two is exact (up to values that become subnormal, which are
/// then below 2^-1000 of the largest), and Pearson r and cosine do not depend on it.
#[inline]
pub fn magnitude_scale(max_abs: f64) -> f64 {
    if max_abs == 0.0 || !max_abs.is_finite() || SAFE_MAGNITUDES.contains(&max_abs) {
        1.0
    } else {
        pow2((-exponent(max_abs)).max(-1022))
    }
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
    robust_norm_slice_with_max(values, max_abs_slice(values))
}

crate::simd::widest! {
/// The largest |v| of a long slice of finite values (0 when empty), in eight lanes. (A
/// comparison, not `f64::max`, whose NaN rule costs a blend per value.)
pub fn max_abs_slice(values: &[f64]) -> f64 {
    let larger = |acc: f64, v: f64| if v > acc { v } else { acc };
    lanes(values, 0.0, |acc, v| larger(acc, v.abs()), larger)
}

/// [`robust_norm_slice`] when the largest |v| is already known.
pub fn robust_norm_slice_with_max(values: &[f64], max_abs: f64) -> f64 {
    scaled_norm(max_abs, |inv| {
        lanes(
            values,
            0.0,
            |acc, v| acc + (v * inv) * (v * inv),
            |a, b| a + b,
        )
    })
}
}

/// ([`lane_sum`], [`max_abs_slice`]) of a long slice in one pass: the same lanes, so the
/// same bits.
pub fn sum_and_max_abs(values: &[f64]) -> (f64, f64) {
    let whole = values.len() - values.len() % 8;
    #[cfg(target_arch = "x86_64")]
    let lanes = if crate::simd::has_avx512() {
        // SAFETY: the CPU has AVX-512F (checked just before).
        unsafe { avx512::sum_and_max_abs_lanes(&values[..whole]) }
    } else {
        sum_and_max_abs_lanes(&values[..whole])
    };
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = sum_and_max_abs_lanes(&values[..whole]);
    finish_sum_and_max_abs(lanes, &values[whole..])
}

/// [`sum_and_max_abs`] of a float32 or float64 `column` widened into `out` (as `as f64`
/// does), in the pass that copies it: the same bits as copying first. None, with nothing
/// written, for other element types or on a CPU without AVX-512.
pub fn widen_with_sum_and_max_abs<E: Element>(column: &[E], out: &mut [f64]) -> Option<(f64, f64)> {
    assert_eq!(
        column.len(),
        out.len(),
        "a copy's two slices differ in length"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx512() {
        let whole = column.len() - column.len() % 8;
        let lanes = if let Some(column) = E::as_f32(column) {
            // SAFETY: the CPU has AVX-512F (checked above).
            unsafe { avx512::widen_sum_and_max_abs_lanes_f32(&column[..whole], &mut out[..whole]) }
        } else if let Some(column) = E::as_f64(column) {
            // SAFETY: as above.
            unsafe { avx512::widen_sum_and_max_abs_lanes_f64(&column[..whole], &mut out[..whole]) }
        } else {
            return None;
        };
        for (o, v) in out[whole..].iter_mut().zip(&column[whole..]) {
            *o = v.to_f64();
        }
        return Some(finish_sum_and_max_abs(lanes, &out[whole..]));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = out; // only the AVX-512 lanes widen and sum in one pass
    None
}

/// The lanes of [`sum_and_max_abs`] with the values past the whole groups of eight added
/// (value j of `tail` into lane j), combined.
fn finish_sum_and_max_abs((mut sum, mut max): ([f64; 8], [f64; 8]), tail: &[f64]) -> (f64, f64) {
    let larger = |acc: f64, v: f64| if v > acc { v } else { acc };
    for (j, &v) in tail.iter().enumerate() {
        sum[j] += v;
        max[j] = larger(max[j], v.abs());
    }
    (combine_lanes(sum, |a, b| a + b), combine_lanes(max, larger))
}

/// The values a centring pass reads and where their centred values go.
enum Centring<'a> {
    /// From the first slice into the second, of the same length.
    Apart(&'a [f64], &'a mut [f64]),
    /// Over the values themselves: a pass that writes no second buffer.
    InPlace(&'a mut [f64]),
}

impl Centring<'_> {
    /// (source, destination, length): the two pointers are equal or their ranges disjoint.
    fn raw(&mut self) -> (*const f64, *mut f64, usize) {
        match self {
            Centring::Apart(a, out) => {
                assert_eq!(
                    a.len(),
                    out.len(),
                    "a centring's two slices differ in length"
                );
                (a.as_ptr(), out.as_mut_ptr(), a.len())
            }
            Centring::InPlace(values) => {
                // one pointer for both, so that the read and the write share a provenance
                let p = values.as_mut_ptr();
                (p.cast_const(), p, values.len())
            }
        }
    }

    /// Where the centred values are.
    fn centred(&self) -> &[f64] {
        match self {
            Centring::Apart(_, out) => out,
            Centring::InPlace(values) => values,
        }
    }
}

/// The centred values `a - mean` (see [`Centring`]) and, in the same pass, the lanes of: the
/// squares of `a * inv`, the centred values, their largest magnitude, their squares, and
/// their smallest magnitude other than 0 (for [`centred_moments`]).
fn centre_and_fold(io: &mut Centring<'_>, mean: f64, inv: f64) -> [f64; 5] {
    let (src, dst, len) = io.raw();
    let whole = len - len % 8;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `raw` gives `len` values at both pointers, the same or disjoint; the lanes read
    // each group of 8 before writing it.
    let lanes = unsafe {
        if crate::simd::has_avx512() {
            // (the CPU has AVX-512F: checked just before)
            avx512::centre_and_fold_lanes(src, dst, whole, mean, inv)
        } else {
            centre_and_fold_lanes(src, dst, whole, mean, inv)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    let lanes = unsafe { centre_and_fold_lanes(src, dst, whole, mean, inv) };
    let [mut a_squares, mut sum, mut max, mut squares, mut min] = lanes;
    let larger = |acc: f64, v: f64| if v > acc { v } else { acc };
    for j in 0..len - whole {
        // SAFETY: whole + j < len; the value is read before it is written.
        let v = unsafe { src.add(whole + j).read() };
        let c = v - mean;
        // SAFETY: as above.
        unsafe { dst.add(whole + j).write(c) };
        a_squares[j] += (v * inv) * (v * inv);
        sum[j] += c;
        max[j] = larger(max[j], c.abs());
        squares[j] += c * c;
        min[j] = smaller_nonzero(min[j], c.abs());
    }
    let least = |x: f64, y: f64| if y < x { y } else { x };
    [
        combine_lanes(a_squares, |x, y| x + y),
        combine_lanes(sum, |x, y| x + y),
        combine_lanes(max, larger),
        combine_lanes(squares, |x, y| x + y),
        combine_lanes(min, least),
    ]
}

/// The smaller of `acc` and a magnitude `v`, ignoring `v` = 0.
#[inline(always)]
fn smaller_nonzero(acc: f64, v: f64) -> f64 {
    if v != 0.0 && v < acc {
        v
    } else {
        acc
    }
}

crate::simd::widest! {
/// The lanes of [`sum_and_max_abs`] over whole groups of eight (portable).
fn sum_and_max_abs_lanes(values: &[f64]) -> ([f64; 8], [f64; 8]) {
    let larger = |acc: f64, v: f64| if v > acc { v } else { acc };
    let (mut sum, mut max) = ([0.0; 8], [0.0; 8]);
    for c in values.chunks_exact(8) {
        for j in 0..8 {
            sum[j] += c[j];
            max[j] = larger(max[j], c[j].abs());
        }
    }
    (sum, max)
}

/// The lanes of [`centre_and_fold`] over `len` values, a multiple of eight (portable).
///
/// # Safety
/// `src` and `dst` hold `len` values each and are equal or do not overlap.
unsafe fn centre_and_fold_lanes(
    src: *const f64,
    dst: *mut f64,
    len: usize,
    mean: f64,
    inv: f64,
) -> [[f64; 8]; 5] {
    let larger = |acc: f64, v: f64| if v > acc { v } else { acc };
    let (mut a_squares, mut sum, mut max, mut squares) = ([0.0; 8], [0.0; 8], [0.0; 8], [0.0; 8]);
    let mut min = [f64::INFINITY; 8];
    for k in (0..len).step_by(8) {
        // SAFETY: k + 8 <= len; a group is read whole before any of it is written.
        let x: [f64; 8] = unsafe { src.add(k).cast::<[f64; 8]>().read_unaligned() };
        let mut out = [0.0; 8];
        for j in 0..8 {
            let c = x[j] - mean;
            out[j] = c;
            a_squares[j] += (x[j] * inv) * (x[j] * inv);
            sum[j] += c;
            max[j] = larger(max[j], c.abs());
            squares[j] += c * c;
            min[j] = smaller_nonzero(min[j], c.abs());
        }
        // SAFETY: as above.
        unsafe { dst.add(k).cast::<[f64; 8]>().write_unaligned(out) };
    }
    [a_squares, sum, max, squares, min]
}
}

/// The same lanes with one AVX-512 vector per accumulator (lane j of a vector is lane j of
/// the portable version's arrays; no multiply is fused with an add), which the compiler does
/// not find on its own.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lanes_of(v: __m512d) -> [f64; 8] {
        let mut out = [0.0; 8];
        // SAFETY: `out` holds 8 doubles; unaligned stores are allowed.
        unsafe { _mm512_storeu_pd(out.as_mut_ptr(), v) };
        out
    }

    /// Defines `$name`: [`sum_and_max_abs_lanes`] of a column of `$elem` widened (`$load`
    /// turns the pointer `$p` to a group of 8 into one vector), each group stored into `out`
    /// as it is added. One body for the float32 and float64 twins, which differ in the load.
    macro_rules! widen_sum_and_max_abs_lanes {
        ($name:ident, $elem:ty, |$p:ident| $load:expr) => {
            #[target_feature(enable = "avx512f")]
            pub(super) fn $name(column: &[$elem], out: &mut [f64]) -> ([f64; 8], [f64; 8]) {
                let (mut sum, mut max) = (_mm512_setzero_pd(), _mm512_setzero_pd());
                for (c, o) in column.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
                    let $p = c.as_ptr();
                    // SAFETY: the groups hold 8 values each; unaligned access is allowed.
                    let v = unsafe { $load };
                    // SAFETY: as above.
                    unsafe { _mm512_storeu_pd(o.as_mut_ptr(), v) };
                    sum = _mm512_add_pd(sum, v);
                    max = _mm512_max_pd(_mm512_abs_pd(v), max);
                }
                (lanes_of(sum), lanes_of(max))
            }
        };
    }
    widen_sum_and_max_abs_lanes!(widen_sum_and_max_abs_lanes_f32, f32, |p| {
        _mm512_cvtps_pd(_mm256_loadu_ps(p))
    });
    widen_sum_and_max_abs_lanes!(widen_sum_and_max_abs_lanes_f64, f64, |p| _mm512_loadu_pd(p));

    #[target_feature(enable = "avx512f")]
    pub(super) fn sum_and_max_abs_lanes(values: &[f64]) -> ([f64; 8], [f64; 8]) {
        let (mut sum, mut max) = (_mm512_setzero_pd(), _mm512_setzero_pd());
        for c in values.chunks_exact(8) {
            // SAFETY: the group holds 8 doubles; unaligned loads are allowed.
            let v = unsafe { _mm512_loadu_pd(c.as_ptr()) };
            sum = _mm512_add_pd(sum, v);
            // max(x, acc) is x when x > acc, else acc: `larger`
            max = _mm512_max_pd(_mm512_abs_pd(v), max);
        }
        (lanes_of(sum), lanes_of(max))
    }

    /// # Safety
    /// As the portable version's, on a CPU with AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn centre_and_fold_lanes(
        src: *const f64,
        dst: *mut f64,
        len: usize,
        mean: f64,
        inv: f64,
    ) -> [[f64; 8]; 5] {
        let (m, scale) = (_mm512_set1_pd(mean), _mm512_set1_pd(inv));
        let zero = _mm512_setzero_pd();
        let (mut a_squares, mut sum, mut max, mut squares) = (zero, zero, zero, zero);
        let mut min = _mm512_set1_pd(f64::INFINITY);
        for k in (0..len).step_by(8) {
            // SAFETY: k + 8 <= len at both pointers; the group is loaded before it is
            // stored; unaligned loads and stores are allowed.
            let v = unsafe { _mm512_loadu_pd(src.add(k)) };
            let c = _mm512_sub_pd(v, m);
            // SAFETY: as above.
            unsafe { _mm512_storeu_pd(dst.add(k), c) };
            let s = _mm512_mul_pd(v, scale);
            a_squares = _mm512_add_pd(a_squares, _mm512_mul_pd(s, s));
            sum = _mm512_add_pd(sum, c);
            let magnitude = _mm512_abs_pd(c);
            max = _mm512_max_pd(magnitude, max);
            squares = _mm512_add_pd(squares, _mm512_mul_pd(c, c));
            let smaller = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(magnitude, min)
                & _mm512_cmp_pd_mask::<_CMP_NEQ_OQ>(magnitude, zero);
            min = _mm512_mask_blend_pd(smaller, min, magnitude);
        }
        [
            lanes_of(a_squares),
            lanes_of(sum),
            lanes_of(max),
            lanes_of(squares),
            lanes_of(min),
        ]
    }
}

/// For a slice `a` that is not constant, with mean `mean` and largest magnitude `max_abs`
/// (finite): writes `a - mean` into `centred` and returns (||a||, the sum of the centred
/// values, ||a - mean||), bit for bit [`robust_norm_slice_with_max`]`(a, max_abs)`,
/// [`lane_sum`] and [`robust_norm_slice`] of the centred values, in one pass over `a` in
/// the usual case. The centred norm's squares are summed unscaled there: scaling by a
/// power of two commutes with every rounding while no square, sum or root leaves the
/// normal range on either side, which the pass's smallest and largest magnitudes show
/// (else a second pass sums the scaled squares as usual).
pub fn centred_moments(
    a: &[f64],
    mean: f64,
    max_abs: f64,
    centred: &mut Vec<f64>,
) -> (f64, f64, f64) {
    resize_for_overwrite(centred, a.len());
    moments_of(Centring::Apart(a, centred), mean, max_abs)
}

/// [`centred_moments`] with `values` centred in place: the same bits, one buffer fewer.
pub fn centred_moments_in_place(values: &mut [f64], mean: f64, max_abs: f64) -> (f64, f64, f64) {
    moments_of(Centring::InPlace(values), mean, max_abs)
}

/// The moments of [`centred_moments`], the centred values written as `io` says.
fn moments_of(mut io: Centring<'_>, mean: f64, max_abs: f64) -> (f64, f64, f64) {
    let a_scale = if max_abs == 0.0 || !max_abs.is_finite() {
        1.0
    } else {
        norm_scale(max_abs)
    };
    let [a_squares, sum, max, squares, min] = centre_and_fold(&mut io, mean, 1.0 / a_scale);
    let norm = scaled_norm(max_abs, |_| a_squares);
    let centred = io.centred();
    let centred_norm = if max == 0.0 {
        0.0
    } else {
        // squares of magnitudes in [2^-500 max(1, scale), 2^480] stay normal scaled and
        // unscaled, and 2^32 of them stay finite
        let scale = norm_scale(max);
        let lowest = pow2(-500) * scale.max(1.0);
        if max <= pow2(480) && min >= lowest && centred.len() < 1 << 32 {
            squares.sqrt()
        } else {
            robust_norm_slice_with_max(centred, max)
        }
    };
    (norm, sum, centred_norm)
}

/// Combines eight lanes pairwise, as [`lanes`] does.
#[inline(always)]
fn combine_lanes(acc: [f64; 8], combine: impl Fn(f64, f64) -> f64) -> f64 {
    let q = [
        combine(acc[0], acc[4]),
        combine(acc[1], acc[5]),
        combine(acc[2], acc[6]),
        combine(acc[3], acc[7]),
    ];
    combine(combine(q[0], q[2]), combine(q[1], q[3]))
}

/// sqrt(sum of (x / scale)^2) * scale for the power-of-two scale of `max_abs`; the closure
/// gets 1 / scale and returns the sum.
#[inline(always)]
pub(crate) fn scaled_norm(max_abs: f64, scaled_square_sum: impl FnOnce(f64) -> f64) -> f64 {
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

/// The sum of `v - shift` over a long slice, in eight lanes.
pub fn shifted_lane_sum(values: &[f64], shift: f64) -> f64 {
    lanes(values, 0.0, |acc, v| acc + (v - shift), |a, b| a + b)
}

/// [`robust_norm`] of `v - shift` over a long slice plus `extra_count` copies of `extra`:
/// the largest magnitude and the scaled squares each in eight lanes.
pub fn robust_norm_shifted_slice(values: &[f64], shift: f64, extra: f64, extra_count: usize) -> f64 {
    let larger = |acc: f64, v: f64| if v > acc { v } else { acc };
    let mut max = lanes(values, 0.0, |acc, v| larger(acc, (v - shift).abs()), larger);
    if extra_count > 0 {
        max = max.max(extra.abs());
    }
    scaled_norm(max, |inv| {
        let e = extra * inv;
        let square = |acc: f64, v: f64| {
            let s = (v - shift) * inv;
            acc + s * s
        };
        lanes(values, 0.0, square, |a, b| a + b) + extra_count as f64 * e * e
    })
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
    combine_lanes(acc, combine)
}

/// Gives `v` length `n` for a caller that writes every element before reading any: a vector
/// reused keeps its stale contents instead of being cleared, and only elements past its old
/// length are written (the sorts and rankings of a block's units, sparse ones of a different
/// length each, would otherwise zero megabytes each).
pub(crate) fn resize_for_overwrite<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() > n {
        v.truncate(n);
    } else {
        v.resize(n, T::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_magnitudes_are_not_rescaled() {
        for v in [1.0, 0.3, 1e-150, 1e150, 2f64.powi(-500), 2f64.powi(500)] {
            assert_eq!(magnitude_scale(v), 1.0, "{v}");
        }
        assert_eq!(magnitude_scale(0.0), 1.0);
    }

    #[test]
    fn tiny_and_huge_magnitudes_are_brought_near_one_by_a_power_of_two() {
        for v in [5e-324, 1e-310, 2.2e-308, 1e-200, 1e200, 1e308, f64::MAX] {
            let s = magnitude_scale(v);
            let scaled = v * s;
            // near 1; the smallest subnormals only to 2^-52 (the scale is at most 2^1022)
            let low = if v < 1e-300 { 2f64.powi(-53) } else { 0.5 };
            assert!(
                (low..4.0).contains(&scaled),
                "{v} scaled by {s} is {scaled}"
            );
            assert_eq!(s.to_bits() & ((1u64 << 52) - 1), 0, "{s} is a power of two");
        }
    }

    /// The one-pass moments against the passes they replace, bit for bit: ordinary values,
    /// values whose centred squares would leave the normal range (tiny differences from the
    /// mean, magnitudes near 2^500), exact zeros after centring, and every remainder length.
    #[test]
    fn one_pass_moments_match_separate_passes() {
        let mut state = 11u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut cases: Vec<Vec<f64>> = Vec::new();
        for n in [2usize, 3, 7, 8, 9, 17, 1000] {
            cases.push((0..n).map(|_| next() - 0.3).collect());
            cases.push(
                (0..n)
                    .map(|_| ((next() - 0.5) as f32) as f64 * 1e6)
                    .collect(),
            );
            cases.push((0..n).map(|i| if i % 3 == 0 { 1.0 } else { 2.0 }).collect());
            cases.push(
                (0..n)
                    .map(|i| 1.0 + (i % 2) as f64 * 2f64.powi(-52))
                    .collect(),
            );
            cases.push((0..n).map(|_| (next() - 0.5) * 2f64.powi(495)).collect());
            cases.push((0..n).map(|_| (next() - 0.5) * 2f64.powi(-490)).collect());
            cases.push(
                (0..n)
                    .map(|i| if i == 0 { 1e-300 } else { 3e-300 })
                    .collect(),
            );
            cases.push((0..n).map(|i| if i == 1 { 5.0 } else { 0.0 }).collect());
        }
        for a in &cases {
            let (sum, max_abs) = sum_and_max_abs(a);
            assert_eq!(sum.to_bits(), lane_sum(a).to_bits());
            assert_eq!(max_abs.to_bits(), max_abs_slice(a).to_bits());
            let mean = sum / a.len() as f64;
            let mut centred = vec![9.0; 3];
            let (norm, centred_sum, centred_norm) = centred_moments(a, mean, max_abs, &mut centred);
            let want: Vec<f64> = a.iter().map(|v| v - mean).collect();
            assert_eq!(centred, want);
            assert_eq!(
                norm.to_bits(),
                robust_norm_slice_with_max(a, max_abs).to_bits()
            );
            assert_eq!(centred_sum.to_bits(), lane_sum(&want).to_bits());
            assert_eq!(
                centred_norm.to_bits(),
                robust_norm_slice(&want).to_bits(),
                "{a:?}"
            );
            // in place: the same moments, and the centred values where `a` was
            let mut in_place = a.clone();
            let moments = centred_moments_in_place(&mut in_place, mean, max_abs);
            let bits = |m: (f64, f64, f64)| [m.0.to_bits(), m.1.to_bits(), m.2.to_bits()];
            assert_eq!(bits(moments), bits((norm, centred_sum, centred_norm)));
            assert_eq!(in_place, want);
            // the portable lanes and the intrinsics' agree
            #[cfg(target_arch = "x86_64")]
            if crate::simd::has_avx512() {
                let whole = a.len() - a.len() % 8;
                let bits = |l: &[f64; 8]| l.map(f64::to_bits);
                let portable = sum_and_max_abs_lanes(&a[..whole]);
                // SAFETY: the CPU has AVX-512F (checked above).
                let wide = unsafe { avx512::sum_and_max_abs_lanes(&a[..whole]) };
                assert_eq!(
                    (bits(&portable.0), bits(&portable.1)),
                    (bits(&wide.0), bits(&wide.1))
                );
                let (mut c1, mut c2) = (vec![0.0; whole], a[..whole].to_vec());
                // SAFETY: `a` and `c1` hold `whole` values and are disjoint; `c2` is read and
                // written in place.
                let portable =
                    unsafe { centre_and_fold_lanes(a.as_ptr(), c1.as_mut_ptr(), whole, mean, 0.5) };
                let p = c2.as_mut_ptr();
                // SAFETY: as above, and the CPU has AVX-512F (checked above).
                let wide = unsafe { avx512::centre_and_fold_lanes(p, p, whole, mean, 0.5) };
                assert_eq!(portable.map(|l| bits(&l)), wide.map(|l| bits(&l)));
                assert_eq!(c1, c2);
            }
        }
    }

    #[test]
    fn norms_of_subnormal_and_huge_values() {
        // once 1 / 2^-1031 = inf made these NaN
        let tiny = [1e-310, 0.0, -3e-310, 5e-324];
        let want = (1e-310f64 * 2f64.powi(1000)).hypot(3e-310 * 2f64.powi(1000)) / 2f64.powi(1000);
        assert!((robust_norm_slice(&tiny) - want).abs() <= 1e-15 * want);
        assert!((robust_norm(tiny.iter().copied(), 0.0, 0) - want).abs() <= 1e-15 * want);
        let huge = [1e308, -1e308, 0.5e308];
        let want = 1.5 * 1e308;
        assert!((robust_norm_slice(&huge) - want).abs() <= 1e-15 * want);
        assert_eq!(robust_norm_slice(&[0.0, 0.0]), 0.0);
    }

    /// The shifted sums in lanes against the same sums in one pass (float64 rounding apart):
    /// lengths around the eight lanes, magnitudes near both ends of the range, and the
    /// closed-form extra terms of a sparse unit's zeros.
    #[test]
    fn shifted_lane_sums_match_a_plain_pass() {
        let mut rng = crate::rng::SplitMix64::new(11);
        let mut next = || rng.next_f64() - 0.5;
        for magnitude in [1e-300, 1.0, 1e300] {
            for len in [0, 1, 7, 8, 9, 100, 1001] {
                let values: Vec<f64> = (0..len).map(|_| next() * magnitude).collect();
                let shift = 0.1 * magnitude;
                let (extra, count) = (-shift, 5);
                let sum: f64 = values.iter().map(|v| v - shift).sum();
                let ours = shifted_lane_sum(&values, shift);
                assert!(
                    (ours - sum).abs() <= 1e-12 * magnitude * len.max(1) as f64,
                    "{ours} {sum}"
                );
                let want = robust_norm(values.iter().map(|v| v - shift), extra, count);
                let got = robust_norm_shifted_slice(&values, shift, extra, count);
                assert!(
                    (got - want).abs() <= 1e-14 * want,
                    "{magnitude} {len}: {got} vs {want}"
                );
                assert!(got.is_finite() && got > 0.0);
                let bare = robust_norm_shifted_slice(&values, 0.0, 0.0, 0);
                assert_eq!(bare.to_bits(), robust_norm_slice(&values).to_bits());
            }
        }
    }
}
