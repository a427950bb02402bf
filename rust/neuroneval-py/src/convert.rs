//! Arguments as Python hands them over, read in place as core views (never copied).

use half::f16;
use neuroneval_core::metric::{ParamKind, ParamRule};
use neuroneval_core::{
    CoreError, Element, MatrixSource, MatrixView, Metric, RowShards, SparseColumns,
};
use numpy::{PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyType};

use crate::errors::{shape_error, to_py_err};
use crate::scoring::PreparedConcepts;

/// A 2-D float array of a supported dtype, borrowed read-only from numpy.
#[derive(FromPyObject)]
pub enum FloatMatrix<'py> {
    F64(PyReadonlyArray2<'py, f64>),
    F32(PyReadonlyArray2<'py, f32>),
    F16(PyReadonlyArray2<'py, f16>),
}

/// A strided core view of a numpy array, without copying.
pub fn view<'a, E: Element + numpy::Element>(
    array: &'a PyReadonlyArray2<'_, E>,
    name: &str,
) -> PyResult<MatrixView<'a, E>> {
    // numpy's byte strides: the element view below would round a misaligned one down, and
    // the core reads forward only.
    let item = std::mem::size_of::<E>() as isize;
    if array.strides().iter().any(|&s| s < 0 || s % item != 0) {
        return Err(shape_error(format!(
            "{name} has negative or misaligned strides; pass a contiguous copy"
        )));
    }
    let elements = array.as_array();
    let (rows, cols) = elements.dim();
    let (rs, cs) = (
        elements.strides()[0] as usize,
        elements.strides()[1] as usize,
    );
    let len = if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs + 1
    };
    // SAFETY: the view's element (i, j), i < rows, j < cols, lies at ptr + i*rs + j*cs
    // (strides in elements, all >= 0), so [ptr, ptr + len) is inside the array's buffer; the
    // read-only borrow held by `array` keeps it alive and unwritten for 'a.
    let data = unsafe { std::slice::from_raw_parts(elements.as_ptr(), len) };
    MatrixView::new(data, rows, cols, rs, cs).map_err(to_py_err)
}

/// Applies `f` to the core views of one float matrix, whatever its dtype.
macro_rules! with_view {
    ($m:expr, $name:expr, |$v:ident| $body:expr) => {
        match $m {
            $crate::convert::FloatMatrix::F64(x) => {
                let $v = $crate::convert::view(x, $name)?;
                $body
            }
            $crate::convert::FloatMatrix::F32(x) => {
                let $v = $crate::convert::view(x, $name)?;
                $body
            }
            $crate::convert::FloatMatrix::F16(x) => {
                let $v = $crate::convert::view(x, $name)?;
                $body
            }
        }
    };
}
pub(crate) use with_view;

/// A contiguous 1-D float array of a supported dtype (the values of a sparse matrix).
#[derive(FromPyObject)]
pub enum FloatVector<'py> {
    F64(PyReadonlyArray1<'py, f64>),
    F32(PyReadonlyArray1<'py, f32>),
    F16(PyReadonlyArray1<'py, f16>),
}

/// A matrix as Python hands it over: one array (in memory or memory-mapped), a CSC tuple
/// `(rows, indptr, indices, values)`, or a list of arrays stacked along the rows.
#[derive(FromPyObject)]
pub enum SourceArg<'py> {
    Dense(FloatMatrix<'py>),
    Sparse(
        (
            usize,
            PyReadonlyArray1<'py, i64>,
            PyReadonlyArray1<'py, i64>,
            FloatVector<'py>,
        ),
    ),
    Shards(Vec<FloatMatrix<'py>>),
}

/// Concepts as a matrix, or transformed once by `prepare_concepts`.
#[derive(FromPyObject)]
pub enum ConceptsArg<'py> {
    Prepared(Bound<'py, PreparedConcepts>),
    Source(SourceArg<'py>),
}

/// The contiguous data of a 1-D array.
pub fn slice<'a, T: numpy::Element>(
    a: &'a PyReadonlyArray1<'_, T>,
    what: &str,
) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| shape_error(format!("{what} must be a contiguous 1-D array")))
}

/// The core source that reads `arg` in place.
pub fn source<'a>(arg: &'a SourceArg<'_>, name: &str) -> PyResult<Box<dyn MatrixSource + 'a>> {
    Ok(match arg {
        SourceArg::Dense(m) => with_view!(m, name, |v| Box::new(v) as Box<dyn MatrixSource>),
        SourceArg::Sparse((rows, indptr, indices, values)) => {
            let (indptr, indices) = (slice(indptr, name)?, slice(indices, name)?);
            macro_rules! sparse {
                ($v:expr) => {
                    Box::new(
                        SparseColumns::new(*rows, indptr, indices, slice($v, name)?)
                            .map_err(to_py_err)?,
                    ) as Box<dyn MatrixSource>
                };
            }
            match values {
                FloatVector::F64(v) => sparse!(v),
                FloatVector::F32(v) => sparse!(v),
                FloatVector::F16(v) => sparse!(v),
            }
        }
        SourceArg::Shards(list) => {
            macro_rules! shards {
                ($variant:ident) => {{
                    let views = list
                        .iter()
                        .map(|m| match m {
                            FloatMatrix::$variant(x) => view(x, name),
                            _ => Err(shape_error(format!(
                                "the shards of {name} must all have the same dtype"
                            ))),
                        })
                        .collect::<PyResult<Vec<_>>>()?;
                    Box::new(RowShards::new(views).map_err(to_py_err)?) as Box<dyn MatrixSource>
                }};
            }
            match list.first() {
                Some(FloatMatrix::F32(_)) => shards!(F32),
                Some(FloatMatrix::F16(_)) => shards!(F16),
                _ => shards!(F64),
            }
        }
    })
}

/// The (unit, concept) index pairs of a (P, 2) array, any strides.
pub fn pairs(array: &PyReadonlyArray2<'_, i64>) -> PyResult<Vec<(i64, i64)>> {
    let pairs = array.as_array();
    let (rows, cols) = pairs.dim();
    if cols != 2 {
        return Err(shape_error(format!(
            "pairs must have shape (P, 2), got ({rows}, {cols})"
        )));
    }
    Ok(pairs.rows().into_iter().map(|p| (p[0], p[1])).collect())
}

/// Metric names as core metrics.
pub fn metrics(names: &[String]) -> PyResult<Vec<Metric>> {
    Metric::from_names(names).map_err(to_py_err)
}

/// `repr(value)`, cut short: an error message quotes it, and an array's repr is long.
fn short_repr(value: &Bound<'_, PyAny>) -> String {
    const MAX: usize = 60;
    let repr = value
        .repr()
        .map_or_else(|_| "<unprintable>".to_string(), |r| r.to_string());
    let line = repr.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// "a str", "an int", "a numpy.ndarray": the type of `value`, for an error message.
fn type_phrase(value: &Bound<'_, PyAny>) -> String {
    let ty = value.get_type();
    let name = ty
        .fully_qualified_name()
        .map_or_else(|_| "<unknown type>".to_string(), |n| n.to_string());
    let article = match name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    };
    format!("{article} {name}")
}

/// Whether `value` has the kind of number `kind` asks for: a `numbers.Real` (Python int and
/// float, numpy integer and floating scalars) or a `numbers.Integral` (Python int, numpy
/// integer scalars), and never a bool (Python's or numpy's). Strings, None, complex numbers,
/// arrays of any shape (0-d included) and tensors are not numbers here.
fn has_kind(value: &Bound<'_, PyAny>, kind: ParamKind) -> PyResult<bool> {
    static REAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static INTEGRAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    if value.is_instance_of::<PyBool>() {
        return Ok(false);
    }
    let py = value.py();
    let abc = match kind {
        ParamKind::Real => REAL.import(py, "numbers", "Real")?,
        ParamKind::Integer => INTEGRAL.import(py, "numbers", "Integral")?,
    };
    value.is_instance(abc)
}

/// The one door of every scoring parameter from Python: `value` as the number its rule
/// asks for (f64 for a real parameter; u64, usize, ... for an integer one), or a
/// `ParameterError` that names the parameter, quotes the value and states the rule; a
/// value of the wrong type also says its type. Range rules beyond the target type's are the
/// core's ([`neuroneval_core::Params::validate`]).
pub fn parameter<'py, T: FromPyObjectOwned<'py>>(
    rule: &'static ParamRule,
    value: &Bound<'py, PyAny>,
) -> PyResult<T> {
    if !has_kind(value, rule.kind)? {
        return Err(to_py_err(CoreError::Parameter {
            name: rule.name,
            value: short_repr(value),
            reason: format!("{}, not {}", rule.rule, type_phrase(value)).into(),
        }));
    }
    // A number of the right kind that the type cannot hold (a negative seed, k = 2^70, an
    // int beyond the doubles) is outside the domain.
    value
        .extract::<T>()
        .map_err(|_| to_py_err(rule.error(short_repr(value))))
}
