//! Numeric helpers of the transforms: norms without overflow, sums in a fixed lane order,
//! and reusable buffers.

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

/// Gives `v` length `n` for a caller that writes every element before reading any: a vector
/// reused at the same length keeps its stale contents instead of being cleared (the sorts
/// and rankings of a block's units would otherwise zero megabytes each).
pub(crate) fn resize_for_overwrite<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, T::default());
    }
}
