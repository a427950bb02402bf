//! The column kernels written with intrinsics, for each instruction set: counting and
//! compacting a column's nonzeros, and transposing 8 x 8 tiles of doubles. Each dispatcher
//! takes AVX-512 where the CPU has it, else AVX2, else returns what tells the caller to use
//! its portable loop; every version writes the same values (a property test per kernel
//! compares each version the CPU runs with the portable loop).

use crate::matrix::Element;
use std::mem::MaybeUninit;

/// Where a compaction writes a column's nonzeros: their rows and their widened values, in
/// memory it need not have been initialised (a vector's spare capacity).
pub(crate) type Rows = [MaybeUninit<u32>];
pub(crate) type Values = [MaybeUninit<f64>];

/// The number of values != 0 (NaN included) of a column.
pub(crate) fn count_nonzeros<E: Element>(column: &[E]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let counted = if avx512::available() {
            // SAFETY: the CPU has AVX-512F and POPCNT (checked above).
            unsafe { avx512::count(column) }
        } else if avx2::available() {
            // SAFETY: the CPU has AVX2, F16C and POPCNT (checked above).
            unsafe { avx2::count(column) }
        } else {
            None
        };
        if let Some(count) = counted {
            return count;
        }
    }
    count_portable(column)
}

/// [`count_nonzeros`] one value at a time.
fn count_portable<E: Element>(column: &[E]) -> usize {
    column.iter().filter(|v| v.to_f64() != 0.0).count()
}

/// Room past a column's nonzeros that its compaction may write (one vector of 16).
pub(crate) const COMPACT_SLACK: usize = 16;

/// The nonzero (or NaN) values of a float16, float32 or float64 column, widened, into
/// `values` and their rows (`first_row` + position) into `rows`, by vector compaction:
/// returns how many, or None (nothing written) for other element types or CPUs without
/// AVX2. Both slices must hold that count plus [`COMPACT_SLACK`].
pub(crate) fn compact_wide<E: Element>(
    column: &[E],
    first_row: u32,
    rows: &mut Rows,
    values: &mut Values,
) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512::available() {
            // SAFETY: the CPU has AVX-512F and POPCNT (checked above).
            return unsafe { avx512::compact(column, first_row, rows, values) };
        } else if avx2::available() {
            // SAFETY: the CPU has AVX2, F16C and POPCNT (checked above).
            return unsafe { avx2::compact(column, first_row, rows, values) };
        }
    }
    let _ = (column, first_row, rows, values);
    None
}

/// The values of a column's last part group one at a time, after `kept` already written;
/// returns the new count.
fn compact_tail<E: Element>(
    tail: &[E],
    first_row: u32,
    rows: &mut Rows,
    values: &mut Values,
    mut kept: usize,
) -> usize {
    for (j, &v) in tail.iter().enumerate() {
        let v = v.to_f64();
        if v != 0.0 {
            rows[kept].write(first_row + j as u32);
            values[kept].write(v);
            kept += 1;
        }
    }
    kept
}

/// Copies the first 8 * b columns of an 8-row `tile` (rows of `width` values) into `out`
/// (column j at `out[j * out_rows..][..8]`), 8 columns at a time, on a CPU with AVX-512F or
/// AVX2; returns b (0 elsewhere: the caller copies the rest).
pub(crate) fn transposed_blocks(
    tile: &[f64],
    width: usize,
    out: &mut [f64],
    out_rows: usize,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let wide = avx512::available();
        if wide || avx2::available() {
            for b in 0..width / 8 {
                let (tile, out) = (&tile[8 * b..], &mut out[8 * b * out_rows..]);
                // SAFETY: the CPU has AVX-512F, or AVX2 (checked above).
                unsafe {
                    if wide {
                        avx512::transpose_8x8(tile, width, out, out_rows)
                    } else {
                        avx2::transpose_8x8(tile, width, out, out_rows)
                    }
                };
            }
            return width / 8;
        }
    }
    let _ = (tile, width, out, out_rows);
    0
}

/// The dispatchers of one instruction set's module, compiled with its `features`: its
/// kernel for the column's element type, None for other types.
macro_rules! dispatchers {
    ($features:literal) => {
        /// [`super::count_nonzeros`] of a float16, float32 or float64 column.
        #[target_feature(enable = $features)]
        pub(super) fn count<E: crate::matrix::Element>(column: &[E]) -> Option<usize> {
            if let Some(column) = E::as_f32(column) {
                Some(count_f32(column))
            } else if let Some(column) = E::as_f64(column) {
                Some(count_f64(column))
            } else {
                E::as_f16(column).map(|column| count_f16(column))
            }
        }

        /// [`super::compact_wide`] (nothing written for other element types).
        #[target_feature(enable = $features)]
        pub(super) fn compact<E: crate::matrix::Element>(
            column: &[E],
            first_row: u32,
            rows: &mut Rows,
            values: &mut Values,
        ) -> Option<usize> {
            if let Some(column) = E::as_f32(column) {
                Some(compact_f32(column, first_row, rows, values))
            } else if let Some(column) = E::as_f64(column) {
                Some(compact_f64(column, first_row, rows, values))
            } else {
                E::as_f16(column).map(|column| compact_f16(column, first_row, rows, values))
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Rows, Values};
    use std::arch::x86_64::*;

    dispatchers!("avx512f,popcnt");

    /// Whether the CPU runs this module's functions.
    #[inline]
    pub(super) fn available() -> bool {
        crate::simd::has_avx512()
    }

    /// 16 halves widened to floats by the CPU (exactly).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_f16(group: &[half::f16]) -> __m512 {
        assert!(group.len() >= 16);
        // SAFETY: the group holds at least 16 halves (32 bytes); unaligned loads are allowed.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(group.as_ptr() as *const __m256i) })
    }

    /// The lanes of 16 floats that are != 0 or NaN (unordered: `!= 0.0` keeps a NaN).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn keep_f32(v: __m512) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(v, _mm512_setzero_ps())
    }

    /// The number of values != 0 (NaN included) in a float32 column.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn count_f32(column: &[f32]) -> usize {
        let mut groups = column.chunks_exact(16);
        let mut count = 0;
        for group in &mut groups {
            // SAFETY: the group holds 16 floats; unaligned loads are allowed.
            count += keep_f32(unsafe { _mm512_loadu_ps(group.as_ptr()) }).count_ones() as usize;
        }
        count + super::count_portable(groups.remainder())
    }

    /// The number of values != 0 (NaN included) in a float16 column.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn count_f16(column: &[half::f16]) -> usize {
        let mut groups = column.chunks_exact(16);
        let mut count = 0;
        for group in &mut groups {
            count += keep_f32(load_f16(group)).count_ones() as usize;
        }
        count + super::count_portable(groups.remainder())
    }

    /// The number of values != 0 (NaN included) in a float64 column.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn count_f64(column: &[f64]) -> usize {
        let mut groups = column.chunks_exact(8);
        let mut count = 0;
        for group in &mut groups {
            // SAFETY: the group holds 8 doubles; unaligned loads are allowed.
            let v = unsafe { _mm512_loadu_pd(group.as_ptr()) };
            count +=
                _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(v, _mm512_setzero_pd()).count_ones() as usize;
        }
        count + super::count_portable(groups.remainder())
    }

    /// Copies the 8 x 8 block of doubles at `tile` (row r at `tile[r * width..][..8]`) into 8
    /// columns: column c's 8 values (the block's column c, rows in order) at
    /// `out[c * out_rows..][..8]`. In registers: one load and one store per row, where an
    /// element-wise copy makes 64 scattered stores.
    #[target_feature(enable = "avx512f")]
    pub(super) fn transpose_8x8(tile: &[f64], width: usize, out: &mut [f64], out_rows: usize) {
        assert!(tile.len() >= 7 * width + 8 && out.len() >= 7 * out_rows + 8);
        // SAFETY: the assert bounds every load (row r < 8 reads tile[r * width..][..8]) and
        // every store (column c < 8 writes out[c * out_rows..][..8]); unaligned access is
        // allowed.
        unsafe {
            let row = |r: usize| _mm512_loadu_pd(tile.as_ptr().add(r * width));
            // pairs of rows interleaved: t[2p] holds rows 2p, 2p+1 at even columns, t[2p+1] at odd
            let mut t = [_mm512_setzero_pd(); 8];
            for p in 0..4 {
                let (a, b) = (row(2 * p), row(2 * p + 1));
                t[2 * p] = _mm512_unpacklo_pd(a, b);
                t[2 * p + 1] = _mm512_unpackhi_pd(a, b);
            }
            // four rows per vector: u[4h + q] holds columns (c, c + 4) of rows 4h..4h + 4, for
            // c = 0, 2, 1, 3 as q = 0, 1, 2, 3
            let low = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
            let high = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
            let mut u = [_mm512_setzero_pd(); 8];
            for h in 0..2 {
                let (even, odd) = (4 * h, 4 * h + 1);
                u[4 * h] = _mm512_permutex2var_pd(t[even], low, t[even + 2]);
                u[4 * h + 1] = _mm512_permutex2var_pd(t[even], high, t[even + 2]);
                u[4 * h + 2] = _mm512_permutex2var_pd(t[odd], low, t[odd + 2]);
                u[4 * h + 3] = _mm512_permutex2var_pd(t[odd], high, t[odd + 2]);
            }
            let mut store =
                |c: usize, v: __m512d| _mm512_storeu_pd(out.as_mut_ptr().add(c * out_rows), v);
            for (q, c) in [0, 2, 1, 3].into_iter().enumerate() {
                store(c, _mm512_shuffle_f64x2::<0x44>(u[q], u[q + 4]));
                store(c + 4, _mm512_shuffle_f64x2::<0xEE>(u[q], u[q + 4]));
            }
        }
    }

    /// The rows of 16 consecutive values from `first`.
    #[inline]
    #[target_feature(enable = "avx512f,popcnt")]
    fn row_numbers(first: u32) -> __m512i {
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        _mm512_add_epi32(lanes, _mm512_set1_epi32(first as i32))
    }

    /// Writes the kept rows of a group of 16 (`keep`: lanes != 0 or NaN) and its two halves
    /// of widened values at `kept`; returns the new count.
    #[inline]
    #[target_feature(enable = "avx512f,popcnt")]
    fn store_group(
        keep: __mmask16,
        row: __m512i,
        low: __m512d,
        high: __m512d,
        rows: &mut Rows,
        values: &mut Values,
        kept: usize,
    ) -> usize {
        let (keep_low, keep_high) = (keep as u8, (keep >> 8) as u8);
        let low_count = keep_low.count_ones() as usize;
        let rows = &mut rows[kept..kept + 16];
        let values = &mut values[kept..kept + 16];
        // SAFETY: each store writes 16 u32 or 8 f64 into a slice that long or longer
        // (bounds checked just above); unaligned stores are allowed.
        unsafe {
            _mm512_storeu_si512(
                rows.as_mut_ptr() as *mut __m512i,
                _mm512_maskz_compress_epi32(keep, row),
            );
            _mm512_storeu_pd(
                values.as_mut_ptr().cast(),
                _mm512_maskz_compress_pd(keep_low, low),
            );
            _mm512_storeu_pd(
                values[low_count..low_count + 8].as_mut_ptr().cast(),
                _mm512_maskz_compress_pd(keep_high, high),
            );
        }
        kept + keep.count_ones() as usize
    }

    /// Compacts a group of 16 floats (`v`, rows from `first`) at `kept`, widened; returns
    /// the new count.
    #[inline]
    #[target_feature(enable = "avx512f,popcnt")]
    fn compact_16(
        v: __m512,
        first: u32,
        rows: &mut Rows,
        values: &mut Values,
        kept: usize,
    ) -> usize {
        let low = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        let high = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
            _mm512_castps_pd(v),
        )));
        store_group(
            keep_f32(v),
            row_numbers(first),
            low,
            high,
            rows,
            values,
            kept,
        )
    }

    /// [`super::compact_wide`] of float32 values (widened exactly, as `as f64` does).
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn compact_f32(
        column: &[f32],
        first_row: u32,
        rows: &mut Rows,
        values: &mut Values,
    ) -> usize {
        let mut kept = 0;
        let mut groups = column.chunks_exact(16);
        for (g, group) in (&mut groups).enumerate() {
            // SAFETY: the group holds 16 floats; unaligned loads are allowed.
            let v = unsafe { _mm512_loadu_ps(group.as_ptr()) };
            kept = compact_16(v, first_row + (g * 16) as u32, rows, values, kept);
        }
        let start = column.len() - groups.remainder().len();
        super::compact_tail(
            groups.remainder(),
            first_row + start as u32,
            rows,
            values,
            kept,
        )
    }

    /// [`super::compact_wide`] of float16 values: widened to float32 by the CPU (exactly, as
    /// [`crate::Element::to_f64`] widens them), then as [`compact_f32`].
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn compact_f16(
        column: &[half::f16],
        first_row: u32,
        rows: &mut Rows,
        values: &mut Values,
    ) -> usize {
        let mut kept = 0;
        let mut groups = column.chunks_exact(16);
        for (g, group) in (&mut groups).enumerate() {
            kept = compact_16(
                load_f16(group),
                first_row + (g * 16) as u32,
                rows,
                values,
                kept,
            );
        }
        let start = column.len() - groups.remainder().len();
        super::compact_tail(
            groups.remainder(),
            first_row + start as u32,
            rows,
            values,
            kept,
        )
    }

    /// [`super::compact_wide`] of float64 values.
    #[target_feature(enable = "avx512f,popcnt")]
    pub(super) fn compact_f64(
        column: &[f64],
        first_row: u32,
        rows: &mut Rows,
        values: &mut Values,
    ) -> usize {
        let mut kept = 0;
        let mut groups = column.chunks_exact(16);
        for (g, group) in (&mut groups).enumerate() {
            // SAFETY: the group holds 16 doubles; unaligned loads are allowed.
            let (low, high) = unsafe {
                (
                    _mm512_loadu_pd(group.as_ptr()),
                    _mm512_loadu_pd(group[8..].as_ptr()),
                )
            };
            let zero = _mm512_setzero_pd();
            let keep = _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(low, zero) as u16
                | (_mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(high, zero) as u16) << 8;
            let row = row_numbers(first_row + (g * 16) as u32);
            kept = store_group(keep, row, low, high, rows, values, kept);
        }
        let start = column.len() - groups.remainder().len();
        super::compact_tail(
            groups.remainder(),
            first_row + start as u32,
            rows,
            values,
            kept,
        )
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Rows, Values};
    use std::arch::x86_64::*;

    dispatchers!("avx2,f16c,popcnt");

    /// Whether the CPU runs this module's functions.
    #[inline]
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
            && std::arch::is_x86_feature_detected!("popcnt")
    }

    /// For each mask of 8 lanes, the kept lanes in order, then lane 0 (what lands past the
    /// kept count is overwritten by the next group or left in the slack).
    const KEEP_8: [[u32; 8]; 256] = keep_lanes(1);
    /// For each mask of 4 double lanes, the 32-bit lane pairs that move the kept ones first.
    const KEEP_4_PAIRS: [[u32; 8]; 16] = {
        let pairs = keep_lanes(2);
        let mut t = [[0; 8]; 16];
        let mut m = 0;
        while m < 16 {
            t[m] = pairs[m];
            m += 1;
        }
        t
    };

    /// The permutation tables above: each lane `width` 32-bit lanes wide (1 for floats, 2
    /// for doubles), 8 / `width` lanes to a vector.
    const fn keep_lanes(width: usize) -> [[u32; 8]; 256] {
        let mut table = [[0; 8]; 256];
        let mut mask = 0;
        while mask < 256 {
            let (mut kept, mut lane) = (0, 0);
            while lane < 8 / width {
                if mask >> lane & 1 == 1 {
                    let mut part = 0;
                    while part < width {
                        table[mask][kept * width + part] = (lane * width + part) as u32;
                        part += 1;
                    }
                    kept += 1;
                }
                lane += 1;
            }
            mask += 1;
        }
        table
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn lanes(table: &[u32; 8]) -> __m256i {
        // SAFETY: the table holds 8 u32 (32 bytes); unaligned loads are allowed.
        unsafe { _mm256_loadu_si256(table.as_ptr() as *const __m256i) }
    }

    /// 8 halves widened to floats by the CPU (exactly).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn load_f16(group: &[half::f16]) -> __m256 {
        assert!(group.len() >= 8);
        // SAFETY: the group holds at least 8 halves (16 bytes); unaligned loads are allowed.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(group.as_ptr() as *const __m128i) })
    }

    /// The lanes of 8 floats that are != 0 or NaN, as a mask.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn keep_f32(v: __m256) -> u32 {
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NEQ_UQ>(v, _mm256_setzero_ps())) as u32
    }

    /// The lanes of 4 doubles that are != 0 or NaN, as a mask.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn keep_f64(v: __m256d) -> u32 {
        _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_NEQ_UQ>(v, _mm256_setzero_pd())) as u32
    }

    /// The number of values != 0 (NaN included) in a float32 column.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn count_f32(column: &[f32]) -> usize {
        let mut groups = column.chunks_exact(8);
        let mut count = 0;
        for group in &mut groups {
            // SAFETY: the group holds 8 floats; unaligned loads are allowed.
            count += keep_f32(unsafe { _mm256_loadu_ps(group.as_ptr()) }).count_ones() as usize;
        }
        count + super::count_portable(groups.remainder())
    }

    /// The number of values != 0 (NaN included) in a float64 column.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn count_f64(column: &[f64]) -> usize {
        let mut groups = column.chunks_exact(4);
        let mut count = 0;
        for group in &mut groups {
            // SAFETY: the group holds 4 doubles; unaligned loads are allowed.
            count += keep_f64(unsafe { _mm256_loadu_pd(group.as_ptr()) }).count_ones() as usize;
        }
        count + super::count_portable(groups.remainder())
    }

    /// The number of values != 0 (NaN included) in a float16 column.
    #[target_feature(enable = "avx2,f16c,popcnt")]
    pub(super) fn count_f16(column: &[half::f16]) -> usize {
        let mut groups = column.chunks_exact(8);
        let mut count = 0;
        for group in &mut groups {
            count += keep_f32(load_f16(group)).count_ones() as usize;
        }
        count + super::count_portable(groups.remainder())
    }

    /// The rows of 8 consecutive values from `first`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn row_numbers(first: u32) -> __m256i {
        _mm256_add_epi32(
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            _mm256_set1_epi32(first as i32),
        )
    }

    /// Writes the kept rows of a group of 8 (`keep`, a mask of 8 lanes) at `kept`; returns
    /// the permutation that moved them first.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store_rows(keep: u32, row: __m256i, rows: &mut Rows, kept: usize) -> __m256i {
        let order = lanes(&KEEP_8[keep as usize]);
        let rows = &mut rows[kept..kept + 8];
        // SAFETY: the slice holds 8 u32 (bounds checked just above); unaligned stores are
        // allowed.
        unsafe {
            _mm256_storeu_si256(
                rows.as_mut_ptr() as *mut __m256i,
                _mm256_permutevar8x32_epi32(row, order),
            )
        };
        order
    }

    /// Writes 4 doubles at `values[at..]`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn store_4(v: __m256d, values: &mut Values, at: usize) {
        let values = &mut values[at..at + 4];
        // SAFETY: the slice holds 4 doubles (bounds checked just above); unaligned stores
        // are allowed.
        unsafe { _mm256_storeu_pd(values.as_mut_ptr().cast(), v) }
    }

    /// Compacts a group of 8 floats (`v`, rows from `first`) at `kept`, widened; returns the
    /// new count.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    fn compact_8(
        v: __m256,
        first: u32,
        rows: &mut Rows,
        values: &mut Values,
        kept: usize,
    ) -> usize {
        let keep = keep_f32(v);
        let order = store_rows(keep, row_numbers(first), rows, kept);
        let packed = _mm256_permutevar8x32_ps(v, order);
        store_4(
            _mm256_cvtps_pd(_mm256_castps256_ps128(packed)),
            values,
            kept,
        );
        store_4(
            _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(packed)),
            values,
            kept + 4,
        );
        kept + keep.count_ones() as usize
    }

    /// [`super::compact_wide`] of float32 values (widened exactly, as `as f64` does).
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn compact_f32(
        column: &[f32],
        first_row: u32,
        rows: &mut Rows,
        values: &mut Values,
    ) -> usize {
        let mut kept = 0;
        let mut groups = column.chunks_exact(8);
        for (g, group) in (&mut groups).enumerate() {
            // SAFETY: the group holds 8 floats; unaligned loads are allowed.
            let v = unsafe { _mm256_loadu_ps(group.as_ptr()) };
            kept = compact_8(v, first_row + (g * 8) as u32, rows, values, kept);
        }
        let start = column.len() - groups.remainder().len();
        super::compact_tail(
            groups.remainder(),
            first_row + start as u32,
            rows,
            values,
            kept,
        )
    }

    /// [`super::compact_wide`] of float16 values: widened to float32 by the CPU (exactly, as
    /// [`crate::Element::to_f64`] widens them), then as [`compact_f32`].
    #[target_feature(enable = "avx2,f16c,popcnt")]
    pub(super) fn compact_f16(
        column: &[half::f16],
        first_row: u32,
        rows: &mut Rows,
        values: &mut Values,
    ) -> usize {
        let mut kept = 0;
        let mut groups = column.chunks_exact(8);
        for (g, group) in (&mut groups).enumerate() {
            kept = compact_8(
                load_f16(group),
                first_row + (g * 8) as u32,
                rows,
                values,
                kept,
            );
        }
        let start = column.len() - groups.remainder().len();
        super::compact_tail(
            groups.remainder(),
            first_row + start as u32,
            rows,
            values,
            kept,
        )
    }

    /// [`super::compact_wide`] of float64 values.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn compact_f64(
        column: &[f64],
        first_row: u32,
        rows: &mut Rows,
        values: &mut Values,
    ) -> usize {
        let mut kept = 0;
        let mut groups = column.chunks_exact(8);
        for (g, group) in (&mut groups).enumerate() {
            // SAFETY: the group holds 8 doubles; unaligned loads are allowed.
            let (low, high) = unsafe {
                (
                    _mm256_loadu_pd(group.as_ptr()),
                    _mm256_loadu_pd(group[4..].as_ptr()),
                )
            };
            let (keep_low, keep_high) = (keep_f64(low), keep_f64(high));
            store_rows(
                keep_low | keep_high << 4,
                row_numbers(first_row + (g * 8) as u32),
                rows,
                kept,
            );
            let first = |v: __m256d, keep: u32| {
                let order = lanes(&KEEP_4_PAIRS[keep as usize]);
                _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v), order))
            };
            store_4(first(low, keep_low), values, kept);
            let kept_low = kept + keep_low.count_ones() as usize;
            store_4(first(high, keep_high), values, kept_low);
            kept = kept_low + keep_high.count_ones() as usize;
        }
        let start = column.len() - groups.remainder().len();
        super::compact_tail(
            groups.remainder(),
            first_row + start as u32,
            rows,
            values,
            kept,
        )
    }

    /// Copies the 8 x 8 block of doubles at `tile` (row r at `tile[r * width..][..8]`) into 8
    /// columns (column c at `out[c * out_rows..][..8]`), as four 4 x 4 blocks transposed in
    /// registers.
    #[target_feature(enable = "avx2")]
    pub(super) fn transpose_8x8(tile: &[f64], width: usize, out: &mut [f64], out_rows: usize) {
        assert!(tile.len() >= 7 * width + 8 && out.len() >= 7 * out_rows + 8);
        for (first_row, first_col) in [(0, 0), (0, 4), (4, 0), (4, 4)] {
            // SAFETY: the assert bounds every load (row < 8, columns < 8) and every store
            // (column < 8, rows < 8); unaligned access is allowed.
            unsafe {
                let row = |r: usize| {
                    _mm256_loadu_pd(tile.as_ptr().add((first_row + r) * width + first_col))
                };
                let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                // t0, t1: columns 0 and 2, 1 and 3 of rows 0 and 1; t2, t3: of rows 2 and 3
                let (t0, t1) = (_mm256_unpacklo_pd(r0, r1), _mm256_unpackhi_pd(r0, r1));
                let (t2, t3) = (_mm256_unpacklo_pd(r2, r3), _mm256_unpackhi_pd(r2, r3));
                let columns = [
                    _mm256_permute2f128_pd::<0x20>(t0, t2),
                    _mm256_permute2f128_pd::<0x20>(t1, t3),
                    _mm256_permute2f128_pd::<0x31>(t0, t2),
                    _mm256_permute2f128_pd::<0x31>(t1, t3),
                ];
                for (c, v) in columns.into_iter().enumerate() {
                    let at = (first_col + c) * out_rows + first_row;
                    _mm256_storeu_pd(out.as_mut_ptr().add(at), v);
                }
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use half::f16;

    type Compact<E> = unsafe fn(&[E], u32, &mut Rows, &mut Values) -> usize;
    type Count<E> = unsafe fn(&[E]) -> usize;

    /// The kernels of each instruction set the CPU runs, by name.
    fn sets<E>(
        avx512: (Count<E>, Compact<E>),
        avx2: (Count<E>, Compact<E>),
    ) -> Vec<(&'static str, Count<E>, Compact<E>)> {
        let mut sets = Vec::new();
        if avx512::available() {
            sets.push(("avx512", avx512.0, avx512.1));
        }
        if avx2::available() {
            sets.push(("avx2", avx2.0, avx2.1));
        }
        sets
    }

    /// Each instruction set's count and compaction of `column` against a plain filter: the
    /// same count, rows and bits (NaN as NaN).
    fn check<E: Element>(column: &[E], kernels: &[(&'static str, Count<E>, Compact<E>)]) {
        let want: Vec<(u32, f64)> = column
            .iter()
            .enumerate()
            .filter(|(_, v)| v.to_f64() != 0.0)
            .map(|(i, v)| (i as u32 + 9, v.to_f64()))
            .collect();
        for &(name, count, compact) in kernels {
            // SAFETY: `sets` lists only the kernels the CPU runs.
            let counted = unsafe { count(column) };
            assert_eq!(counted, want.len(), "{name}, n = {}", column.len());
            let mut rows = vec![MaybeUninit::new(u32::MAX); want.len() + COMPACT_SLACK];
            let mut values = vec![MaybeUninit::new(f64::NAN); want.len() + COMPACT_SLACK];
            // SAFETY: as above; both slices hold the count plus the slack.
            let kept = unsafe { compact(column, 9, &mut rows, &mut values) };
            assert_eq!(kept, want.len(), "{name}");
            // SAFETY: every slot was initialised above.
            let (rows, values): (Vec<u32>, Vec<f64>) = unsafe {
                (
                    rows.iter().map(|r| r.assume_init()).collect(),
                    values.iter().map(|v| v.assume_init()).collect(),
                )
            };
            for (k, &(row, v)) in want.iter().enumerate() {
                let same = v.to_bits() == values[k].to_bits() || v.is_nan() && values[k].is_nan();
                assert!(
                    rows[k] == row && same,
                    "{name}: entry {k}: {} {} against {row} {v}",
                    rows[k],
                    values[k]
                );
            }
        }
    }

    /// Columns of every length around the vector widths, with zeros of both signs, NaN,
    /// infinities, subnormals and ordinary values, and all-zero and all-nonzero ones.
    fn columns() -> Vec<Vec<f64>> {
        let mut rng = crate::rng::SplitMix64::new(5);
        let mut out = Vec::new();
        for n in (0..40).chain([255, 1000]) {
            let column = (0..n)
                .map(|_| match (rng.next_f64() * 8.0) as u32 {
                    0 | 1 => 0.0,
                    2 => -0.0,
                    3 => f64::NAN,
                    4 => f64::NEG_INFINITY,
                    5 => 1e-310 * rng.next_f64(),
                    _ => rng.next_f64() - 0.5,
                })
                .collect();
            out.push(column);
            out.push(vec![0.0; n]);
            out.push((0..n).map(|i| i as f64 + 0.5).collect());
        }
        out
    }

    #[test]
    fn each_instruction_sets_compaction_matches_a_plain_filter() {
        let doubles = sets::<f64>(
            (avx512::count_f64, avx512::compact_f64),
            (avx2::count_f64, avx2::compact_f64),
        );
        let floats = sets::<f32>(
            (avx512::count_f32, avx512::compact_f32),
            (avx2::count_f32, avx2::compact_f32),
        );
        let halves = sets::<f16>(
            (avx512::count_f16, avx512::compact_f16),
            (avx2::count_f16, avx2::compact_f16),
        );
        for column in columns() {
            check(&column, &doubles);
            check(
                &column.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                &floats,
            );
            check(
                &column.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(),
                &halves,
            );
        }
        // every half-precision bit pattern, in order and reversed (so each lands in every lane)
        let every: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        check(&every, &halves);
        check(&every.iter().rev().copied().collect::<Vec<_>>(), &halves);
        check(&every[3..], &halves);
    }

    /// Each instruction set's 8 x 8 transposition against a copy value by value, from tiles
    /// of several widths into columns with room between them (what is there stays).
    #[test]
    fn each_instruction_sets_transposition_matches_a_plain_copy() {
        type Transpose = unsafe fn(&[f64], usize, &mut [f64], usize);
        let mut kernels: Vec<(&str, Transpose)> = Vec::new();
        if avx512::available() {
            kernels.push(("avx512", avx512::transpose_8x8));
        }
        if avx2::available() {
            kernels.push(("avx2", avx2::transpose_8x8));
        }
        for width in [8, 9, 16, 23] {
            let tile: Vec<f64> = (0..8 * width).map(|i| i as f64 * 1.5 - 7.0).collect();
            let out_rows = 11;
            for &(name, transpose) in &kernels {
                let mut out = vec![-1.0; 8 * out_rows];
                // SAFETY: only the kernels the CPU runs are listed; the sizes meet the assert.
                unsafe { transpose(&tile, width, &mut out, out_rows) };
                for c in 0..8 {
                    let want: Vec<f64> = (0..8).map(|r| tile[r * width + c]).collect();
                    assert_eq!(
                        out[c * out_rows..][..8],
                        want[..],
                        "{name}, width {width}, column {c}"
                    );
                    assert!(out[c * out_rows + 8..][..3].iter().all(|&v| v == -1.0));
                }
            }
        }
    }
}
