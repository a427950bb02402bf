//! Core errors onto the Python hierarchy of `neuroneval.errors`, whose classes are declared
//! here once, typed (the hierarchy itself stays in Python: its bad-input classes also
//! subclass `ValueError`).

use neuroneval_core::CoreError;
use pyo3::PyErr;

pyo3::import_exception!(neuroneval.errors, ShapeError);
pyo3::import_exception!(neuroneval.errors, EmptyInputError);
pyo3::import_exception!(neuroneval.errors, NonFiniteError);
pyo3::import_exception!(neuroneval.errors, ConceptRangeError);
pyo3::import_exception!(neuroneval.errors, ParameterError);
pyo3::import_exception!(neuroneval.errors, PairIndexError);
pyo3::import_exception!(neuroneval.errors, UnknownMetricError);
pyo3::import_exception!(neuroneval.errors, LabelError);

/// The Python exception of a core error, with the core's message.
pub fn to_py_err(e: CoreError) -> PyErr {
    let message = e.to_string();
    match e {
        CoreError::Shape(_) => ShapeError::new_err(message),
        CoreError::Empty(_) => EmptyInputError::new_err(message),
        CoreError::NonFinite { .. } => NonFiniteError::new_err(message),
        CoreError::ConceptRange { .. } => ConceptRangeError::new_err(message),
        CoreError::Parameter { .. } => ParameterError::new_err(message),
        CoreError::PairOutOfRange { .. } => PairIndexError::new_err(message),
        CoreError::UnknownMetric(..) => UnknownMetricError::new_err(message),
        CoreError::NonBinaryLabel { .. } => LabelError::new_err(message),
    }
}

/// A shape error about one argument.
pub fn shape_error(message: String) -> PyErr {
    to_py_err(CoreError::Shape(message))
}
