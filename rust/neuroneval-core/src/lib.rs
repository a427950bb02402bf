//! neuroneval-core: exact NeuronEval metrics (SPEC section 3) for all (unit, concept) pairs.
//!
//! Nothing here knows about Python. The flow of one call: validate, transform each concept
//! once ([`concepts::ConceptSet`]), transform each unit once ([`unit::UnitProfile`]), then
//! the pair kernel ([`pair::PairKernel`]) for each pair, over blocks of units in parallel.

pub mod by_concept;
mod column_kernels;
pub mod concepts;
pub mod engine;
pub mod entries;
pub mod error;
mod gemm;
pub mod matrix;
pub mod metric;
pub mod numeric;
pub mod pair;
pub mod radix;
pub mod ranks;
pub mod rng;
mod simd;
pub mod single;
pub mod source;
pub mod sweep;
pub mod unit;

pub use concepts::ConceptSet;
pub use engine::{check_pairs, score_matrix, score_matrix_with, score_pairs, KeptBuffers, Scores};
pub use error::{CoreError, Result};
pub use matrix::{Element, MatrixView};
pub use metric::{Metric, Needs, ParamKind, ParamRule, Params};
pub use source::{MatrixSource, RowShards, SparseColumns};
