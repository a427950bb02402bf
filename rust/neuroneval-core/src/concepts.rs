//! Per-concept transforms, computed once per call and shared by every unit.
//!
//! A concept column is stored by its nonzero entries (concepts are probabilities, so 0 is
//! their smallest value and usually the most common one). Every sum a metric needs splits
//! into "the zero group" (a closed form) plus a sum over the nonzero entries.

use rayon::prelude::*;

use crate::error::{CoreError, Result};
use crate::metric::Needs;
use crate::numeric::{magnitude_scale, robust_norm};
use crate::ranks::rank;
use crate::source::MatrixSource;

/// Above this fraction of nonzero concept entries, products run as dense matrix products.
pub const DENSE_PRODUCT_DENSITY: f64 = 0.05;

/// Concepts processed together when transposing the input: 256, and fewer (down to 8, a
/// cache line of a row-major row) when there are few concepts, so that every thread of
/// several gets about two blocks. Each column is built from its own values alone, so the
/// blocks change no result.
fn concept_block(n_concepts: usize, threads: usize) -> usize {
    const MOST: usize = 256;
    match threads {
        0 | 1 => MOST,
        _ => n_concepts.div_ceil(2 * threads).clamp(8, MOST),
    }
}

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
    /// The power of two the moments below are of c * `scale` ([`magnitude_scale`]): 1
    /// unless every value is tiny (say 1e-310), when products with c would lose bits.
    pub scale: f64,
    /// sum and mean of c * scale.
    pub sum: f64,
    pub mean: f64,
    /// ||c * scale - mean||, exactly 0 for a constant column (present when its
    /// [`ColumnNeeds`] asked for it, else 0).
    pub centred_norm: f64,
    /// ||c * scale||.
    pub norm: f64,
    /// ||rank - (N+1)/2||, exactly 0 for a constant column.
    pub rank_centred_norm: f64,
    /// sum over the nonzero entries of (rank - zero_rank) (present with the ranks).
    pub rank_above_zero_sum: f64,
}

/// Which of a column's transforms a call's metrics read, beyond the sums every metric uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnNeeds {
    /// The nonzero values' midranks and threshold sizes, and the ranks' centred norm.
    pub ranks: bool,
    /// The norm of the centred values.
    pub centred_norm: bool,
}

impl ColumnNeeds {
    pub const ALL: ColumnNeeds = ColumnNeeds {
        ranks: true,
        centred_norm: true,
    };

    pub fn of(needs: &Needs) -> ColumnNeeds {
        ColumnNeeds {
            ranks: needs.forward_rank_sum || needs.forward_ap || needs.rank_products,
            centred_norm: needs.centred_norms,
        }
    }
}

impl ConceptColumn {
    /// Builds the transforms of one column of N values from its nonzero entries
    /// (ascending inputs), all already validated to lie in (0, 1]: those that `wanted`
    /// names (the ranks cost a sort of the nonzero values, the centred norm a pass).
    pub fn from_nonzeros(
        n: usize,
        nz_index: Vec<u32>,
        nz_value: Vec<f64>,
        wanted: ColumnNeeds,
    ) -> ConceptColumn {
        let with_ranks = wanted.ranks;
        // (values are > 0: the largest is the largest magnitude)
        let (smallest, largest) = extremes(&nz_value);
        let positives = if smallest >= 0.5 {
            // every entry is a positive label, as a binary concept's are
            nz_index.clone()
        } else {
            nz_index
                .iter()
                .zip(&nz_value)
                .filter(|(_, &v)| v >= 0.5)
                .map(|(&i, _)| i)
                .collect()
        };
        let mut col = ConceptColumn {
            positives,
            nz_index,
            nz_value,
            ..Default::default()
        };
        let nnz = col.nz_index.len();
        col.n_zero = n - nnz;
        col.zero_rank = (col.n_zero as f64 + 1.0) / 2.0;
        col.scale = magnitude_scale(largest);
        let scale = col.scale;
        // The usual case (scale 1) takes the sums below in fewer passes, each adding the
        // same terms in the same order.
        let fast = scale == 1.0 && nnz > 0;
        if fast {
            (col.sum, col.norm) = sum_and_norm(&col.nz_value, smallest, largest);
        } else {
            col.sum = col.nz_value.iter().map(|v| v * scale).sum();
            col.norm = robust_norm(col.nz_value.iter().map(|v| v * scale), 0.0, 0);
        }
        col.mean = col.sum / n as f64;

        if with_ranks {
            // Ranks among the nonzero entries, shifted above the zero group.
            let r = rank(&col.nz_value);
            let shift = col.n_zero as f64;
            col.nz_rank = r.midrank.iter().map(|m| m + shift).collect();
            col.nz_at_least = r.at_least;
            col.rank_above_zero_sum = col.nz_rank.iter().map(|r| r - col.zero_rank).sum();
        }

        let constant = nnz == 0 || (col.n_zero == 0 && smallest == largest);
        if !constant && wanted.centred_norm {
            let m = col.mean;
            col.centred_norm = if fast {
                centred_norm(&col.nz_value, m, col.n_zero, smallest, largest)
            } else {
                robust_norm(col.nz_value.iter().map(|v| v * scale - m), -m, col.n_zero)
            };
        }
        if !constant && with_ranks {
            let mid = (n as f64 + 1.0) / 2.0;
            col.rank_centred_norm = robust_norm(
                col.nz_rank.iter().map(|r| r - mid),
                col.zero_rank - mid,
                col.n_zero,
            );
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

/// The smallest and largest of the values (0 and 0 when there are none), by comparisons
/// (no NaN reaches here), in one pass that vectorises.
fn extremes(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let (mut low, mut high) = ([values[0]; 8], [0.0f64; 8]);
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            low[j] = if c[j] < low[j] { c[j] } else { low[j] };
            high[j] = if c[j] > high[j] { c[j] } else { high[j] };
        }
    }
    for &v in chunks.remainder() {
        low[0] = if v < low[0] { v } else { low[0] };
        high[0] = if v > high[0] { v } else { high[0] };
    }
    let low = low.iter().fold(low[0], |m, &v| if v < m { v } else { m });
    let high = high.iter().fold(0.0, |m, &v| if v > m { v } else { m });
    (low, high)
}

/// (sum, norm) of values in (0, 1] whose smallest is `smallest` and largest `largest` > 0,
/// of magnitude scale 1, bit for bit the iterator sums of [`ConceptColumn::from_nonzeros`]'s
/// general case (`v * 1` is `v`; a norm's max is the largest value), in one loop of two
/// chains. Sums of values that are all 1 are counts, exact whatever the order.
fn sum_and_norm(values: &[f64], smallest: f64, largest: f64) -> (f64, f64) {
    if smallest == 1.0 && largest == 1.0 {
        // every partial sum is a whole number below 2^53, so exact; so are the squares
        // (the norm's scale at 1 is 1)
        let count = values.len() as f64;
        return (count, crate::numeric::scaled_norm(largest, |_| count + 0.0));
    }
    let mut sum = -0.0f64;
    let norm = crate::numeric::scaled_norm(largest, |inv| {
        let mut squares = -0.0f64;
        for &v in values {
            sum += v;
            squares += (v * inv) * (v * inv);
        }
        squares + 0.0
    });
    (sum, norm)
}

/// [`robust_norm`] of the centred values `v - mean` and `n_zero` copies of `-mean`, for
/// values of scale 1 in [smallest, largest]: the largest centred magnitude is at an end
/// (rounding is monotonic), so only the sum of squares takes a pass.
fn centred_norm(values: &[f64], mean: f64, n_zero: usize, smallest: f64, largest: f64) -> f64 {
    let mut max = 0.0f64
        .max((largest - mean).abs())
        .max((smallest - mean).abs());
    if n_zero > 0 {
        max = max.max(mean.abs());
    }
    crate::numeric::scaled_norm(max, |inv| {
        let e = -mean * inv;
        values
            .iter()
            .map(|v| ((v - mean) * inv) * ((v - mean) * inv))
            .sum::<f64>()
            + n_zero as f64 * e * e
    })
}

/// All concepts of a call, transformed once.
#[derive(Debug)]
pub struct ConceptSet {
    pub n_inputs: usize,
    pub columns: Vec<ConceptColumn>,
    /// Column-major dense copies (values, centred midranks) for matrix products, kept only
    /// when the concepts are dense enough for products to beat sparse gathers.
    pub dense: Option<DenseConcepts>,
    /// The nonzero entries by input, for sweeps over a unit's inputs (absent when dense).
    pub rows: Option<RowIndex>,
    /// The positive labels by input: row i lists the concepts with c_i >= 0.5.
    pub labels: LabelIndex,
    /// The needs whose matrix indexes were built (None for a pairs call's set).
    pub built_for: Option<Needs>,
}

/// Concept entries grouped by input (CSR): entries of row i at `ptr[i]..ptr[i+1]`,
/// concepts ascending, each with the column's value, midrank (also less the column's zero
/// midrank, as the products use it) and threshold size.
#[derive(Debug, Default)]
pub struct RowIndex {
    pub ptr: Vec<usize>,
    pub concept: Vec<u32>,
    pub value: Vec<f64>,
    /// value * the column's scale, kept only when some column's scale is not 1 (see
    /// [`RowIndex::product_values`]).
    scaled_value: Vec<f64>,
    pub rank: Vec<f64>,
    pub rank_above_zero: Vec<f64>,
    pub at_least: Vec<u32>,
    /// Whether every product value is exactly 1 (binary concepts, scale 1): each product
    /// term a * value is then a itself.
    pub values_are_one: bool,
}

/// Positive labels grouped by input (CSR), concepts ascending.
#[derive(Debug, Default)]
pub struct LabelIndex {
    pub ptr: Vec<usize>,
    pub concept: Vec<u32>,
}

/// Row pointers of a CSR from per-row counts.
fn row_pointers(n: usize, rows_of: impl Iterator<Item = u32>) -> Vec<usize> {
    let mut ptr = vec![0usize; n + 1];
    for i in rows_of {
        ptr[i as usize + 1] += 1;
    }
    for i in 0..n {
        ptr[i + 1] += ptr[i];
    }
    ptr
}

impl RowIndex {
    fn from_columns(columns: &[ConceptColumn], n: usize, with_ranks: bool) -> RowIndex {
        let ptr = row_pointers(n, columns.iter().flat_map(|c| c.nz_index.iter().copied()));
        let nnz = ptr[n];
        let ranked = if with_ranks { nnz } else { 0 };
        let mut next = ptr.clone();
        let scaled = columns.iter().any(|c| c.scale != 1.0);
        let mut r = RowIndex {
            concept: vec![0; nnz],
            value: vec![0.0; nnz],
            scaled_value: vec![0.0; if scaled { nnz } else { 0 }],
            rank: vec![0.0; ranked],
            rank_above_zero: vec![0.0; ranked],
            at_least: vec![0; ranked],
            ptr: Vec::new(),
            values_are_one: false,
        };
        for (t, col) in columns.iter().enumerate() {
            for (j, &i) in col.nz_index.iter().enumerate() {
                let e = next[i as usize];
                next[i as usize] += 1;
                r.concept[e] = t as u32;
                r.value[e] = col.nz_value[j];
                if scaled {
                    r.scaled_value[e] = col.nz_value[j] * col.scale;
                }
                if with_ranks {
                    r.rank[e] = col.nz_rank[j];
                    r.rank_above_zero[e] = col.nz_rank[j] - col.zero_rank;
                    r.at_least[e] = col.nz_at_least[j];
                }
            }
        }
        r.ptr = ptr;
        r.values_are_one = r.product_values().iter().all(|&v| v == 1.0);
        r
    }

    /// The values that products read: each times its column's scale, as the column's
    /// moments are (the values themselves when every scale is 1).
    pub fn product_values(&self) -> &[f64] {
        if self.scaled_value.is_empty() {
            &self.value
        } else {
            &self.scaled_value
        }
    }
}

impl LabelIndex {
    fn from_columns(columns: &[ConceptColumn], n: usize) -> LabelIndex {
        let ptr = row_pointers(n, columns.iter().flat_map(|c| c.positives.iter().copied()));
        let mut next = ptr.clone();
        let mut concept = vec![0u32; ptr[n]];
        for (t, col) in columns.iter().enumerate() {
            for &i in &col.positives {
                concept[next[i as usize]] = t as u32;
                next[i as usize] += 1;
            }
        }
        LabelIndex { ptr, concept }
    }
}

#[derive(Debug)]
pub struct DenseConcepts {
    /// Concept t's values times its scale at t*N .. (t+1)*N.
    pub values: Vec<f64>,
    /// Concept t's midranks minus (N+1)/2, same layout.
    pub centred_ranks: Vec<f64>,
}

impl ConceptSet {
    /// Validates (finite, in [0, 1]) and transforms the listed columns of an (N, T) concept
    /// matrix (all of them when `selected` is None); `columns[j]` is `selected[j]`'s transform.
    /// Builds only what metrics with these `needs` read. `for_matrix` adds the indexes a call
    /// over all pairs sweeps (rows or dense copies, labels); a call over a few pairs skips them.
    pub fn build(
        concepts: &dyn MatrixSource,
        selected: Option<&[usize]>,
        needs: &Needs,
        for_matrix: bool,
    ) -> Result<ConceptSet> {
        let wanted = ColumnNeeds::of(needs);
        let with_ranks = wanted.ranks;
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
        // One pass over the rows per block of concepts: keep the nonzeros, then validate.
        let built: Vec<Result<Vec<ConceptColumn>>> = selected
            .par_chunks(concept_block(selected.len(), rayon::current_num_threads()))
            .map(|block| {
                let mut index: Vec<Vec<u32>> = vec![Vec::new(); block.len()];
                let mut value: Vec<Vec<f64>> = vec![Vec::new(); block.len()];
                concepts.nonzeros_into(block, &mut index, &mut value);
                first_bad_value(block, &index, &value)?;
                Ok(index
                    .into_par_iter()
                    .zip(value)
                    .map(|(idx, val)| ConceptColumn::from_nonzeros(n, idx, val, wanted))
                    .collect())
            })
            .collect();
        // Report the first bad value in row-major order, whatever the threads did.
        let mut columns = Vec::with_capacity(selected.len());
        let mut first_error: Option<CoreError> = None;
        for block in built {
            match block {
                Ok(cols) => columns.extend(cols),
                Err(e) => {
                    if first_error
                        .as_ref()
                        .is_none_or(|f| error_position(&e) < error_position(f))
                    {
                        first_error = Some(e);
                    }
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let nnz: usize = columns.iter().map(|c| c.nz_index.len()).sum();
        let density = nnz as f64 / (n as f64 * columns.len() as f64);
        // A matrix call sweeps each unit's inputs over sparse concepts and multiplies dense
        // ones; a pairs call does neither.
        let is_dense = density > DENSE_PRODUCT_DENSITY;
        let products = needs.products || needs.rank_products;
        let dense = (for_matrix && is_dense && products)
            .then(|| DenseConcepts::from_columns(&columns, n, needs));
        let rows = (for_matrix && !is_dense && (products || needs.forward || needs.inverse_sums))
            .then(|| RowIndex::from_columns(&columns, n, with_ranks));
        let labels = if for_matrix && needs.inverse {
            LabelIndex::from_columns(&columns, n)
        } else {
            LabelIndex::default()
        };
        Ok(ConceptSet {
            n_inputs: n,
            columns,
            dense,
            rows,
            labels,
            built_for: for_matrix.then_some(*needs),
        })
    }

    /// The concepts' rows when their entries are exactly the positive labels (every nonzero
    /// value is at least 0.5, as binary concepts' are): both indexes then list the same
    /// (input, concept) pairs in the same order, so one pass over a unit's labels also reads
    /// each label's row entry.
    pub fn rows_as_labels(&self) -> Option<&RowIndex> {
        self.rows.as_ref().filter(|r| {
            r.ptr.len() == self.labels.ptr.len()
                && self
                    .columns
                    .iter()
                    .all(|c| c.positives.len() == c.nz_index.len())
        })
    }

    /// Fails unless this set was built for a matrix call with exactly these needs, so a
    /// prepared set never meets a metric whose indexes it lacks.
    pub fn check_prepared_for(&self, needs: &Needs) -> Result<()> {
        if self.built_for.as_ref() == Some(needs) {
            Ok(())
        } else {
            Err(CoreError::Parameter {
                name: "metrics",
                value: "a list other than the concepts were prepared for".into(),
                reason: "prepare the concepts with the same metrics as the scoring call".into(),
            })
        }
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

impl DenseConcepts {
    /// The copies the products of `needs` read (each empty otherwise).
    fn from_columns(columns: &[ConceptColumn], n: usize, needs: &Needs) -> DenseConcepts {
        let mid = (n as f64 + 1.0) / 2.0;
        let size = |wanted: bool| if wanted { columns.len() * n } else { 0 };
        let mut values = vec![0.0; size(needs.products)];
        let mut centred_ranks = vec![0.0; size(needs.rank_products)];
        if needs.products {
            values
                .par_chunks_mut(n)
                .zip(columns.par_iter())
                .for_each(|(v, col)| {
                    for (&i, &x) in col.nz_index.iter().zip(&col.nz_value) {
                        v[i as usize] = x * col.scale;
                    }
                });
        }
        if needs.rank_products {
            centred_ranks
                .par_chunks_mut(n)
                .zip(columns.par_iter())
                .for_each(|(r, col)| {
                    r.fill(col.zero_rank - mid);
                    for (&i, &rank) in col.nz_index.iter().zip(&col.nz_rank) {
                        r[i as usize] = rank - mid;
                    }
                });
        }
        DenseConcepts {
            values,
            centred_ranks,
        }
    }
}

/// The block's first value outside [0, 1] (NaN included) in row-major order, as an error.
fn first_bad_value(block: &[usize], index: &[Vec<u32>], value: &[Vec<f64>]) -> Result<()> {
    let mut first: Option<(usize, usize, f64)> = None;
    for ((&column, idx), val) in block.iter().zip(index).zip(value) {
        if all_in_unit_interval(val) {
            continue;
        }
        if let Some((&row, &v)) = idx.iter().zip(val).find(|(_, v)| !(0.0..=1.0).contains(*v)) {
            let here = (row as usize, column, v);
            if first.is_none_or(|f| (here.0, here.1) < (f.0, f.1)) {
                first = Some(here);
            }
        }
    }
    match first {
        None => Ok(()),
        Some((row, column, v)) => Err(bad_concept(row, column, v)),
    }
}

/// Whether every value lies in [0, 1] (no NaN), in chunks whose test vectorises: the
/// search for the first value outside runs only when there is one.
fn all_in_unit_interval(values: &[f64]) -> bool {
    values
        .chunks(64)
        .all(|c| c.iter().fold(true, |ok, v| ok & (0.0..=1.0).contains(v)))
}

fn bad_concept(row: usize, column: usize, value: f64) -> CoreError {
    if value.is_finite() {
        CoreError::ConceptRange { row, column, value }
    } else {
        CoreError::NonFinite {
            what: "concepts",
            row,
            column,
            value,
        }
    }
}

fn error_position(e: &CoreError) -> (usize, usize) {
    match e {
        CoreError::ConceptRange { row, column, .. } | CoreError::NonFinite { row, column, .. } => {
            (*row, *column)
        }
        _ => (usize::MAX, usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunked range test against the value-by-value one it guards, with the bad value
    /// in each chunk position and at each end of the range.
    #[test]
    fn range_test_agrees_with_a_plain_search() {
        let plain = |v: &[f64]| v.iter().all(|x| (0.0..=1.0).contains(x));
        for bad in [
            f64::NAN,
            -1e-300,
            1.0 + f64::EPSILON,
            f64::INFINITY,
            0.0,
            -0.0,
            1.0,
        ] {
            for len in [1, 63, 64, 65, 200] {
                for at in [0, len / 2, len - 1] {
                    let mut v = vec![0.5; len];
                    v[at] = bad;
                    assert_eq!(
                        all_in_unit_interval(&v),
                        plain(&v),
                        "{bad} at {at} of {len}"
                    );
                }
            }
        }
    }

    /// The column's moments against the iterator sums they replace, bit for bit, and its
    /// positive labels against a filter of its entries: binary and
    /// soft values, ties, a full constant column, a full varying one, one entry, none, and
    /// values tiny enough to take a magnitude scale.
    #[test]
    fn moments_match_the_iterator_sums() {
        let mut state = 5u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = 500;
        let mut cases: Vec<Vec<f64>> = vec![
            vec![1.0; 37],
            vec![1.0; n],
            vec![0.25; n],
            vec![0.7],
            vec![],
            (0..n).map(|_| next() * 0.9 + 0.05).collect(),
            vec![1e-310, 3e-310],
        ];
        cases.push(
            (0..60)
                .map(|_| if next() < 0.5 { 1.0 } else { 0.5 })
                .collect(),
        );
        cases.push((0..60).map(|_| 0.001 + next() * 0.3).collect());
        for values in cases {
            let nnz = values.len();
            let index: Vec<u32> = (0..nnz as u32)
                .map(|i| i * (n / nnz.max(1)) as u32)
                .collect();
            let col =
                ConceptColumn::from_nonzeros(n, index.clone(), values.clone(), ColumnNeeds::ALL);
            let positives: Vec<u32> = index
                .iter()
                .zip(&values)
                .filter(|(_, &v)| v >= 0.5)
                .map(|(&i, _)| i)
                .collect();
            assert_eq!(col.positives, positives, "{values:?}");
            let n_zero = n - nnz;
            let scale = magnitude_scale(values.iter().fold(0.0, |m: f64, &v| m.max(v)));
            let sum: f64 = values.iter().map(|v| v * scale).sum();
            let mean = sum / n as f64;
            let norm = robust_norm(values.iter().map(|v| v * scale), 0.0, 0);
            let constant = nnz == 0 || (n_zero == 0 && values.iter().all(|&v| v == values[0]));
            let centred = if constant {
                0.0
            } else {
                robust_norm(values.iter().map(|v| v * scale - mean), -mean, n_zero)
            };
            let got = [col.scale, col.sum, col.mean, col.norm, col.centred_norm];
            let want = [scale, sum, mean, norm, centred];
            assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{values:?}");
        }
    }
}
