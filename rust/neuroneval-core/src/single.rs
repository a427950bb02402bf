//! Drop-in ROC AUC and average precision for binary labels: one vector, or matching columns.

use rayon::prelude::*;

use crate::error::{CoreError, Result};
use crate::matrix::{Element, MatrixView};
use crate::ranks;

/// Which statistic a batched call computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankStatistic {
    RocAuc,
    AveragePrecision,
}

impl RankStatistic {
    fn apply(self, labels: &[bool], scores: &[f64]) -> f64 {
        match self {
            RankStatistic::RocAuc => ranks::roc_auc(labels, scores),
            RankStatistic::AveragePrecision => ranks::average_precision(labels, scores),
        }
    }
}

/// Labels must be exactly 0 or 1; the error names the first offending position.
fn binary_labels(values: impl Iterator<Item = f64>, first: usize) -> Result<Vec<bool>> {
    values
        .enumerate()
        .map(|(i, v)| {
            if v == 1.0 {
                Ok(true)
            } else if v == 0.0 {
                Ok(false)
            } else {
                Err(CoreError::NonBinaryLabel {
                    position: first + i,
                    value: v,
                })
            }
        })
        .collect()
}

fn finite_scores(values: impl Iterator<Item = f64>, column: usize) -> Result<Vec<f64>> {
    values
        .enumerate()
        .map(|(row, v)| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(CoreError::NonFinite {
                    what: "scores",
                    row,
                    column,
                    value: v,
                })
            }
        })
        .collect()
}

/// The statistic of each column j of (labels[:, j], scores[:, j]).
pub fn columns<L: Element, S: Element>(
    stat: RankStatistic,
    labels: MatrixView<'_, L>,
    scores: MatrixView<'_, S>,
) -> Result<Vec<f64>> {
    let (n, m) = (scores.rows(), scores.cols());
    if labels.rows() != n || labels.cols() != m {
        return Err(CoreError::Shape(format!(
            "labels have shape ({}, {}) but scores have shape ({n}, {m})",
            labels.rows(),
            labels.cols()
        )));
    }
    if n == 0 {
        return Err(CoreError::Empty("no samples".into()));
    }
    // Validate sequentially so the reported error is the first one, whatever the threads.
    let mut cols = Vec::with_capacity(m);
    for j in 0..m {
        let y = binary_labels((0..n).map(|i| labels.get(i, j)), 0).map_err(|e| match e {
            CoreError::NonBinaryLabel { position, value } => CoreError::NonBinaryLabel {
                position: position * m + j,
                value,
            },
            other => other,
        })?;
        let s = finite_scores((0..n).map(|i| scores.get(i, j)), j)?;
        cols.push((y, s));
    }
    Ok(cols.par_iter().map(|(y, s)| stat.apply(y, s)).collect())
}
