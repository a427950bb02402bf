//! Where the kernels read an (N, K) matrix from. One trait covers a strided view of one
//! buffer (an in-memory array or a memory-mapped `.npy` file), row shards stacked along N,
//! and sparse columns (CSC), so the kernels read every source in place, without a dense copy.

use crate::error::{CoreError, Result};
use crate::matrix::{Element, MatrixView};
use crate::numeric::{sum_and_max_abs, widen_with_sum_and_max_abs};

/// A read-only (rows x cols) matrix that the kernels read column by column.
pub trait MatrixSource: Sync {
    fn rows(&self) -> usize;
    fn cols(&self) -> usize;
    /// Copies the listed columns into `out` as contiguous f64 vectors (`rows()` each),
    /// writing every element of `out` (callers pass stale buffers).
    fn columns_into(&self, cols: &[usize], out: &mut [f64]);
    /// Appends each listed column's nonzero entries (NaN included), rows ascending, to
    /// `index[j]` and `value[j]`.
    fn nonzeros_into(&self, cols: &[usize], index: &mut [Vec<u32>], value: &mut [Vec<f64>]);
    /// The first non-finite value of the listed columns in row-major order, as an error
    /// naming its row and column.
    fn check_finite(&self, what: &'static str, cols: &[usize]) -> Result<()>;
    /// Copies column `col` into `out` (`rows()` values) and returns [`sum_and_max_abs`] of
    /// the copy: a source whose column lies contiguous in memory computes both in one pass.
    fn column_with_sums(&self, col: usize, out: &mut [f64]) -> (f64, f64) {
        copy_then_sums(self, col, out)
    }
    /// Whether the source stores its columns sparsely, so that [`MatrixSource::nonzeros_into`]
    /// reads only stored entries (a dense source reads every value).
    fn stores_entries(&self) -> bool {
        false
    }
}

impl<E: Element> MatrixSource for MatrixView<'_, E> {
    fn rows(&self) -> usize {
        MatrixView::rows(self)
    }

    fn cols(&self) -> usize {
        MatrixView::cols(self)
    }

    fn columns_into(&self, cols: &[usize], out: &mut [f64]) {
        self.columns_into_at(cols, out, MatrixView::rows(self));
    }

    fn nonzeros_into(&self, cols: &[usize], index: &mut [Vec<u32>], value: &mut [Vec<f64>]) {
        self.nonzeros_into_at(cols, index, value, 0);
    }

    fn check_finite(&self, what: &'static str, cols: &[usize]) -> Result<()> {
        MatrixView::check_finite(self, what, cols)
    }

    fn column_with_sums(&self, col: usize, out: &mut [f64]) -> (f64, f64) {
        let rows = MatrixView::rows(self);
        if let Some(column) = self.column_slice(col) {
            if let Some(sums) = widen_with_sum_and_max_abs(column, &mut out[..rows]) {
                return sums;
            }
        }
        copy_then_sums(self, col, out)
    }
}

/// [`MatrixSource::column_with_sums`] in two passes: the copy, then the sums of it.
fn copy_then_sums<S: MatrixSource + ?Sized>(source: &S, col: usize, out: &mut [f64]) -> (f64, f64) {
    source.columns_into(&[col], out);
    sum_and_max_abs(&out[..source.rows()])
}

/// Views with the same columns stacked along the rows, as an extraction run writes shards.
#[derive(Debug)]
pub struct RowShards<'a, E> {
    shards: Vec<MatrixView<'a, E>>,
    /// Row offset of each shard, and the total row count last.
    starts: Vec<usize>,
    cols: usize,
}

impl<'a, E: Element> RowShards<'a, E> {
    /// Fails unless there is at least one shard and all have the same number of columns.
    pub fn new(shards: Vec<MatrixView<'a, E>>) -> Result<Self> {
        let cols = match shards.first() {
            Some(first) => first.cols(),
            None => {
                return Err(CoreError::Empty(
                    "a shard list needs at least one shard".into(),
                ))
            }
        };
        if let Some((i, s)) = shards.iter().enumerate().find(|(_, s)| s.cols() != cols) {
            return Err(CoreError::Shape(format!(
                "shard {i} has {} columns but shard 0 has {cols}",
                s.cols()
            )));
        }
        let mut starts = vec![0];
        for s in &shards {
            starts.push(starts[starts.len() - 1] + s.rows());
        }
        Ok(Self {
            shards,
            starts,
            cols,
        })
    }
}

impl<E: Element> MatrixSource for RowShards<'_, E> {
    fn rows(&self) -> usize {
        self.starts[self.starts.len() - 1]
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn columns_into(&self, cols: &[usize], out: &mut [f64]) {
        let rows = self.rows();
        for (shard, &start) in self.shards.iter().zip(&self.starts) {
            shard.columns_into_at(cols, &mut out[start..], rows);
        }
    }

    fn nonzeros_into(&self, cols: &[usize], index: &mut [Vec<u32>], value: &mut [Vec<f64>]) {
        for (shard, &start) in self.shards.iter().zip(&self.starts) {
            shard.nonzeros_into_at(cols, index, value, start);
        }
    }

    fn check_finite(&self, what: &'static str, cols: &[usize]) -> Result<()> {
        for (shard, &start) in self.shards.iter().zip(&self.starts) {
            shard
                .check_finite(what, cols)
                .map_err(|e| e.offset_by(start, 0))?;
        }
        Ok(())
    }
}

/// A sparse matrix by columns (CSC): column j's entries are `indices[indptr[j]..indptr[j+1]]`
/// (rows, strictly ascending) with `values` alongside. Absent entries are 0.
#[derive(Debug)]
pub struct SparseColumns<'a, E> {
    rows: usize,
    indptr: &'a [i64],
    indices: &'a [i64],
    values: &'a [E],
}

impl<'a, E: Element> SparseColumns<'a, E> {
    /// Checks the structure: pointers ascending from 0 to nnz, rows in range and strictly
    /// ascending within each column (no duplicates).
    pub fn new(
        rows: usize,
        indptr: &'a [i64],
        indices: &'a [i64],
        values: &'a [E],
    ) -> Result<Self> {
        let bad = |m: String| Err(CoreError::Shape(format!("sparse matrix: {m}")));
        if indptr.is_empty() {
            return bad("the column pointer array is empty".into());
        }
        if indices.len() != values.len() {
            return bad(format!(
                "{} row indices but {} values",
                indices.len(),
                values.len()
            ));
        }
        if indptr[0] != 0 || indptr[indptr.len() - 1] != indices.len() as i64 {
            return bad(format!(
                "column pointers must run from 0 to {} (the number of entries)",
                indices.len()
            ));
        }
        for (j, w) in indptr.windows(2).enumerate() {
            if w[1] < w[0] {
                return bad(format!("column pointers decrease at column {j}"));
            }
            let column = &indices[w[0] as usize..w[1] as usize];
            if let Some(&r) = column.iter().find(|&&r| r < 0 || r as usize >= rows) {
                return bad(format!("column {j} has row index {r} outside 0..{rows}"));
            }
            if column.windows(2).any(|p| p[1] <= p[0]) {
                return bad(format!(
                    "column {j} has unsorted or duplicate row indices (sum duplicates and sort first)"
                ));
            }
        }
        Ok(Self {
            rows,
            indptr,
            indices,
            values,
        })
    }

    fn column(&self, j: usize) -> (&'a [i64], &'a [E]) {
        let (s, e) = (self.indptr[j] as usize, self.indptr[j + 1] as usize);
        (&self.indices[s..e], &self.values[s..e])
    }
}

impl<E: Element> MatrixSource for SparseColumns<'_, E> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.indptr.len() - 1
    }

    fn columns_into(&self, cols: &[usize], out: &mut [f64]) {
        for (&c, dst) in cols.iter().zip(out.chunks_mut(self.rows)) {
            dst.fill(0.0);
            let (rows, values) = self.column(c);
            for (&i, &v) in rows.iter().zip(values) {
                dst[i as usize] = v.to_f64();
            }
        }
    }

    fn nonzeros_into(&self, cols: &[usize], index: &mut [Vec<u32>], value: &mut [Vec<f64>]) {
        for ((&c, idx), val) in cols.iter().zip(index).zip(value) {
            let (rows, values) = self.column(c);
            for (&i, &v) in rows.iter().zip(values) {
                let v = v.to_f64();
                if v != 0.0 {
                    idx.push(i as u32);
                    val.push(v);
                }
            }
        }
    }

    fn stores_entries(&self) -> bool {
        true
    }

    fn check_finite(&self, what: &'static str, cols: &[usize]) -> Result<()> {
        // The first in row-major order: the smallest (row, column) among the bad entries.
        let mut first: Option<(usize, usize, f64)> = None;
        for &c in cols {
            let (rows, values) = self.column(c);
            if let Some((&i, v)) = rows
                .iter()
                .zip(values)
                .map(|(i, v)| (i, v.to_f64()))
                .find(|(_, v)| !v.is_finite())
            {
                let here = (i as usize, c, v);
                if first.is_none_or(|f| (here.0, here.1) < (f.0, f.1)) {
                    first = Some(here);
                }
            }
        }
        match first {
            None => Ok(()),
            Some((row, column, value)) => Err(CoreError::NonFinite {
                what,
                row,
                column,
                value,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A column copied with its sums in one pass equals the copy and then the sums, bit for
    /// bit, for each element type the fused pass takes and one it leaves to the plain path,
    /// contiguous and strided, around the groups of eight, with NaN, infinities, -0 and
    /// magnitudes far apart.
    #[test]
    fn a_column_copied_with_its_sums_equals_the_copy_then_the_sums() {
        fn check<E: Element>(values: &[E]) {
            let n = values.len();
            // column 0 contiguous (column-major), column 1 strided (row-major, two columns)
            let twice: Vec<E> = values.iter().flat_map(|&v| [v, v]).collect();
            let column_major = MatrixView::new(values, n, 1, 1, n).unwrap();
            let row_major = MatrixView::row_major(&twice, n, 2).unwrap();
            for (view, col) in [(&column_major, 0), (&row_major, 1)] {
                let mut want = vec![7.0; n];
                view.columns_into(&[col], &mut want);
                let want_sums = sum_and_max_abs(&want);
                let mut got = vec![7.0; n];
                let got_sums = view.column_with_sums(col, &mut got);
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "n = {n}");
                assert_eq!(
                    [got_sums.0.to_bits(), got_sums.1.to_bits()],
                    [want_sums.0.to_bits(), want_sums.1.to_bits()],
                    "n = {n}"
                );
            }
        }
        let mut state = 3u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for n in [1, 7, 8, 9, 15, 16, 17, 1001] {
            let mut values: Vec<f64> = (0..n)
                .map(|i| next() * 10f64.powi(i as i32 % 9 - 4))
                .collect();
            for (at, special) in [(0, -0.0), (n / 2, f64::INFINITY), (n - 1, f64::NAN)] {
                if n > 8 {
                    values[at] = special;
                }
            }
            check(&values);
            check(&values.iter().map(|&v| v as f32).collect::<Vec<_>>());
            check(
                &values
                    .iter()
                    .map(|&v| half::f16::from_f64(v))
                    .collect::<Vec<_>>(),
            );
        }
    }

    /// A dense 5 x 3 matrix with zeros, in three layouts; every source reads the same.
    #[test]
    fn shards_and_sparse_read_like_the_dense_view() {
        let dense: Vec<f64> = vec![
            0.0, 1.5, 0.0, //
            2.0, 0.0, 0.0, //
            0.0, -3.0, 4.0, //
            0.0, 0.0, 0.0, //
            5.0, 0.5, 0.0,
        ];
        let view = MatrixView::row_major(&dense, 5, 3).unwrap();
        let shards = RowShards::new(vec![
            MatrixView::row_major(&dense[..6], 2, 3).unwrap(),
            MatrixView::row_major(&dense[6..9], 1, 3).unwrap(),
            MatrixView::row_major(&dense[9..], 2, 3).unwrap(),
        ])
        .unwrap();
        // Column-major nonzeros of `dense`, by hand.
        let indptr = [0i64, 2, 5, 6];
        let indices = [1i64, 4, 0, 2, 4, 2];
        let values = [2.0f64, 5.0, 1.5, -3.0, 0.5, 4.0];
        let sparse = SparseColumns::new(5, &indptr, &indices, &values).unwrap();
        let sources: [&dyn MatrixSource; 3] = [&view, &shards, &sparse];
        let cols = [2usize, 0, 1];
        let mut expected = vec![0.0; 15];
        for (j, &c) in cols.iter().enumerate() {
            for i in 0..5 {
                expected[j * 5 + i] = dense[i * 3 + c];
            }
        }
        for s in sources {
            assert_eq!((s.rows(), s.cols()), (5, 3));
            let mut out = vec![f64::NAN; 15];
            s.columns_into(&cols, &mut out);
            assert_eq!(out, expected);
            let (mut idx, mut val) = (vec![Vec::new(); 3], vec![Vec::new(); 3]);
            s.nonzeros_into(&cols, &mut idx, &mut val);
            for (j, &c) in cols.iter().enumerate() {
                let nz: Vec<(u32, f64)> = (0..5)
                    .filter(|&i| dense[i * 3 + c] != 0.0)
                    .map(|i| (i as u32, dense[i * 3 + c]))
                    .collect();
                let got: Vec<(u32, f64)> =
                    idx[j].iter().copied().zip(val[j].iter().copied()).collect();
                assert_eq!(got, nz);
            }
            assert!(s.check_finite("x", &cols).is_ok());
        }
    }

    #[test]
    fn first_non_finite_is_row_major_in_every_source() {
        // Bad values at (3, 0) and (1, 2): row-major order reports (1, 2).
        let mut dense = vec![0.0f64; 15];
        dense[3 * 3] = f64::NAN;
        dense[3 + 2] = f64::INFINITY;
        let view = MatrixView::row_major(&dense, 5, 3).unwrap();
        let shards = RowShards::new(vec![
            MatrixView::row_major(&dense[..3], 1, 3).unwrap(),
            MatrixView::row_major(&dense[3..], 4, 3).unwrap(),
        ])
        .unwrap();
        let indptr = [0i64, 1, 1, 2];
        let indices = [3i64, 1];
        let values = [f64::NAN, f64::INFINITY];
        let sparse = SparseColumns::new(5, &indptr, &indices, &values).unwrap();
        let sources: [&dyn MatrixSource; 3] = [&view, &shards, &sparse];
        for s in sources {
            match s.check_finite("activations", &[0, 1, 2]) {
                Err(CoreError::NonFinite { row, column, .. }) => assert_eq!((row, column), (1, 2)),
                other => panic!("expected a NonFinite error, got {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_sparse_structure_is_an_error() {
        let v = [1.0f64, 2.0];
        let cases: [(&[i64], &[i64]); 5] = [
            (&[0, 2], &[1, 1]), // duplicate row
            (&[0, 2], &[1, 0]), // unsorted rows
            (&[0, 2], &[0, 7]), // row out of range
            (&[0, 3], &[0, 1]), // pointer past the end
            (&[1, 2], &[0, 1]), // first pointer not 0
        ];
        for (indptr, indices) in cases {
            assert!(
                matches!(
                    SparseColumns::new(3, indptr, indices, &v),
                    Err(CoreError::Shape(_))
                ),
                "{indptr:?} {indices:?}"
            );
        }
        let one: [MatrixView<'_, f64>; 0] = [];
        assert!(RowShards::new(one.to_vec()).is_err());
    }
}
