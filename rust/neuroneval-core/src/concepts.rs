//! Per-concept transforms, computed once per call and shared by every unit.
//!
//! A concept column is stored by its nonzero entries (concepts are probabilities, so 0 is
//! their smallest value and usually the most common one). Every sum a metric needs splits
//! into "the zero group" (a closed form) plus a sum over the nonzero entries.

use rayon::prelude::*;

use crate::error::{CoreError, Result};
use crate::matrix::{Element, MatrixView};
use crate::ranks::{midranks_from_order, sort_descending};

/// Above this fraction of nonzero concept entries, products run as dense matrix products.
pub const DENSE_PRODUCT_DENSITY: f64 = 0.05;

/// Concepts processed together when transposing the input.
const CONCEPT_BLOCK: usize = 64;

/// One concept column c_t.
#[derive(Debug, Clone, Default)]
pub struct ConceptColumn {
    /// Inputs with c > 0, ascending.
    pub nz_index: Vec<u32>,
    /// c at those inputs.
    pub nz_value: Vec<f64>,
    /// The midrank of c (1 = smallest) at those inputs.
    pub nz_rank: Vec<f64>,
    /// #{j : c_j >= c_i} at those inputs: the size of the prediction set at that threshold.
    pub nz_at_least: Vec<u32>,
    /// Inputs with c >= 0.5 (the label y), ascending.
    pub positives: Vec<u32>,
    /// Number of inputs with c == 0, and their midrank (n_zero + 1) / 2.
    pub n_zero: usize,
    pub zero_rank: f64,
    pub sum: f64,
    pub mean: f64,
    /// sum (c - mean)^2, exactly 0 for a constant column.
    pub centred_sq_sum: f64,
    /// sum c^2.
    pub sq_norm: f64,
    /// sum (rank - (N+1)/2)^2, exactly 0 for a constant column.
    pub rank_centred_sq_sum: f64,
}

impl ConceptColumn {
    /// Builds the transforms of one column of N values, all already validated to lie in [0, 1].
    pub fn build(values: &[f64]) -> ConceptColumn {
        let n = values.len();
        let mut col = ConceptColumn::default();
        for (i, &v) in values.iter().enumerate() {
            if v != 0.0 {
                col.nz_index.push(i as u32);
                col.nz_value.push(v);
            }
            if v >= 0.5 {
                col.positives.push(i as u32);
            }
        }
        let nnz = col.nz_index.len();
        col.n_zero = n - nnz;
        col.zero_rank = (col.n_zero as f64 + 1.0) / 2.0;
        col.sum = col.nz_value.iter().sum();
        col.mean = col.sum / n as f64;
        col.sq_norm = col.nz_value.iter().map(|v| v * v).sum();

        // Ranks of the nonzero entries: one descending sort, then midranks above the zero group.
        let order = sort_descending(&col.nz_value);
        let mut desc_rank = vec![0.0; nnz];
        let mut at_least = vec![0u32; nnz];
        midranks_from_order(&col.nz_value, &order, &mut desc_rank, &mut at_least);
        col.nz_rank = desc_rank.iter().map(|&r| n as f64 + 1.0 - r).collect();
        col.nz_at_least = at_least;

        let constant =
            nnz == 0 || (col.n_zero == 0 && col.nz_value.iter().all(|&v| v == col.nz_value[0]));
        if !constant {
            let m = col.mean;
            col.centred_sq_sum = col.n_zero as f64 * m * m
                + col.nz_value.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
            let mid = (n as f64 + 1.0) / 2.0;
            let dz = col.zero_rank - mid;
            col.rank_centred_sq_sum = col.n_zero as f64 * dz * dz
                + col
                    .nz_rank
                    .iter()
                    .map(|r| (r - mid) * (r - mid))
                    .sum::<f64>();
        }
        col
    }

    /// Number of positive labels |y|.
    pub fn n_positive(&self) -> usize {
        self.positives.len()
    }

    /// Position of input `i` among the nonzero entries, if c_i > 0.
    #[inline]
    pub fn find(&self, i: u32, n: usize) -> Option<usize> {
        if self.nz_index.len() == n {
            Some(i as usize)
        } else {
            self.nz_index.binary_search(&i).ok()
        }
    }
}

/// All concepts of a call, transformed once.
#[derive(Debug)]
pub struct ConceptSet {
    pub n_inputs: usize,
    pub columns: Vec<ConceptColumn>,
    /// Column-major dense copies (values, centred midranks) for matrix products, kept only
    /// when the concepts are dense enough for products to beat sparse gathers.
    pub dense: Option<DenseConcepts>,
}

#[derive(Debug)]
pub struct DenseConcepts {
    /// Concept t's values at t*N .. (t+1)*N.
    pub values: Vec<f64>,
    /// Concept t's midranks minus (N+1)/2, same layout.
    pub centred_ranks: Vec<f64>,
}

impl ConceptSet {
    /// Validates (finite, in [0, 1]) and transforms the listed columns of an (N, T) concept
    /// matrix (all of them when `selected` is None); `columns[j]` is `selected[j]`'s transform.
    /// `allow_dense` lets a caller that scores few pairs skip the dense copies.
    pub fn build<E: Element>(
        concepts: MatrixView<'_, E>,
        selected: Option<&[usize]>,
        allow_dense: bool,
    ) -> Result<ConceptSet> {
        let (n, t) = (concepts.rows(), concepts.cols());
        let all: Vec<usize>;
        let selected = match selected {
            Some(s) => s,
            None => {
                all = (0..t).collect();
                &all
            }
        };
        if n == 0 || t == 0 {
            return Err(CoreError::Empty(format!(
                "concepts have shape ({n}, {t}); need at least one input and one concept"
            )));
        }
        if n > u32::MAX as usize {
            return Err(CoreError::Shape(format!(
                "{n} inputs exceed the limit of 2^32 - 1"
            )));
        }
        check_concepts(&concepts, selected)?;
        let columns: Vec<ConceptColumn> = selected
            .par_chunks(CONCEPT_BLOCK)
            .flat_map_iter(|block| {
                let mut buf = vec![0.0; block.len() * n];
                concepts.columns_into(block, &mut buf);
                buf.chunks(n)
                    .map(ConceptColumn::build)
                    .collect::<Vec<_>>()
                    .into_iter()
            })
            .collect();
        let nnz: usize = columns.iter().map(|c| c.nz_index.len()).sum();
        let density = nnz as f64 / (n as f64 * columns.len() as f64);
        let dense = (allow_dense && density > DENSE_PRODUCT_DENSITY)
            .then(|| DenseConcepts::from_columns(&columns, n));
        Ok(ConceptSet {
            n_inputs: n,
            columns,
            dense,
        })
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

impl DenseConcepts {
    fn from_columns(columns: &[ConceptColumn], n: usize) -> DenseConcepts {
        let mid = (n as f64 + 1.0) / 2.0;
        let mut values = vec![0.0; columns.len() * n];
        let mut centred_ranks = vec![0.0; columns.len() * n];
        values
            .par_chunks_mut(n)
            .zip(centred_ranks.par_chunks_mut(n))
            .zip(columns.par_iter())
            .for_each(|((v, r), col)| {
                r.fill(col.zero_rank - mid);
                for (j, &i) in col.nz_index.iter().enumerate() {
                    v[i as usize] = col.nz_value[j];
                    r[i as usize] = col.nz_rank[j] - mid;
                }
            });
        DenseConcepts {
            values,
            centred_ranks,
        }
    }
}

/// The first bad concept value in row-major order: non-finite, or outside [0, 1].
fn check_concepts<E: Element>(concepts: &MatrixView<'_, E>, columns: &[usize]) -> Result<()> {
    concepts.check_finite("concepts", columns)?;
    for i in 0..concepts.rows() {
        for &j in columns {
            let v = concepts.get(i, j);
            if !(0.0..=1.0).contains(&v) {
                return Err(CoreError::ConceptRange {
                    row: i,
                    column: j,
                    value: v,
                });
            }
        }
    }
    Ok(())
}
