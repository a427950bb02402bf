//! A read-only strided view of a 2-D matrix of any supported element type.

use crate::error::{CoreError, Result};
use crate::simd::prefetch;
use rayon::prelude::*;

/// Element types the kernels read. Every value is widened to f64 before any arithmetic.
pub trait Element: Copy + Send + Sync + 'static {
    fn to_f64(self) -> f64;
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
}

impl Element for half::f16 {
    /// Exact: every half-precision value is a double.
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

impl Element for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
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
    let consecutive = !cols.is_empty() && cols.windows(2).all(|w| w[1] == w[0] + 1);
    if consecutive && view.col_stride == 1 {
        // Tiles of 8 rows: each column's 8 values are one cache line of output, and a tile's
        // 8 row segments stay in L1 (64 rows of a power-of-two row length would all map to
        // one cache set).
        const TILE: usize = 8;
        const PREFETCH_TILES: usize = 4;
        let span = cols[0]..cols[cols.len() - 1] + 1;
        let rows = view.rows;
        for start in (0..rows).step_by(TILE) {
            let end = (start + TILE).min(rows);
            let base = start * view.row_stride + span.start;
            // Rows far apart share no page, so the hardware does not fetch ahead: ask for the
            // tile PREFETCH_TILES ahead (both ends of each row segment).
            for r in 0..TILE {
                let ahead = base + (PREFETCH_TILES * TILE + r) * view.row_stride;
                let row = view.data.as_ptr().wrapping_add(ahead);
                prefetch(row);
                prefetch(row.wrapping_add(span.len() - 1));
            }
            for j in 0..span.len() {
                let dst = &mut out[j * out_rows + start..j * out_rows + end];
                for (r, d) in dst.iter_mut().enumerate() {
                    *d = view.data[base + r * view.row_stride + j].to_f64();
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
    // Consecutive columns of a row-major matrix are one slice per row.
    let consecutive = !cols.is_empty() && cols.windows(2).all(|w| w[1] == w[0] + 1);
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

/// Whether every value of rows `rows` in the column span `span` of a row-major view is finite
/// (each row folded without early exit, so that the loop vectorises).
fn rows_finite<E: Element>(view: &MatrixView<'_, E>, rows: std::ops::Range<usize>, span: std::ops::Range<usize>) -> bool {
    rows.into_iter().all(|i| {
        view.row_segment(i, span.clone())
            .is_some_and(|row| row.iter().fold(true, |ok, v| ok & v.to_f64().is_finite()))
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
    let consecutive = !columns.is_empty() && columns.windows(2).all(|w| w[1] == w[0] + 1);
    if consecutive && view.col_stride == 1 {
        const CHUNK_ROWS: usize = 1024;
        let span = columns[0]..columns[columns.len() - 1] + 1;
        let all_finite = (0..view.rows.div_ceil(CHUNK_ROWS))
            .into_par_iter()
            .all(|chunk| {
                let rows = chunk * CHUNK_ROWS..((chunk + 1) * CHUNK_ROWS).min(view.rows);
                rows_finite(view, rows, span.clone())
            });
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
