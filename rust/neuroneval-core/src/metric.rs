//! The metrics of SPEC section 3: names, and what each needs from a unit and a concept.

use crate::error::{CoreError, Result};

/// What one metric is, as users see it: its name, the parameters it takes, the range the
/// sanity checks normalise by, and the NeuronEval paper's sanity-check verdict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricFacts {
    /// The name `score` and the metric functions use.
    pub name: &'static str,
    /// Whether it binarises the unit at its top-alpha fraction.
    pub uses_alpha: bool,
    /// Whether it takes wpmi's lambda.
    pub uses_lambda: bool,
    /// Whether it draws a seeded random subset (k, top alpha, seed).
    pub uses_sampling: bool,
    /// The range the sanity checks normalise by; None for data-ranged metrics.
    pub value_range: Option<(f64, f64)>,
    /// Whether the NeuronEval paper found it passes both sanity checks.
    pub passes_sanity: bool,
    /// One line on what it measures.
    pub description: &'static str,
}

const UNIT: Option<(f64, f64)> = Some((0.0, 1.0));
const SIGNED: Option<(f64, f64)> = Some((-1.0, 1.0));
const DATA: Option<(f64, f64)> = None;

/// Declares every metric once: the enum, its canonical order ([`Metric::ALL`]), its names
/// and its facts all come from this one table.
macro_rules! metrics {
    ($(
        $variant:ident $name:literal
        alpha $alpha:literal, lambda $lambda:literal, sampling $sampling:literal,
        range $range:ident, passes $passes:literal,
        $description:literal;
    )*) => {
        /// One evaluation metric s_M(a_k, c_t).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Metric {
            $($variant,)*
        }

        impl Metric {
            /// Every metric, in the library's canonical order.
            pub const ALL: [Metric; [$(stringify!($variant)),*].len()] = [$(Metric::$variant),*];

            /// The metric's facts (name, parameters, range, sanity verdict).
            pub const fn facts(self) -> MetricFacts {
                match self {
                    $(Metric::$variant => MetricFacts {
                        name: $name,
                        uses_alpha: $alpha,
                        uses_lambda: $lambda,
                        uses_sampling: $sampling,
                        value_range: $range,
                        passes_sanity: $passes,
                        description: $description,
                    },)*
                }
            }
        }
    };
}

metrics! {
    Recall "recall" alpha true, lambda false, sampling false, range UNIT, passes false,
        "TP / |b|: share of top-activating inputs that show the concept";
    Precision "precision" alpha true, lambda false, sampling false, range UNIT, passes false,
        "TP / |y|: share of concept inputs that are top-activating";
    F1 "f1" alpha true, lambda false, sampling false, range UNIT, passes true,
        "2TP / (2TP + FP + FN)";
    Iou "iou" alpha true, lambda false, sampling false, range UNIT, passes true,
        "TP / (|b| + |y| - TP)";
    Accuracy "accuracy" alpha true, lambda false, sampling false, range UNIT, passes false,
        "(TP + TN) / N";
    BalancedAccuracy "balanced_accuracy" alpha true, lambda false, sampling false, range UNIT,
        passes false, "mean of the rates on b = 1 and b = 0";
    InverseBalancedAccuracy "inverse_balanced_accuracy" alpha true, lambda false, sampling false,
        range UNIT, passes false, "mean of the rates on y = 1 and y = 0";
    Auc "auc" alpha true, lambda false, sampling false, range UNIT, passes false,
        "ROC AUC, label b, score c";
    InverseAuc "inverse_auc" alpha false, lambda false, sampling false, range UNIT, passes false,
        "ROC AUC, label y, score a";
    Auprc "auprc" alpha true, lambda false, sampling false, range UNIT, passes true,
        "average precision, label b, score c";
    InverseAuprc "inverse_auprc" alpha false, lambda false, sampling false, range UNIT,
        passes false, "average precision, label y, score a";
    Correlation "correlation" alpha false, lambda false, sampling false, range SIGNED,
        passes true, "Pearson r(a, c) over all inputs";
    Spearman "spearman" alpha false, lambda false, sampling false, range SIGNED, passes false,
        "Pearson r of the midranks of a and c";
    Cosine "cosine" alpha false, lambda false, sampling false, range SIGNED, passes true,
        "<a, c> / (|a| |c|)";
    Wpmi "wpmi" alpha true, lambda true, sampling false, range DATA, passes false,
        "mean log c over b minus lambda log mean c";
    Mad "mad" alpha false, lambda false, sampling false, range DATA, passes false,
        "mean a on y = 1 minus mean a on y = 0";
    CorrelationTopRandom "correlation_top_random" alpha false, lambda false, sampling true,
        range SIGNED, passes false, "Pearson r on k top + k random inputs";
    SpearmanTopRandom "spearman_top_random" alpha false, lambda false, sampling true,
        range SIGNED, passes false, "Spearman on k top + k random inputs";
    CombinedAuc "combined_auc" alpha true, lambda false, sampling false, range UNIT,
        passes false, "harmonic mean of auc and inverse_auc";
    CombinedBalancedAccuracy "combined_balanced_accuracy" alpha true, lambda false,
        sampling false, range UNIT, passes false,
        "harmonic mean of balanced_accuracy and inverse_balanced_accuracy";
    RecallAuc "recall_auc" alpha true, lambda false, sampling false, range UNIT, passes false,
        "harmonic mean of recall and auc";
    RecallInverseAuc "recall_inverse_auc" alpha true, lambda false, sampling false, range UNIT,
        passes false, "harmonic mean of recall and inverse_auc";
    PrecisionBalancedAccuracy "precision_balanced_accuracy" alpha true, lambda false,
        sampling false, range UNIT, passes false,
        "harmonic mean of precision and balanced_accuracy";
    PrecisionInverseBalancedAccuracy "precision_inverse_balanced_accuracy" alpha true,
        lambda false, sampling false, range UNIT, passes false,
        "harmonic mean of precision and inverse_balanced_accuracy";
}

impl Metric {
    pub const fn name(self) -> &'static str {
        self.facts().name
    }

    /// The metrics named, in order: at least one, each known.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Vec<Metric>> {
        if names.is_empty() {
            return Err(CoreError::Empty("no metric was requested".into()));
        }
        names
            .iter()
            .map(|n| Metric::from_name(n.as_ref()))
            .collect()
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
    /// The concepts' centred norms (Pearson r's denominator; cosine takes the plain norms).
    pub centred_norms: bool,
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
                Correlation => {
                    n.products = true;
                    n.centred_norms = true;
                }
                Cosine => n.products = true,
                Spearman => {
                    n.order = true;
                    n.rank_products = true;
                }
                // (the top draws' pool is ordered on its own, not with all N)
                CorrelationTopRandom | SpearmanTopRandom => n.top_random = true,
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

/// Parameters shared by all metrics of one call. Every rule of them lives here: the ranges
/// in [`Params::validate`], and the domain of each, as its errors state it, in
/// [`Params::RULES`] (which a binding also reports when a value has the wrong type).
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// The units are already binary (the NeuronEval reference's `alpha=False`): the top set
    /// b is {i : a_i != 0} instead of the top-alpha set (alpha is then unused), and the
    /// top-random subset is all of b plus k inputs drawn from all N (the reference's
    /// `*_top_and_random_binary`). Callers check that the units hold only 0 and 1.
    pub binary_units: bool,
    /// Values follow the NeuronEval reference implementation's conventions instead of
    /// SPEC section 1's: where a metric is undefined it returns what the reference's clamped
    /// denominators give (0 mostly; +inf for wpmi of an empty concept), and the correlations
    /// carry its factor (m - 1) / m, m the number of inputs they are computed on.
    pub reference_values: bool,
}

impl Default for Params {
    /// Every parameter at its declared default ([`Params::RULES`]).
    fn default() -> Self {
        let default = |name| Params::rule_of(name).default;
        Params {
            alpha: default("alpha"),
            lambda: default("lam"),
            top_random_k: default("k") as usize,
            top_random_alpha: default("top_alpha"),
            seed: default("seed") as u64,
            binary_units: false,
            reference_values: false,
        }
    }
}

/// What kind of number a parameter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A real number (not a bool, a string or a complex number).
    Real,
    /// An integer (not a bool or a float, even a whole one).
    Integer,
}

/// An interval of the real line, each end open or closed (an infinite end is open).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Domain {
    pub low: f64,
    pub low_open: bool,
    pub high: f64,
    pub high_open: bool,
}

impl Domain {
    /// Whether `value` lies in the interval (NaN never does).
    pub fn contains(&self, value: f64) -> bool {
        let above = if self.low_open {
            value > self.low
        } else {
            value >= self.low
        };
        let below = if self.high_open {
            value < self.high
        } else {
            value <= self.high
        };
        above && below
    }
}

/// (0, 1]: the domain of every alpha.
const FRACTION: Domain = Domain {
    low: 0.0,
    low_open: true,
    high: 1.0,
    high_open: false,
};

/// 2^64: one past the largest integer parameter (a u64).
const TWO_TO_64: f64 = 18_446_744_073_709_551_616.0;

/// One parameter as users pass it: its name, kind, default, domain and help; the one
/// declaration that the bindings' signatures, a CLI's flags and the hostile tests follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamRule {
    pub name: &'static str,
    pub kind: ParamKind,
    /// The default (a whole number for an integer parameter).
    pub default: f64,
    pub domain: Domain,
    /// The domain, as a sentence that starts with the name.
    pub rule: &'static str,
    /// What the parameter does, in one line (a CLI's help and a docstring's).
    pub help: &'static str,
}

impl ParamRule {
    /// `value` if it lies in the domain, else the error quoting it.
    fn check(&self, value: f64) -> Result<()> {
        if self.domain.contains(value) {
            Ok(())
        } else {
            Err(self.error(value.to_string()))
        }
    }

    /// The error for `value` (as the user wrote it), outside the domain.
    pub fn error(&self, value: String) -> CoreError {
        CoreError::Parameter {
            name: self.name,
            value,
            reason: self.rule.into(),
        }
    }
}

impl Params {
    /// alpha, lam, k, top_alpha and seed, in the order users pass them.
    pub const RULES: [ParamRule; 5] = [
        ParamRule {
            name: "alpha",
            kind: ParamKind::Real,
            default: 0.005,
            domain: FRACTION,
            rule: "alpha must be a real number with 0 < alpha <= 1",
            help: "top-alpha fraction that binarises each unit",
        },
        ParamRule {
            name: "lam",
            kind: ParamKind::Real,
            default: 1.0,
            domain: Domain {
                low: 0.0,
                low_open: false,
                high: f64::INFINITY,
                high_open: true,
            },
            rule: "lam (wpmi's lambda) must be a finite real number >= 0",
            help: "wpmi's lambda, the weight of the concept's log mean",
        },
        ParamRule {
            name: "k",
            kind: ParamKind::Integer,
            default: 25.0,
            domain: Domain {
                low: 1.0,
                low_open: false,
                high: TWO_TO_64,
                high_open: true,
            },
            rule: "k must be an integer in [1, 2^64)",
            help: "inputs the top-random metrics draw from the top and from all inputs, each",
        },
        ParamRule {
            name: "top_alpha",
            kind: ParamKind::Real,
            default: 0.002,
            domain: FRACTION,
            rule: "top_alpha must be a real number with 0 < top_alpha <= 1",
            help: "the top fraction the top-random metrics draw from",
        },
        ParamRule {
            name: "seed",
            kind: ParamKind::Integer,
            default: 0.0,
            domain: Domain {
                low: 0.0,
                low_open: false,
                high: TWO_TO_64,
                high_open: true,
            },
            rule: "seed must be an integer in [0, 2^64)",
            help: "seed of every random draw",
        },
    ];

    /// The rule of the parameter users call `name`.
    pub fn rule(name: &str) -> Option<&'static ParamRule> {
        Params::RULES.iter().find(|r| r.name == name)
    }

    fn rule_of(name: &str) -> &'static ParamRule {
        Params::rule(name).expect("every field has a rule")
    }

    /// Checks every parameter against its declared domain; the one home of these rules.
    /// Errors name the parameters as users pass them (alpha, lam, k, top_alpha, seed).
    pub fn validate(&self) -> Result<()> {
        let values = [
            self.alpha,
            self.lambda,
            self.top_random_k as f64,
            self.top_random_alpha,
            self.seed as f64,
        ];
        for (rule, value) in Params::RULES.iter().zip(values) {
            // an integer of 2^64 - 1 rounds up to 2^64 as a double, inside its type's range
            if rule.kind == ParamKind::Real || value < rule.domain.high {
                rule.check(value)?;
            }
        }
        Ok(())
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
