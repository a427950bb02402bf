//! The one error type of the core. Every message names the input at fault so a user can act on it.

use std::borrow::Cow;

use thiserror::Error;

/// Everything that can go wrong in the core. None of these is a panic: bad input is reported.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// Two inputs disagree on a dimension, or an input has the wrong rank.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// An input has no rows or no columns.
    #[error("empty input: {0}")]
    Empty(String),
    /// NaN or infinity where finite numbers are required.
    #[error("{what} contains a non-finite value ({value}) at row {row}, column {column}")]
    NonFinite {
        what: &'static str,
        row: usize,
        column: usize,
        value: f64,
    },
    /// A concept probability outside [0, 1].
    #[error("concept values must lie in [0, 1]: column {column}, row {row} holds {value}")]
    ConceptRange {
        row: usize,
        column: usize,
        value: f64,
    },
    /// A parameter outside its domain (alpha, lambda, k, ...), or of the wrong type.
    #[error("invalid parameter {name} = {value}: {reason}")]
    Parameter {
        name: &'static str,
        value: String,
        /// The parameter's rule (its domain), and what was wrong with the value if the rule
        /// alone does not say.
        reason: Cow<'static, str>,
    },
    /// A (unit, concept) pair that indexes outside the matrices.
    #[error("pair {index} = ({unit}, {concept}) is out of range: there are {units} units and {concepts} concepts")]
    PairOutOfRange {
        index: usize,
        unit: i64,
        concept: i64,
        units: usize,
        concepts: usize,
    },
    /// A metric name the library does not know.
    #[error("unknown metric {0:?}; known metrics: {1}")]
    UnknownMetric(String, String),
    /// Labels for the single-vector functions must be binary.
    #[error("labels must be 0 or 1 (or bool): found {value} at position {position}")]
    NonBinaryLabel { position: usize, value: f64 },
}

impl CoreError {
    /// The same error with its (row, column) moved by an offset: a part of a larger matrix
    /// (a shard, a block of units) reports positions in the whole matrix's coordinates.
    pub fn offset_by(self, rows: usize, columns: usize) -> CoreError {
        match self {
            CoreError::NonFinite {
                what,
                row,
                column,
                value,
            } => CoreError::NonFinite {
                what,
                row: row + rows,
                column: column + columns,
                value,
            },
            CoreError::ConceptRange { row, column, value } => CoreError::ConceptRange {
                row: row + rows,
                column: column + columns,
                value,
            },
            other => other,
        }
    }
}

pub type Result<T> = std::result::Result<T, CoreError>;
