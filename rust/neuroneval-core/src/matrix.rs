//! A read-only strided view of a 2-D matrix of any supported element type.

pub(crate) use crate::column_kernels::count_nonzeros;
use crate::column_kernels::{compact_wide, transposed_blocks, Rows, Values, COMPACT_SLACK};
use crate::error::{CoreError, Result};
use crate::simd::prefetch;
use rayon::prelude::*;

/// Element types the kernels read. Every value is widened to f64 before any arithmetic.
pub trait Element: Copy + Send + Sync + 'static {
    fn to_f64(self) -> f64;

    /// Whether the value is finite (a bit test for half precision, not a conversion).
    #[inline(always)]
    fn is_finite(self) -> bool {
        self.to_f64().is_finite()
    }

    /// The slice itself when the elements are float32 (for loops written for that type).
    #[inline(always)]
    fn as_f32(_values: &[Self]) -> Option<&[f32]> {
        None
    }

    /// The slice itself when the elements are float64.
    #[inline(always)]
    fn as_f64(_values: &[Self]) -> Option<&[f64]> {
        None
    }

    /// The slice itself when the elements are float16.
    #[inline(always)]
    fn as_f16(_values: &[Self]) -> Option<&[half::f16]> {
        None
    }
}

impl Element for i64 {
    /// Exact for indices below 2^53; used only for index arrays, never for scores.
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Element for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }

    #[inline(always)]
    fn as_f64(values: &[f64]) -> Option<&[f64]> {
        Some(values)
    }
}

impl Element for half::f16 {
    /// Exact: every half-precision value is a double.
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16_bits_to_f64(self.to_bits())
    }

    #[inline(always)]
    fn is_finite(self) -> bool {
        self.to_bits() & 0x7c00 != 0x7c00
    }

    #[inline(always)]
    fn as_f16(values: &[half::f16]) -> Option<&[half::f16]> {
        Some(values)
    }
}

/// A half-precision value (its bits) as a double, by integer arithmetic and selects that
/// compile to vector code in the loops over columns: `half`'s own conversion asks the CPU's
/// features at each call and converts one value at a time. Exact, as the hardware's: the
/// exponent rebiased (15 to float32's 127; all ones stays all ones, for infinities and NaN),
/// and a subnormal, mantissa x 2^-24, computed in float32, where it is normal.
#[inline(always)]
fn f16_bits_to_f64(bits: u16) -> f64 {
    let magnitude = u32::from(bits & 0x7fff);
    let shifted = magnitude << 13;
    let exponent = magnitude >> 10;
    let float_bits = if exponent == 0 {
        (magnitude as f32 * f32::from_bits(0x3380_0000)).to_bits()
    } else if exponent == 0x1f {
        shifted + (224 << 23)
    } else {
        shifted + (112 << 23)
    };
    f64::from(f32::from_bits(
        float_bits | (u32::from(bits & 0x8000) << 16),
    ))
}

impl Element for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }

    #[inline(always)]
    fn as_f32(values: &[f32]) -> Option<&[f32]> {
        Some(values)
    }
}

/// A (rows x cols) matrix laid out anywhere in `data` with non-negative strides (in elements).
#[derive(Clone, Copy, Debug)]
pub struct MatrixView<'a, E> {
    data: &'a [E],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a, E: Element> MatrixView<'a, E> {
    /// A view with explicit strides; fails if the strides reach outside `data`.
    pub fn new(
        data: &'a [E],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Result<Self> {
        if rows > 0 && cols > 0 {
            let last = (rows - 1).checked_mul(row_stride).and_then(|r| {
                (cols - 1)
                    .checked_mul(col_stride)
                    .and_then(|c| r.checked_add(c))
            });
            match last {
                Some(last) if last < data.len() => {}
                _ => {
                    return Err(CoreError::Shape(format!(
                        "a {rows} x {cols} view with strides ({row_stride}, {col_stride}) does not fit in {} elements",
                        data.len()
                    )))
                }
            }
        }
        Ok(Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        })
    }

    /// A C-contiguous (row-major) view.
    pub fn row_major(data: &'a [E], rows: usize, cols: usize) -> Result<Self> {
        if data.len() != rows * cols {
            return Err(CoreError::Shape(format!(
                "{} elements cannot form a {rows} x {cols} matrix",
                data.len()
            )));
        }
        Self::new(data, rows, cols, cols, 1)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Elements (row, cols.start..cols.end) as a slice, when rows are contiguous.
    #[inline]
    pub fn row_segment(&self, row: usize, cols: std::ops::Range<usize>) -> Option<&'a [E]> {
        (self.col_stride == 1 && cols.end <= self.cols).then(|| {
            let base = row * self.row_stride;
            &self.data[base + cols.start..base + cols.end]
        })
    }

    /// Column `col` as a slice, when columns are contiguous (row stride 1: a column-major
    /// matrix, or a single column of any layout).
    #[inline]
    pub fn column_slice(&self, col: usize) -> Option<&'a [E]> {
        (self.rows > 0 && (self.row_stride == 1 || self.rows == 1) && col < self.cols).then(|| {
            let base = col * self.col_stride;
            &self.data[base..base + self.rows]
        })
    }

    /// Column `col`'s values in row order, copied into `out` (cleared first): for a column
    /// that is not contiguous, so that the loops over one column run over a slice.
    fn gather_column(&self, col: usize, out: &mut Vec<E>) {
        out.clear();
        let base = col * self.col_stride;
        out.extend((0..self.rows).map(|i| self.data[base + i * self.row_stride]));
    }

    /// Whether every listed column is a contiguous slice ([`MatrixView::column_slice`]).
    fn columns_contiguous(&self, cols: &[usize]) -> bool {
        self.rows > 0
            && (self.row_stride == 1 || self.rows == 1)
            && cols.iter().all(|&c| c < self.cols)
    }

    /// The element itself, without widening.
    #[inline(always)]
    pub fn get_raw(&self, row: usize, col: usize) -> E {
        self.data[row * self.row_stride + col * self.col_stride]
    }

    #[inline(always)]
    pub fn get(&self, row: usize, col: usize) -> f64 {
        self.data[row * self.row_stride + col * self.col_stride].to_f64()
    }

    /// Copies the listed columns into `out` as f64 vectors: column j's rows at
    /// `out[j * out_rows ..][..rows]` (`out_rows` >= rows leaves room for other row ranges).
    /// Walks rows in order (tiles of 8) so that a row-major source is read sequentially.
    pub fn columns_into_at(&self, cols: &[usize], out: &mut [f64], out_rows: usize) {
        columns_into_at(self, cols, out, out_rows)
    }

    /// Appends each listed column's nonzero entries (NaN included) to `index[j]` (as
    /// `row + row_offset`) and `value[j]`, rows ascending.
    pub fn nonzeros_into_at(
        &self,
        cols: &[usize],
        index: &mut [Vec<u32>],
        value: &mut [Vec<f64>],
        row_offset: usize,
    ) {
        nonzeros_into_at(self, cols, index, value, row_offset)
    }

    /// The first non-finite value of the listed columns in row-major order, as an error
    /// naming its row and column.
    pub fn check_finite(&self, what: &'static str, columns: &[usize]) -> Result<()> {
        check_finite(self, what, columns)
    }
}

// The loops over whole columns, compiled for each instruction set (see `simd`).
crate::simd::widest! {
/// [`MatrixView::columns_into_at`].
fn columns_into_at<E: Element>(view: &MatrixView<'_, E>, cols: &[usize], out: &mut [f64], out_rows: usize) {
    debug_assert!(cols.is_empty() || out.len() >= (cols.len() - 1) * out_rows + view.rows);
    if view.columns_contiguous(cols) {
        for (j, &c) in cols.iter().enumerate() {
            let column = view.column_slice(c).expect("contiguous columns");
            for (d, &v) in out[j * out_rows..j * out_rows + view.rows].iter_mut().zip(column) {
                *d = v.to_f64();
            }
        }
        return;
    }
    if let [c] = cols {
        // one strided column (a column of a row-major matrix): one strided walk
        let base = c * view.col_stride;
        for (i, d) in out[..view.rows].iter_mut().enumerate() {
            *d = view.data[base + i * view.row_stride].to_f64();
        }
        return;
    }
    let consecutive = !cols.is_empty() && cols.windows(2).all(|w| w[1] == w[0] + 1);
    if consecutive && view.col_stride == 1 {
        // Tiles of 8 rows: each column's 8 values are one cache line of output, and a tile's
        // 8 row segments stay in L1 (64 rows of a power-of-two row length would all map to
        // one cache set).
        const TILE: usize = 8;
        const PREFETCH_TILES: usize = 4;
        let span = cols[0]..cols[cols.len() - 1] + 1;
        let rows = view.rows;
        // Each row segment is widened in order (vector code) into `tile`, which stays in L1;
        // the columns are then copied out of it.
        let width = span.len();
        let mut tile = vec![0.0; TILE * width];
        for start in (0..rows).step_by(TILE) {
            let end = (start + TILE).min(rows);
            let base = start * view.row_stride + span.start;
            // Rows far apart share no page, so the hardware does not fetch ahead: ask for the
            // tile PREFETCH_TILES ahead (both ends of each row segment).
            for r in 0..TILE {
                let ahead = base + (PREFETCH_TILES * TILE + r) * view.row_stride;
                let row = view.data.as_ptr().wrapping_add(ahead);
                prefetch(row);
                prefetch(row.wrapping_add(width - 1));
            }
            for (r, wide) in tile.chunks_exact_mut(width).take(end - start).enumerate() {
                let row = &view.data[base + r * view.row_stride..][..width];
                for (d, &v) in wide.iter_mut().zip(row) {
                    *d = v.to_f64();
                }
            }
            // a full tile goes out 8 columns at a time, transposed in registers
            let blocks = if end - start == TILE {
                transposed_blocks(&tile, width, &mut out[start..], out_rows)
            } else {
                0
            };
            for j in 8 * blocks..width {
                let dst = &mut out[j * out_rows + start..j * out_rows + end];
                for (r, d) in dst.iter_mut().enumerate() {
                    *d = tile[r * width + j];
                }
            }
        }
        return;
    }
    for i in 0..view.rows {
        let base = i * view.row_stride;
        for (j, &c) in cols.iter().enumerate() {
            out[j * out_rows + i] = view.data[base + c * view.col_stride].to_f64();
        }
    }
}

/// [`MatrixView::nonzeros_into_at`].
fn nonzeros_into_at<E: Element>(
    view: &MatrixView<'_, E>,
    cols: &[usize],
    index: &mut [Vec<u32>],
    value: &mut [Vec<f64>],
    row_offset: usize,
) {
    if view.columns_contiguous(cols) {
        for (j, &c) in cols.iter().enumerate() {
            let column = view.column_slice(c).expect("contiguous columns");
            column_nonzeros(column, row_offset, &mut index[j], &mut value[j]);
        }
        return;
    }
    if let [c] = cols {
        // one strided column: gathered once, then compacted as a contiguous one
        let mut column = Vec::with_capacity(view.rows);
        view.gather_column(*c, &mut column);
        column_nonzeros(&column, row_offset, &mut index[0], &mut value[0]);
        return;
    }
    // Consecutive columns of a row-major matrix are one slice per row.
    let consecutive = !cols.is_empty() && cols.windows(2).all(|w| w[1] == w[0] + 1);
    if consecutive && view.col_stride == 1 && cols.len() > 1 {
        consecutive_nonzeros(view, cols, index, value, row_offset, TileRead::Adaptive);
        return;
    }
    let span = cols.first().map_or(0..0, |&c| c..cols[cols.len() - 1] + 1);
    for i in 0..view.rows {
        let row = (i + row_offset) as u32;
        match view.row_segment(i, span.clone()).filter(|_| consecutive) {
            Some(segment) => {
                // Mostly zeros: skip all-zero runs with a branch-free test.
                for (r, run) in segment.chunks(16).enumerate() {
                    if run.iter().map(|v| (v.to_f64() != 0.0) as u32).sum::<u32>() == 0 {
                        continue;
                    }
                    for (jj, &v) in run.iter().enumerate() {
                        let v = v.to_f64();
                        if v != 0.0 {
                            index[r * 16 + jj].push(row);
                            value[r * 16 + jj].push(v);
                        }
                    }
                }
            }
            None => {
                for (j, &c) in cols.iter().enumerate() {
                    let v = view.get(i, c);
                    if v != 0.0 {
                        index[j].push(row);
                        value[j].push(v);
                    }
                }
            }
        }
    }
}

/// Appends the nonzero entries (NaN included) of one contiguous column to `index` (as
/// `row + row_offset`) and `value`, rows ascending.
fn column_nonzeros<E: Element>(column: &[E], row_offset: usize, index: &mut Vec<u32>, value: &mut Vec<f64>) {
    append_counted_nonzeros(column, count_nonzeros(column), row_offset, index, value);
}

/// [`column_nonzeros`] of a column whose nonzeros (NaN included) are already counted
/// (`nnz`, by [`count_nonzeros`]).
pub(crate) fn append_counted_nonzeros<E: Element>(
    column: &[E],
    nnz: usize,
    row_offset: usize,
    index: &mut Vec<u32>,
    value: &mut Vec<f64>,
) {
    // Compacted without a branch per value (a concept's nonzeros fall at random rows): by
    // vector compaction where the CPU has AVX-512 or AVX2 (`column_kernels`), else one at a
    // time with runs of 16 zeros skipped. The slack takes the writes past the last nonzero.
    // (into the vectors' spare capacity: room zeroed first would cost a pass of its own)
    let start = index.len();
    index.reserve(nnz + COMPACT_SLACK);
    value.reserve(nnz + COMPACT_SLACK);
    let rows = &mut index.spare_capacity_mut()[..nnz + COMPACT_SLACK];
    let values = &mut value.spare_capacity_mut()[..nnz + COMPACT_SLACK];
    let kept = compact_wide(column, row_offset as u32, rows, values)
        .unwrap_or_else(|| compact_portable(column, row_offset, rows, values));
    assert_eq!(kept, nnz, "a column's nonzeros counted and compacted differ");
    // SAFETY: the compaction wrote the first `kept` (= nnz) slots of both spare parts.
    unsafe {
        index.set_len(start + nnz);
        value.set_len(start + nnz);
    }
}

/// [`compact_wide`] one value at a time, with runs of 16 zeros skipped: returns the count.
/// Both slices must hold it plus [`COMPACT_SLACK`].
fn compact_portable<E: Element>(column: &[E], row_offset: usize, rows: &mut Rows, values: &mut Values) -> usize {
    let mut kept = 0;
    for (r, run) in column.chunks(16).enumerate() {
        if run.iter().map(|v| (v.to_f64() != 0.0) as u32).sum::<u32>() == 0 {
            continue;
        }
        let first = (row_offset + r * 16) as u32;
        for (ii, &v) in run.iter().enumerate() {
            let v = v.to_f64();
            rows[kept].write(first + ii as u32);
            values[kept].write(v);
            kept += (v != 0.0) as usize;
        }
    }
    kept
}

/// Whether every value of a slice is finite (folded without early exit, so that it vectorises).
fn slice_finite<E: Element>(values: &[E]) -> bool {
    values.iter().fold(true, |ok, v| ok & v.is_finite())
}

/// Whether every value of rows `rows` in the column span `span` of a row-major view is finite
/// (each row folded without early exit, so that the loop vectorises).
fn rows_finite<E: Element>(view: &MatrixView<'_, E>, rows: std::ops::Range<usize>, span: std::ops::Range<usize>) -> bool {
    rows.into_iter().all(|i| {
        view.row_segment(i, span.clone())
            .is_some_and(|row| row.iter().fold(true, |ok, v| ok & v.is_finite()))
    })
}
}

/// [`MatrixView::check_finite`]: consecutive columns of a row-major view are scanned by all
/// threads in row chunks; only a view with a bad value (or another layout) is then walked in
/// row-major order, which finds the first one.
fn check_finite<E: Element>(
    view: &MatrixView<'_, E>,
    what: &'static str,
    columns: &[usize],
) -> Result<()> {
    // Below this many values one thread scans faster than the pool can be woken.
    const PARALLEL_VALUES: usize = 1 << 20;
    let small = view.rows.saturating_mul(columns.len()) < PARALLEL_VALUES;
    let consecutive = !columns.is_empty() && columns.windows(2).all(|w| w[1] == w[0] + 1);
    if view.columns_contiguous(columns) {
        const CHUNK: usize = 1 << 16;
        let chunk_finite = |&c: &usize| {
            let column = view.column_slice(c).expect("contiguous columns");
            column.chunks(CHUNK).all(slice_finite)
        };
        let all_finite = if small {
            columns.iter().all(chunk_finite)
        } else {
            columns.par_iter().all(chunk_finite)
        };
        if all_finite {
            return Ok(());
        }
    } else if let [c] = columns {
        let base = c * view.col_stride;
        let finite = (0..view.rows).fold(true, |ok, i| {
            ok & view.data[base + i * view.row_stride].to_f64().is_finite()
        });
        if finite {
            return Ok(());
        }
    } else if consecutive && view.col_stride == 1 {
        const CHUNK_ROWS: usize = 1024;
        let span = columns[0]..columns[columns.len() - 1] + 1;
        let chunk_finite = |chunk: usize| {
            let rows = chunk * CHUNK_ROWS..((chunk + 1) * CHUNK_ROWS).min(view.rows);
            rows_finite(view, rows, span.clone())
        };
        let chunks = view.rows.div_ceil(CHUNK_ROWS);
        let all_finite = if small {
            (0..chunks).all(chunk_finite)
        } else {
            (0..chunks).into_par_iter().all(chunk_finite)
        };
        if all_finite {
            return Ok(());
        }
    }
    for i in 0..view.rows {
        for &j in columns {
            let v = view.get(i, j);
            if !v.is_finite() {
                return Err(CoreError::NonFinite {
                    what,
                    row: i,
                    column: j,
                    value: v,
                });
            }
        }
    }
    Ok(())
}

/// How [`consecutive_nonzeros`] reads a tile of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TileRead {
    /// By columns, then by rows while the last tile had fewer nonzeros than
    /// 1 / [`ROWS_BELOW_DENSITY_INVERSE`] of its values.
    Adaptive,
    /// Row by row ([`nonzeros_of_row`]).
    Rows,
    /// Widened into a column-major tile, then compacted column by column (taken alone by
    /// the tests only: the adaptive read starts so).
    #[cfg_attr(not(test), allow(dead_code))]
    Columns,
}

/// Up to a tenth of nonzeros, a tile's nonzeros are found row by row: binary concepts of
/// 50,000 inputs, 1,000 of them, on one thread: 42-50 against 85-89 ms at 1% positives,
/// 59-61 against 100-104 at 2%, 182-191 against 214-225 at 10%, but 369-384 against 281-282
/// at 20% (each nonzero then costs a push to its column's entries; benches/README.md's log,
/// 2026-12-07).
const ROWS_BELOW_DENSITY_INVERSE: usize = 10;

/// [`MatrixView::nonzeros_into_at`] for `cols`, consecutive columns of a row-major matrix
/// (more than one), a tile of rows at a time: both reads give each column its entries in
/// row order with the same values, so `read` changes no result.
fn consecutive_nonzeros<E: Element>(
    view: &MatrixView<'_, E>,
    cols: &[usize],
    index: &mut [Vec<u32>],
    value: &mut [Vec<f64>],
    row_offset: usize,
    read: TileRead,
) {
    // By columns, the tile's rows are widened together into a buffer that stays in cache,
    // then compacted column by column: the rows' lines are read once for all the columns,
    // and no whole-column f64 copy is written. The tile's columns lie a cache line more
    // than a power of two apart, so that the lines written for one row do not all map to
    // one cache set.
    const TILE_ROWS: usize = 1024;
    const TILE_STRIDE: usize = TILE_ROWS + 8;
    let (index, value) = (&mut index[..cols.len()], &mut value[..cols.len()]);
    let span = cols[0]..cols[cols.len() - 1] + 1;
    let mut tile = Vec::new();
    let mut found = (Vec::new(), Vec::new());
    let mut by_rows = read == TileRead::Rows;
    for start in (0..view.rows).step_by(TILE_ROWS) {
        let rows = TILE_ROWS.min(view.rows - start);
        let before: usize = index.iter().map(Vec::len).sum();
        if by_rows {
            for i in start..start + rows {
                // rows lie apart, each in pages of its own, where the hardware does not
                // fetch ahead: ask for the row 4 ahead, line by line
                let ahead = (i + 4) * view.row_stride + span.start;
                for line in (0..span.len()).step_by(64 / std::mem::size_of::<E>()) {
                    prefetch(view.data.as_ptr().wrapping_add(ahead + line));
                }
                let segment = view
                    .row_segment(i, span.clone())
                    .expect("a row-major segment");
                nonzeros_of_row(segment, (i + row_offset) as u32, index, value, &mut found);
            }
        } else {
            tile.resize(cols.len() * TILE_STRIDE, 0.0);
            let part = MatrixView {
                data: &view.data[start * view.row_stride..],
                rows,
                ..*view
            };
            columns_into_at(&part, cols, &mut tile, TILE_STRIDE);
            for (j, (index, value)) in index.iter_mut().zip(value.iter_mut()).enumerate() {
                let column = &tile[j * TILE_STRIDE..][..rows];
                column_nonzeros(column, row_offset + start, index, value);
            }
        }
        if read == TileRead::Adaptive {
            let found_here = index.iter().map(Vec::len).sum::<usize>() - before;
            by_rows = found_here * ROWS_BELOW_DENSITY_INVERSE < rows * cols.len();
        }
    }
}

/// One row's nonzeros (NaN included) appended to their columns' entries: counted and
/// compacted by the vector kernels into `found` (positions in the row, values), then each
/// pushed to its column.
fn nonzeros_of_row<E: Element>(
    segment: &[E],
    row: u32,
    index: &mut [Vec<u32>],
    value: &mut [Vec<f64>],
    found: &mut (Vec<u32>, Vec<f64>),
) {
    let nnz = count_nonzeros(segment);
    if nnz == 0 {
        return;
    }
    let (at, values) = found;
    at.clear();
    values.clear();
    append_counted_nonzeros(segment, nnz, 0, at, values);
    for (&j, &v) in at.iter().zip(values.iter()) {
        index[j as usize].push(row);
        value[j as usize].push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every half-precision bit pattern widens as `half` widens it (the hardware's
    /// conversion where the CPU has one): zeros of both signs, subnormals, normals,
    /// infinities; NaN stays NaN.
    #[test]
    fn every_f16_widens_as_half_does() {
        for bits in 0..=u16::MAX {
            let ours = f16_bits_to_f64(bits);
            let reference = half::f16::from_bits(bits).to_f64();
            if reference.is_nan() {
                assert!(ours.is_nan(), "{bits:#06x}: {ours}");
            } else {
                assert_eq!(
                    ours.to_bits(),
                    reference.to_bits(),
                    "{bits:#06x}: {ours} against {reference}"
                );
            }
        }
    }

    /// The compaction of a contiguous column (by the widest instruction set the CPU has;
    /// `column_kernels` tests each one) against a plain filter: zeros of both signs,
    /// NaN, no nonzero, only nonzeros, one value, lengths around the 16-value groups, and a
    /// row offset.
    #[test]
    fn column_nonzeros_match_a_plain_filter() {
        let mut state = 3u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut columns: Vec<Vec<f64>> = Vec::new();
        for n in [1usize, 2, 15, 16, 17, 31, 32, 33, 100, 1000] {
            columns.push(
                (0..n)
                    .map(|_| match (next() * 6.0) as u32 {
                        0 => 0.0,
                        1 => -0.0,
                        2 => f64::NAN,
                        3 => -next(),
                        _ => next() * 0.999 + 0.001,
                    })
                    .collect(),
            );
            columns.push(vec![0.0; n]);
            columns.push(vec![-0.0; n]);
            columns.push((0..n).map(|i| 1.0 + i as f64).collect());
        }
        fn check<E: Element>(column: &[E], offset: usize) {
            let n = column.len();
            let view = MatrixView::new(column, n, 1, 1, n).unwrap();
            let (mut index, mut value) = (vec![vec![7u32]], vec![vec![0.5f64]]);
            view.nonzeros_into_at(&[0], &mut index, &mut value, offset);
            let want: Vec<(u32, u64)> = column
                .iter()
                .enumerate()
                .filter(|(_, v)| v.to_f64() != 0.0)
                .map(|(i, v)| ((i + offset) as u32, v.to_f64().to_bits()))
                .collect();
            let got: Vec<(u32, u64)> = index[0][1..]
                .iter()
                .zip(&value[0][1..])
                .map(|(&i, v)| (i, v.to_bits()))
                .collect();
            assert_eq!((index[0][0], value[0][0]), (7, 0.5), "what was there stays");
            assert_eq!(got, want, "n = {n}");
            assert_eq!(index[0].len(), value[0].len());
            // the loop of CPUs without AVX2, whatever this one has
            let mut rows = vec![std::mem::MaybeUninit::new(0); n + COMPACT_SLACK];
            let mut values = vec![std::mem::MaybeUninit::new(0.0); n + COMPACT_SLACK];
            let kept = compact_portable(column, offset, &mut rows, &mut values);
            // SAFETY: every slot was initialised above.
            let portable: Vec<(u32, u64)> = rows[..kept]
                .iter()
                .zip(&values[..kept])
                .map(|(i, v)| unsafe { (i.assume_init(), v.assume_init().to_bits()) })
                .collect();
            assert_eq!(portable, want, "the portable loop, n = {n}");
        }
        for c in &columns {
            check(c, 0);
            check(c, 1000);
            let f32s: Vec<f32> = c.iter().map(|&v| v as f32).collect();
            check(&f32s, 5);
            let f16s: Vec<half::f16> = c.iter().map(|&v| half::f16::from_f64(v)).collect();
            check(&f16s, 0);
        }
    }

    /// Nonzeros of consecutive columns of a row-major matrix (read a tile of rows at a time,
    /// by columns, by rows, or as the density of the last tile picks) against a plain filter
    /// of each column: several tiles and a part tile, zeros of both signs, NaN, mostly-zero
    /// and dense columns, tiles of rows dense and sparse in turn (the adaptive read changes
    /// its way twice), float16, float32 and float64, a row offset, and entries already in
    /// the outputs.
    #[test]
    fn row_major_nonzeros_match_a_plain_filter() {
        let mut rng = crate::rng::SplitMix64::new(11);
        let mut next = || rng.next_f64();
        let (n, width) = (9000, 12);
        // column j is nonzero with probability about j / width, except in rows 1024 to 4999,
        // where about 1 value in 40 is
        let data: Vec<f64> = (0..n * width)
            .map(|e| {
                let sparse = (1024..5000).contains(&(e / width));
                // (a NaN is a nonzero: rarer where the rows are sparse)
                let draw = (next() * if sparse { 200.0 } else { width as f64 }) as usize;
                let nonzero = if sparse {
                    next() < 0.02
                } else {
                    draw < e % width
                };
                match draw {
                    _ if nonzero => (next() - 0.3) * 8.0,
                    0 => f64::NAN,
                    1 => -0.0,
                    _ => 0.0,
                }
            })
            .collect();
        fn check<E: Element>(
            data: &[E],
            n: usize,
            width: usize,
            cols: std::ops::Range<usize>,
            offset: usize,
        ) {
            let view = MatrixView::new(data, n, width, width, 1).unwrap();
            let cols: Vec<usize> = cols.collect();
            for read in [
                None,
                Some(TileRead::Adaptive),
                Some(TileRead::Rows),
                Some(TileRead::Columns),
            ] {
                let mut index = vec![vec![3u32]; cols.len()];
                let mut value = vec![vec![0.25f64]; cols.len()];
                match read {
                    None => view.nonzeros_into_at(&cols, &mut index, &mut value, offset),
                    Some(read) => {
                        consecutive_nonzeros(&view, &cols, &mut index, &mut value, offset, read)
                    }
                }
                for (j, &c) in cols.iter().enumerate() {
                    let want: Vec<(u32, u64)> = (0..n)
                        .map(|i| data[i * width + c].to_f64())
                        .enumerate()
                        .filter(|(_, v)| *v != 0.0)
                        .map(|(i, v)| ((i + offset) as u32, v.to_bits()))
                        .collect();
                    let got: Vec<(u32, u64)> = index[j][1..]
                        .iter()
                        .zip(&value[j][1..])
                        .map(|(&i, v)| (i, v.to_bits()))
                        .collect();
                    assert_eq!(
                        (index[j][0], value[j][0]),
                        (3, 0.25),
                        "what was there stays"
                    );
                    assert_eq!(got, want, "column {c}, {read:?}");
                }
            }
        }
        let f16s: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f64(v)).collect();
        let f32s: Vec<f32> = data.iter().map(|&v| v as f32).collect();
        for cols in [0..width, 3..11, 5..7] {
            check(&data, n, width, cols.clone(), 0);
            check(&f16s, n, width, cols.clone(), 700);
            check(&f32s, n, width, cols, 3);
        }
    }

    /// Consecutive columns of a row-major matrix copy out as a plain loop over (row, column)
    /// copies them: every width around the 8-column blocks, row counts that leave a partial
    /// last tile, float32 and float16 sources, into an output with room between columns (what
    /// is there stays).
    #[test]
    fn consecutive_columns_copy_out_as_a_plain_loop() {
        fn check<E: Element>(data: &[E], n: usize, width: usize, cols: std::ops::Range<usize>) {
            let view = MatrixView::row_major(data, n, width).unwrap();
            let out_rows = n + 5;
            let mut out = vec![-7.0; cols.len() * out_rows];
            let listed: Vec<usize> = cols.clone().collect();
            view.columns_into_at(&listed, &mut out, out_rows);
            for (j, c) in cols.enumerate() {
                let want: Vec<u64> = (0..n)
                    .map(|i| data[i * width + c].to_f64().to_bits())
                    .collect();
                let got: Vec<u64> = out[j * out_rows..][..n]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                assert_eq!(got, want, "column {c} of {width}, {n} rows");
                if j + 1 < listed.len() {
                    assert!(out[j * out_rows + n..][..5].iter().all(|&v| v == -7.0));
                }
            }
        }
        for (n, width) in [
            (8, 8),
            (64, 16),
            (37, 9),
            (41, 24),
            (16, 7),
            (83, 33),
            (9, 40),
        ] {
            let data: Vec<f32> = (0..n * width)
                .map(|i| (i as f32 * 0.37).sin() * 100.0)
                .collect();
            let halves: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
            for cols in [0..width, 1..width, 0..width.min(8), (width / 2)..width] {
                check(&data, n, width, cols.clone());
                check(&halves, n, width, cols);
            }
        }
    }

    /// One column of a row-major matrix (strided) reads as the same column copied out
    /// contiguously: its values, its nonzeros and its first non-finite value.
    #[test]
    fn a_strided_column_reads_as_a_contiguous_one() {
        let (rows, cols) = (37, 5);
        let data: Vec<f64> = (0..rows * cols)
            .map(|i| match i % 7 {
                0 | 3 => 0.0,
                5 => -0.0,
                _ => i as f64 / 10.0,
            })
            .collect();
        let view = MatrixView::row_major(&data, rows, cols).unwrap();
        for c in 0..cols {
            let column: Vec<f64> = (0..rows).map(|i| data[i * cols + c]).collect();
            let contiguous = MatrixView::new(&column, rows, 1, 1, rows).unwrap();
            let mut out = vec![f64::NAN; rows];
            view.columns_into_at(&[c], &mut out, rows);
            assert_eq!(out, column);
            let (mut i1, mut v1) = (vec![Vec::new()], vec![Vec::new()]);
            let (mut i2, mut v2) = (vec![Vec::new()], vec![Vec::new()]);
            view.nonzeros_into_at(&[c], &mut i1, &mut v1, 3);
            contiguous.nonzeros_into_at(&[0], &mut i2, &mut v2, 3);
            assert_eq!((&i1, &v1), (&i2, &v2), "column {c}");
            assert!(view.check_finite("x", &[c]).is_ok());
        }
        let mut bad = data.clone();
        bad[11 * cols + 2] = f64::INFINITY;
        let view = MatrixView::row_major(&bad, rows, cols).unwrap();
        match view.check_finite("x", &[2]) {
            Err(CoreError::NonFinite { row, column, .. }) => assert_eq!((row, column), (11, 2)),
            other => panic!("{other:?}"),
        }
        assert!(view.check_finite("x", &[1]).is_ok());
    }
}
