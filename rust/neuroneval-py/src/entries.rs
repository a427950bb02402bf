//! Sparse entries placed into compressed columns (`neuroneval_core::entries`), for the delphi
//! cache reader: numpy chunks in, written in place into the caller's CSC arrays.

use neuroneval_core::entries::{self, BadEntry, Location};
use neuroneval_core::Element;
use numpy::{PyReadonlyArray1, PyReadonlyArray2, PyReadwriteArray1};
use pyo3::prelude::*;

use crate::convert::{slice, FloatVector};
use crate::errors::{shape_error, to_py_err};

/// A contiguous `[n, 3]` integer array of locations, of any integer dtype.
#[derive(FromPyObject)]
pub enum Locations<'py> {
    U8(PyReadonlyArray2<'py, u8>),
    U16(PyReadonlyArray2<'py, u16>),
    U32(PyReadonlyArray2<'py, u32>),
    U64(PyReadonlyArray2<'py, u64>),
    I8(PyReadonlyArray2<'py, i8>),
    I16(PyReadonlyArray2<'py, i16>),
    I32(PyReadonlyArray2<'py, i32>),
    I64(PyReadonlyArray2<'py, i64>),
}

/// Applies `f` to the locations as a slice, whatever their integer type.
macro_rules! with_locations {
    ($l:expr, |$s:ident| $body:expr) => {
        with_locations!(@arms $l, $s, $body, U8 U16 U32 U64 I8 I16 I32 I64)
    };
    (@arms $l:expr, $s:ident, $body:expr, $($variant:ident)*) => {
        match $l {
            $(Locations::$variant(a) => {
                let $s = contiguous(a)?;
                $body
            })*
        }
    };
}

fn contiguous<'a, L: Location + numpy::Element>(
    a: &'a PyReadonlyArray2<'_, L>,
) -> PyResult<&'a [L]> {
    a.as_slice()
        .map_err(|_| shape_error("locations must be a C-contiguous [n, 3] array".into()))
}

/// The first bad entry as (index, field, value): field 0-2 a location field out of range
/// (value: the integer), 3 a non-finite value (value: the float, as a Python float).
type Bad = (usize, usize, Py<PyAny>);

fn bad_entry(py: Python<'_>, bad: BadEntry) -> PyResult<Bad> {
    Ok(match bad {
        BadEntry::OutOfRange {
            index,
            field,
            value,
        } => (index, field, value.into_pyobject(py)?.into_any().unbind()),
        BadEntry::NonFinite { index, value } => {
            (index, 3, value.into_pyobject(py)?.into_any().unbind())
        }
    })
}

/// Adds each column's entries of a chunk to `counts` after checking every location against
/// `limits` (sequences, positions, columns) and every value; returns the first bad entry
/// (`Bad`) instead, leaving `counts` as it was.
#[pyfunction]
pub fn count_entries(
    py: Python<'_>,
    locations: Locations<'_>,
    values: FloatVector<'_>,
    limits: (u64, u64, u64),
    mut counts: PyReadwriteArray1<'_, i64>,
) -> PyResult<Option<Bad>> {
    let counts = counts
        .as_slice_mut()
        .map_err(|_| shape_error("counts must be a contiguous int64 array".into()))?;
    let limits = [limits.0, limits.1, limits.2];
    fn go<L: Location, V: Element>(
        py: Python<'_>,
        l: &[L],
        v: &[V],
        limits: [u64; 3],
        counts: &mut [i64],
    ) -> PyResult<Option<BadEntry>> {
        py.detach(|| entries::count_entries(l, v, limits, counts))
            .map_err(to_py_err)
    }
    let found = with_locations!(&locations, |l| match &values {
        FloatVector::F64(v) => go(py, l, slice(v, "values")?, limits, counts)?,
        FloatVector::F32(v) => go(py, l, slice(v, "values")?, limits, counts)?,
        FloatVector::F16(v) => go(py, l, slice(v, "values")?, limits, counts)?,
    });
    found.map(|b| bad_entry(py, b)).transpose()
}

/// Places a chunk's entries into `indices` (rows, ``sequence * ctx_len + position``) and `out`
/// (values, of the chunk's dtype) at each column's cursor, moving the cursors on; `ends` bounds
/// each column's range. Refused (a `ShapeError`, nothing written) when a chunk does not fit.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn place_entries(
    py: Python<'_>,
    locations: Locations<'_>,
    values: FloatVector<'_>,
    ctx_len: u64,
    mut cursor: PyReadwriteArray1<'_, i64>,
    ends: PyReadonlyArray1<'_, i64>,
    mut indices: PyReadwriteArray1<'_, i64>,
    out: Bound<'_, PyAny>,
) -> PyResult<()> {
    let cursor = cursor
        .as_slice_mut()
        .map_err(|_| shape_error("cursor must be a contiguous int64 array".into()))?;
    let ends = slice(&ends, "ends")?;
    let indices = indices
        .as_slice_mut()
        .map_err(|_| shape_error("indices must be a contiguous int64 array".into()))?;
    /// The chunk placed into `out`, which must have the values' dtype.
    #[allow(clippy::too_many_arguments)]
    fn go<L: Location, V: Copy + Send + Sync + numpy::Element>(
        py: Python<'_>,
        l: &[L],
        values: &PyReadonlyArray1<'_, V>,
        ctx_len: u64,
        cursor: &mut [i64],
        ends: &[i64],
        indices: &mut [i64],
        out: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let v = slice(values, "values")?;
        let mut out: PyReadwriteArray1<'_, V> = out.extract().map_err(|_| {
            shape_error("out must be a writable contiguous 1-D array of the values' dtype".into())
        })?;
        let o = out
            .as_slice_mut()
            .map_err(|_| shape_error("out must be a contiguous array".into()))?;
        py.detach(|| entries::place_entries(l, v, ctx_len, cursor, ends, indices, o))
            .map_err(to_py_err)
    }
    with_locations!(&locations, |l| match &values {
        FloatVector::F64(v) => go(py, l, v, ctx_len, cursor, ends, indices, &out),
        FloatVector::F32(v) => go(py, l, v, ctx_len, cursor, ends, indices, &out),
        FloatVector::F16(v) => go(py, l, v, ctx_len, cursor, ends, indices, &out),
    })
}

/// The columns in ``first..last`` (`last` excluded) whose rows do not strictly increase.
#[pyfunction]
pub fn unordered_columns(
    py: Python<'_>,
    indptr: PyReadonlyArray1<'_, i64>,
    indices: PyReadonlyArray1<'_, i64>,
    first: usize,
    last: usize,
) -> PyResult<Vec<usize>> {
    let (indptr, indices) = (slice(&indptr, "indptr")?, slice(&indices, "indices")?);
    py.detach(|| entries::unordered_columns(indptr, indices, first..last))
        .map_err(to_py_err)
}
