//! The metrics of SPEC section 3: names, and what each needs from a unit and a concept.

use crate::error::{CoreError, Result};

/// One evaluation metric s_M(a_k, c_t).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    Recall,
    Precision,
    F1,
    Iou,
    Accuracy,
    BalancedAccuracy,
    InverseBalancedAccuracy,
    Auc,
    InverseAuc,
    Auprc,
    InverseAuprc,
    Correlation,
    Spearman,
    Cosine,
    Wpmi,
    Mad,
    CorrelationTopRandom,
    SpearmanTopRandom,
    CombinedAuc,
    CombinedBalancedAccuracy,
    RecallAuc,
    RecallInverseAuc,
    PrecisionBalancedAccuracy,
    PrecisionInverseBalancedAccuracy,
}

impl Metric {
    pub const ALL: [Metric; 24] = [
        Metric::Recall,
        Metric::Precision,
        Metric::F1,
        Metric::Iou,
        Metric::Accuracy,
        Metric::BalancedAccuracy,
        Metric::InverseBalancedAccuracy,
        Metric::Auc,
        Metric::InverseAuc,
        Metric::Auprc,
        Metric::InverseAuprc,
        Metric::Correlation,
        Metric::Spearman,
        Metric::Cosine,
        Metric::Wpmi,
        Metric::Mad,
        Metric::CorrelationTopRandom,
        Metric::SpearmanTopRandom,
        Metric::CombinedAuc,
        Metric::CombinedBalancedAccuracy,
        Metric::RecallAuc,
        Metric::RecallInverseAuc,
        Metric::PrecisionBalancedAccuracy,
        Metric::PrecisionInverseBalancedAccuracy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Recall => "recall",
            Metric::Precision => "precision",
            Metric::F1 => "f1",
            Metric::Iou => "iou",
            Metric::Accuracy => "accuracy",
            Metric::BalancedAccuracy => "balanced_accuracy",
            Metric::InverseBalancedAccuracy => "inverse_balanced_accuracy",
            Metric::Auc => "auc",
            Metric::InverseAuc => "inverse_auc",
            Metric::Auprc => "auprc",
            Metric::InverseAuprc => "inverse_auprc",
            Metric::Correlation => "correlation",
            Metric::Spearman => "spearman",
            Metric::Cosine => "cosine",
            Metric::Wpmi => "wpmi",
            Metric::Mad => "mad",
            Metric::CorrelationTopRandom => "correlation_top_random",
            Metric::SpearmanTopRandom => "spearman_top_random",
            Metric::CombinedAuc => "combined_auc",
            Metric::CombinedBalancedAccuracy => "combined_balanced_accuracy",
            Metric::RecallAuc => "recall_auc",
            Metric::RecallInverseAuc => "recall_inverse_auc",
            Metric::PrecisionBalancedAccuracy => "precision_balanced_accuracy",
            Metric::PrecisionInverseBalancedAccuracy => "precision_inverse_balanced_accuracy",
        }
    }

    pub fn from_name(name: &str) -> Result<Metric> {
        Metric::ALL
            .iter()
            .copied()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                CoreError::UnknownMetric(name.to_string(), known.join(", "))
            })
    }

    /// The metrics a combination is the harmonic mean of.
    pub fn components(self) -> Option<(Metric, Metric)> {
        use Metric::*;
        match self {
            CombinedAuc => Some((Auc, InverseAuc)),
            CombinedBalancedAccuracy => Some((BalancedAccuracy, InverseBalancedAccuracy)),
            RecallAuc => Some((Recall, Auc)),
            RecallInverseAuc => Some((Recall, InverseAuc)),
            PrecisionBalancedAccuracy => Some((Precision, BalancedAccuracy)),
            PrecisionInverseBalancedAccuracy => Some((Precision, InverseBalancedAccuracy)),
            _ => None,
        }
    }
}

/// Which intermediate quantities a set of metrics needs; computed once per unit and pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// The unit's top-alpha set.
    pub top_set: bool,
    /// The unit's full descending order (midranks, tie groups).
    pub order: bool,
    /// Counts over the top set: TP and the forward auc/auprc/wpmi sums.
    pub forward: bool,
    pub forward_rank_sum: bool,
    pub forward_ap: bool,
    pub forward_log_sum: bool,
    /// Sums over the concept's positive labels.
    pub inverse: bool,
    /// The label sums of mad and inverse_auc (activations, ranks).
    pub inverse_sums: bool,
    pub inverse_ap: bool,
    /// Products over all inputs.
    pub products: bool,
    pub rank_products: bool,
    pub top_random: bool,
}

impl Needs {
    pub fn of(metrics: &[Metric]) -> Needs {
        let mut n = Needs::default();
        let add = |m: Metric, n: &mut Needs| {
            use Metric::*;
            match m {
                Recall
                | Precision
                | F1
                | Iou
                | Accuracy
                | BalancedAccuracy
                | InverseBalancedAccuracy => {
                    n.top_set = true;
                    n.forward = true;
                }
                Auc => {
                    n.top_set = true;
                    n.forward = true;
                    n.forward_rank_sum = true;
                }
                Auprc => {
                    n.top_set = true;
                    n.forward = true;
                    n.forward_ap = true;
                }
                Wpmi => {
                    n.top_set = true;
                    n.forward = true;
                    n.forward_log_sum = true;
                }
                InverseAuc => {
                    n.order = true;
                    n.inverse = true;
                    n.inverse_sums = true;
                }
                InverseAuprc => {
                    n.order = true;
                    n.inverse = true;
                    n.inverse_ap = true;
                }
                Mad => {
                    n.inverse = true;
                    n.inverse_sums = true;
                }
                Correlation | Cosine => n.products = true,
                Spearman => {
                    n.order = true;
                    n.rank_products = true;
                }
                CorrelationTopRandom | SpearmanTopRandom => {
                    n.order = true;
                    n.top_random = true;
                }
                _ => {}
            }
        };
        for &m in metrics {
            match m.components() {
                Some((x, y)) => {
                    add(x, &mut n);
                    add(y, &mut n);
                }
                None => add(m, &mut n),
            }
        }
        n
    }
}

/// Parameters shared by all metrics of one call.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Top-alpha fraction for binarising a unit (SPEC section 2).
    pub alpha: f64,
    /// The lambda of wpmi.
    pub lambda: f64,
    /// Samples per half of the top-random subset.
    pub top_random_k: usize,
    /// The top fraction the top-random subset draws from.
    pub top_random_alpha: f64,
    /// Seed of every random draw.
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            alpha: 0.005,
            lambda: 1.0,
            top_random_k: 25,
            top_random_alpha: 0.002,
            seed: 0,
        }
    }
}

impl Params {
    pub fn validate(&self) -> Result<()> {
        check_fraction("alpha", self.alpha)?;
        check_fraction("top_random_alpha", self.top_random_alpha)?;
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(CoreError::Parameter {
                name: "lambda",
                value: self.lambda.to_string(),
                reason: "must be a finite number >= 0",
            });
        }
        if self.top_random_k == 0 {
            return Err(CoreError::Parameter {
                name: "k",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}

/// Checks 0 < value <= 1, the domain of every alpha.
pub fn check_fraction(name: &'static str, value: f64) -> Result<()> {
    if value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(CoreError::Parameter {
            name,
            value: value.to_string(),
            reason: "must satisfy 0 < alpha <= 1",
        })
    }
}

/// n_top = ceil(alpha * n) in IEEE double arithmetic, at least 1 (SPEC section 2).
pub fn top_count(alpha: f64, n: usize) -> usize {
    ((alpha * n as f64).ceil() as usize).clamp(1, n.max(1))
}

/// Harmonic mean 2xy / (x + y); NaN when undefined.
pub fn harmonic(x: f64, y: f64) -> f64 {
    2.0 * x * y / (x + y)
}
