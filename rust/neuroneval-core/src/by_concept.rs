//! The inverse metrics concept by concept: one pass over a unit's inputs in ascending order
//! appends each positive's group end to its concept's run, and each run, sorted, gives the
//! concept's AP sum ([`crate::sweep::InverseLayout::ByConcept`]).

use crate::concepts::{ConceptSet, LabelIndex, RowIndex};
use crate::metric::Needs;
use crate::numeric::resize_for_overwrite;
use crate::pair::{InverseSums, Products};
use crate::simd::prefetch;
use crate::sweep::{SparseProducts, PREFETCH_DISTANCE};
use crate::unit::{SparseEntries, UnitProfile};

/// What [`inverse_by_concept`] reuses from unit to unit.
#[derive(Debug, Default)]
pub struct ByConcept {
    /// The positives' group ends, concept after concept (a run as long as the concept's
    /// positives each), where each concept's run starts and is filled up to, and the sort's
    /// buffer.
    ends: Vec<u32>,
    starts: Vec<usize>,
    filled: Vec<usize>,
    sort: Vec<u32>,
    /// A sparse unit's labels of a chunk of its entries, one after another.
    flat: FlatLabels,
}

/// [`crate::sweep::inverse`] (or [`crate::sweep::inverse_sparse`] for a sparse unit) with
/// the AP sums concept by concept. One pass over the unit's inputs in ascending order (a
/// sparse unit's entries) reads each one's labels, adds the label sums as
/// [`crate::sweep::inverse`] does, and appends the input's group end (#{j : a_j >= a_i}) to
/// each of its concepts' runs; each run, sorted, then gives the AP sum
/// group by group in descending activation, as the walk adds it, with a sparse unit's zero
/// group (its positives not among the entries) merged in at its place. Every access is in
/// order except the appends (one stream per concept) and the short sorts. A dense unit must
/// carry `at_least` ([`crate::ranks::RankOutputs::at_least`]) when AP is needed.
///
/// With `products` (the concepts' rows, when they hold exactly the labels:
/// [`ConceptSet::rows_as_labels`]), a sparse unit's products come from the same pass, equal
/// to [`crate::sweep::products_sparse`]'s bit for bit; else (and for a dense unit) the
/// second result is None.
pub fn inverse_by_concept(
    unit: &UnitProfile,
    set: &ConceptSet,
    labels: &LabelIndex,
    needs: &Needs,
    scratch: &mut ByConcept,
    products: Option<&RowIndex>,
) -> (Vec<InverseSums>, Option<Vec<Products>>) {
    debug_assert!(products.is_none_or(|r| r.ptr == labels.ptr));
    let n = unit.n();
    let mid = (n as f64 + 1.0) / 2.0;
    let t = set.len();
    let ByConcept {
        ends,
        starts,
        filled,
        sort,
        flat,
    } = scratch;
    starts.clear();
    let mut run_start = 0;
    for col in &set.columns {
        starts.push(run_start);
        run_start += col.n_positive();
    }
    filled.clone_from(starts);
    let ap = needs.inverse_ap;
    resize_for_overwrite(ends, if ap { run_start } else { 0 });
    let mut out = vec![InverseSums::default(); t];
    let (ends, filled) = (&mut ends[..], &mut filled[..]);
    // a sparse unit's labels met among its entries, per concept (for the zero group): counted
    // by its pass without the AP, else the length of the concept's run
    let mut in_entries = vec![0usize; t];
    let list = |i: usize| &labels.concept[labels.ptr[i]..labels.ptr[i + 1]];
    let mut sparse_products = None;
    let zeros = match &unit.sparse {
        None => {
            for i in 0..n {
                let list = list(i);
                if list.is_empty() {
                    continue;
                }
                let a = if needs.inverse_sums {
                    unit.centred[i]
                } else {
                    0.0
                };
                let r = if needs.inverse_sums && needs.order {
                    unit.centred_rank[i] + mid
                } else {
                    0.0
                };
                for &c in list {
                    let o = &mut out[c as usize];
                    o.centred_sum += a;
                    o.rank_sum += r;
                    if ap {
                        append(ends, filled, c, unit.at_least[i]);
                    }
                }
            }
            None
        }
        Some(sp) => {
            // binary concepts: each product term a * 1 is the label sum's own term a, added in
            // the same order, so the label sums are the raw products
            let raw_given = products.is_some_and(|r| r.values_are_one);
            // binary concepts' rank terms come from the labels (one rank per concept), so the
            // pass reads no rows; other concepts' products read their rows entry by entry
            let label_ranks = raw_given && needs.rank_products;
            let mut sums = products.map(|_| {
                if label_ranks {
                    SparseProducts::of_binary_labels(set)
                } else {
                    SparseProducts::new(t, raw_given)
                }
            });
            let mut pass = EntriesPass {
                unit,
                sp,
                labels,
                mid,
                out: &mut out,
                in_entries: &mut in_entries,
                ends: &mut *ends,
                filled: &mut *filled,
                flat,
                products: sums.as_mut().zip(products).map(|(s, r)| (s, r, needs)),
            };
            // (rank products without the midranks cannot come about; they would read the rows)
            match (needs.order, ap, label_ranks) {
                (true, true, true) => pass.run::<true, true, true>(),
                (true, true, false) => pass.run::<true, true, false>(),
                (true, false, true) => pass.run::<true, false, true>(),
                (true, false, false) => pass.run::<true, false, false>(),
                (false, true, _) => pass.run::<false, true, false>(),
                (false, false, _) => pass.run::<false, false, false>(),
            }
            if ap {
                for ((k, &end), &start) in in_entries.iter_mut().zip(filled.iter()).zip(&*starts) {
                    *k = end - start;
                }
            }
            sparse_products = sums.map(|mut s| {
                if raw_given {
                    s.set_raw(out.iter().map(|o| o.centred_sum));
                }
                s.finish(unit, sp, set)
            });
            // the zero entries' terms in closed form, as `inverse_sparse` adds them
            let zero_rank = sp.zero_centred_rank + mid;
            for ((o, col), &k) in out.iter_mut().zip(&set.columns).zip(&in_entries) {
                o.centred_sum -= unit.mean * col.n_positive() as f64;
                o.rank_sum += if needs.order {
                    (col.n_positive() - k) as f64 * zero_rank
                } else {
                    0.0
                };
            }
            Some((sp.zero_at_least, in_entries))
        }
    };
    if ap {
        for (c, (o, col)) in out.iter_mut().zip(&set.columns).enumerate() {
            let run = &mut ends[starts[c]..filled[c]];
            sort_group_ends(run, sort, n);
            let (extra_at, extra_count) = match &zeros {
                Some((at, in_entries)) => (*at, col.n_positive() - in_entries[c]),
                None => (0, 0),
            };
            o.ap =
                crate::ranks::ap_of_sorted(run, extra_at as usize, extra_count, col.n_positive());
        }
    }
    (out, sparse_products)
}

/// Appends group end `g` to concept `c`'s run.
#[inline(always)]
fn append(ends: &mut [u32], filled: &mut [usize], c: u32, g: u32) {
    let f = &mut filled[c as usize];
    ends[*f] = g;
    *f += 1;
    // each concept's run is a write stream: fetch its line a cache line ahead
    prefetch(ends.as_ptr().wrapping_add(*f + 16));
}

/// A sparse unit's pass over its entries in [`inverse_by_concept`]: each entry's labels get
/// its value and midrank (and its group end, or a count), and the products their terms.
struct EntriesPass<'a> {
    unit: &'a UnitProfile,
    sp: &'a SparseEntries,
    labels: &'a LabelIndex,
    mid: f64,
    out: &'a mut [InverseSums],
    in_entries: &'a mut [usize],
    ends: &'a mut [u32],
    filled: &'a mut [usize],
    flat: &'a mut FlatLabels,
    products: Option<(&'a mut SparseProducts, &'a RowIndex, &'a Needs)>,
}

impl EntriesPass<'_> {
    /// The pass with the midranks (`ORDER`), the AP's group ends (`AP`; without it the
    /// labels are counted) and binary concepts' rank terms label by label (`LABEL_RANKS`, with
    /// the midranks and [`SparseProducts::of_binary_labels`]; else the products read their
    /// rows entry by entry) fixed at compile time: no test of any per label.
    fn run<const ORDER: bool, const AP: bool, const LABEL_RANKS: bool>(&mut self) {
        let (unit, sp, labels) = (self.unit, self.sp, self.labels);
        let n_entries = sp.rows.len();
        for first in (0..n_entries).step_by(FLAT_CHUNK) {
            let chunk = first..(first + FLAT_CHUNK).min(n_entries);
            // The labels first, one after another; then one pass over them with no branch
            // that depends on the data (an entry's number of labels, often none, would
            // mislead a branch per entry). Each concept still gets its terms in entry order.
            self.flat.fill(sp, chunk.clone(), labels);
            let (concepts, entries) = self.flat.labels();
            for (&c, &e) in concepts.iter().zip(entries) {
                let e = e as usize;
                let o = &mut self.out[c as usize];
                o.centred_sum += sp.values[e] * unit.scale;
                o.rank_sum += if ORDER {
                    sp.centred_rank[e] + self.mid
                } else {
                    0.0
                };
                if AP {
                    append(self.ends, self.filled, c, sp.at_least[e]);
                } else {
                    self.in_entries[c as usize] += 1;
                }
                if let Some((sums, _, _)) = self.products.as_mut().filter(|_| LABEL_RANKS) {
                    sums.add_label_rank(c, SparseProducts::rank_weight(sp, e));
                }
            }
            if let Some((sums, rows, needs)) = self.products.as_mut().filter(|_| !LABEL_RANKS) {
                for e in chunk {
                    // the labels' own entries (the same offsets)
                    let i = sp.rows[e] as usize;
                    sums.add(unit, sp, e, labels.ptr[i]..labels.ptr[i + 1], rows, needs);
                }
            }
        }
    }
}

/// Entries whose labels [`EntriesPass::run`] lays out at a time (about 16 KB of labels).
const FLAT_CHUNK: usize = 2048;

/// The labels of a chunk of a sparse unit's entries, one after another, each with its entry.
#[derive(Debug, Default)]
struct FlatLabels {
    /// The labels' concepts and entries in their first `len` slots (the buffers keep their
    /// length from chunk to chunk, so that no chunk clears them).
    concept: Vec<u32>,
    entry: Vec<u32>,
    len: usize,
}

impl FlatLabels {
    /// Lays out the labels of entries `chunk` in entry order. A list of up to 4 labels is
    /// copied as 4 (the next lists overwrite what is past it), so that the copy does not
    /// branch on its length.
    fn fill(&mut self, sp: &SparseEntries, chunk: std::ops::Range<usize>, labels: &LabelIndex) {
        const COPY: usize = 4;
        let room = |len: usize, entries_left: usize| len + COPY * (entries_left + 1);
        let (concept, entry) = (&mut self.concept, &mut self.entry);
        if concept.len() < room(0, chunk.len()) {
            concept.resize(room(0, chunk.len()), 0);
            entry.resize(room(0, chunk.len()), 0);
        }
        let mut k = 0;
        for e in chunk.clone() {
            // the entries' label offsets are read in steps of about N / nnz: fetch ahead
            if let Some(&ahead) = sp.rows.get(e + PREFETCH_DISTANCE) {
                prefetch(labels.ptr.as_ptr().wrapping_add(ahead as usize));
            }
            let i = sp.rows[e] as usize;
            let (start, end) = (labels.ptr[i], labels.ptr[i + 1]);
            let n = end - start;
            match labels
                .concept
                .get(start..start + COPY)
                .filter(|_| n <= COPY)
            {
                Some(list) => {
                    concept[k..k + COPY].copy_from_slice(list);
                    entry[k..k + COPY].fill(e as u32);
                }
                None => {
                    let need = room(k + n, chunk.end - e);
                    if concept.len() < need {
                        concept.resize(need, 0);
                        entry.resize(need, 0);
                    }
                    concept[k..k + n].copy_from_slice(&labels.concept[start..end]);
                    entry[k..k + n].fill(e as u32);
                }
            }
            k += n;
        }
        self.len = k;
    }

    /// The labels laid out by the last [`FlatLabels::fill`]: concepts, and entries.
    fn labels(&self) -> (&[u32], &[u32]) {
        (&self.concept[..self.len], &self.entry[..self.len])
    }
}

/// Sorts one concept's group ends (each at most `n`) ascending: a radix sort of the bits
/// that n spans for long lists (n under 2^22), a comparison sort for short ones. Integers
/// sort to one sequence whatever the method.
fn sort_group_ends(ends: &mut [u32], buffer: &mut Vec<u32>, n: usize) {
    let span = usize::BITS - n.leading_zeros();
    if ends.len() < 256 || span > 22 {
        ends.sort_unstable();
    } else {
        crate::radix::sort_small_u32(ends, buffer, span);
    }
}
