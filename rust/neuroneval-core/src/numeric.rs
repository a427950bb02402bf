//! Numeric helpers of the transforms: norms without overflow, sums in a fixed lane order,
//! and reusable buffers.

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
/// The largest |v| of a long slice (0 when empty), in eight lanes.
pub fn max_abs_slice(values: &[f64]) -> f64 {
    lanes(values, 0.0, |acc, v| acc.max(v.abs()), f64::max)
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

/// Gives `v` length `n` for a caller that writes every element before reading any: a vector
/// reused at the same length keeps its stale contents instead of being cleared (the sorts
/// and rankings of a block's units would otherwise zero megabytes each).
pub(crate) fn resize_for_overwrite<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() != n {
        v.clear();
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
}
