//! Property tests: the fast paths against brute-force definitions written here.

use neuroneval_core::concepts::DENSE_PRODUCT_DENSITY;
use neuroneval_core::ranks::{average_precision, roc_auc};
use neuroneval_core::unit::top_alpha_set;
use neuroneval_core::{score_matrix, score_pairs, MatrixView, Metric, Params, SparseColumns};
use proptest::prelude::*;

/// Mann-Whitney by counting every (positive, negative) pair; ties count 1/2.
fn brute_auc(labels: &[bool], scores: &[f64]) -> f64 {
    let (mut wins, mut pairs) = (0.0, 0.0);
    for (i, &li) in labels.iter().enumerate() {
        for (j, &lj) in labels.iter().enumerate() {
            if li && !lj {
                pairs += 1.0;
                wins += if scores[i] > scores[j] {
                    1.0
                } else if scores[i] == scores[j] {
                    0.5
                } else {
                    0.0
                };
            }
        }
    }
    wins / pairs
}

/// AP = sum over distinct thresholds (descending) of (R_j - R_{j-1}) P_j.
fn brute_ap(labels: &[bool], scores: &[f64]) -> f64 {
    let mut thresholds: Vec<f64> = scores.to_vec();
    thresholds.sort_by(|a, b| b.partial_cmp(a).unwrap());
    thresholds.dedup();
    let positives = labels.iter().filter(|&&l| l).count() as f64;
    let (mut ap, mut prev_recall) = (0.0, 0.0);
    for t in thresholds {
        let predicted: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] >= t).collect();
        let tp = predicted.iter().filter(|&&i| labels[i]).count() as f64;
        let recall = tp / positives;
        ap += (recall - prev_recall) * tp / predicted.len() as f64;
        prev_recall = recall;
    }
    ap
}

fn tied_vector(len: impl Into<prop::collection::SizeRange>) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop_oneof![
            Just(0.0),
            Just(1.0),
            0.0f64..1.0,
            (0u8..4).prop_map(f64::from)
        ],
        len,
    )
}

proptest! {
    #[test]
    fn auc_and_ap_match_their_definitions(
        (labels, scores) in (2usize..40).prop_flat_map(|n| (prop::collection::vec(any::<bool>(), n), tied_vector(n)))
    ) {
        let n_pos = labels.iter().filter(|&&l| l).count();
        let auc = roc_auc(&labels, &scores);
        if n_pos == 0 || n_pos == labels.len() {
            prop_assert!(auc.is_nan());
        } else {
            prop_assert!((auc - brute_auc(&labels, &scores)).abs() < 1e-12);
        }
        let ap = average_precision(&labels, &scores);
        if n_pos == 0 {
            prop_assert!(ap.is_nan());
        } else {
            prop_assert!((ap - brute_ap(&labels, &scores)).abs() < 1e-12);
        }
    }

    /// The top-alpha set is ascending by input whether the cut came from the full order or
    /// from a selection, so every sum over it runs in one order.
    #[test]
    fn top_alpha_set_is_ascending_on_both_paths(a in tied_vector(1..120), alpha in 0.001f64..=1.0) {
        let order = neuroneval_core::radix::sort_descending(&a);
        let from_order = top_alpha_set(&a, alpha, Some(&order));
        let from_selection = top_alpha_set(&a, alpha, None);
        prop_assert_eq!(&from_order, &from_selection);
        prop_assert!(from_order.windows(2).all(|w| w[0] < w[1]));
        let n_top = ((alpha * a.len() as f64).ceil() as usize).max(1);
        prop_assert!(from_order.len() >= n_top);
    }

    /// The sweeps of a matrix call and the pair kernel add the same terms in the same
    /// order: with sparse concepts the two paths agree bit for bit.
    #[test]
    fn matrix_and_pairs_agree_bit_for_bit(
        n in 30usize..200,
        k in 1usize..4,
        seed in any::<u64>(),
        alpha in 0.01f64..1.0,
    ) {
        let t = 3;
        let mut s = seed;
        let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (s >> 33) as f64 / (1u64 << 31) as f64 };
        // heavy ties (integers) in half the units, continuous values in the others; zeros
        // only on every fifth row, so under a quarter of a unit is 0 and every unit keeps
        // the dense transform (the pair kernel's; a quarter of zeros or more goes sparse,
        // equal only to rounding: `sparse_units_match_dense_units`)
        let a: Vec<f64> = (0..n * k).map(|j| if j % 2 == 0 {
            let v = (next() * 4.0).floor();
            if (j / k) % 5 != 0 { v.max(1.0) } else { v }
        } else { next() - 0.5 }).collect();
        // 4% nonzero at most per concept column keeps the concepts on the sparse path
        // Distinct soft values make every sum depend on its order: the paths must agree on it.
        // Column 0 is denser (9%) so that many top inputs share a concept; the matrix stays
        // under the dense-product density, on the sparse path.
        let c: Vec<f64> = (0..n * t).map(|j| {
            let (r, p) = (next(), if j % t == 0 { 0.09 } else { 0.005 });
            if r < p / 2.0 { 1.0 } else if r < p { 0.05 + r } else { 0.0 }
        }).collect();
        let av = MatrixView::row_major(&a, n, k).unwrap();
        let cv = MatrixView::row_major(&c, n, t).unwrap();
        let params = Params { alpha, ..Params::default() };
        let density = c.iter().filter(|&&v| v != 0.0).count() as f64 / c.len() as f64;
        prop_assume!(density <= DENSE_PRODUCT_DENSITY);
        let metrics = Metric::ALL.to_vec();
        let full = score_matrix(&av, &cv, &metrics, &params, 0).unwrap();
        let pairs: Vec<(i64, i64)> = (0..k as i64).flat_map(|u| (0..t as i64).map(move |c| (u, c))).collect();
        let paired = score_pairs(&av, &cv, &pairs, &metrics, &params).unwrap();
        for (m, (x, y)) in full.iter().zip(&paired).enumerate() {
            for (p, (u, v)) in x.iter().zip(y).enumerate() {
                prop_assert!(u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan()),
                    "{} pair {}: {} vs {}", metrics[m].name(), p, u, v);
            }
        }
    }

    /// A sparse unit is transformed from its nonzero entries alone, the zero group in
    /// closed form: every metric agrees with the dense transform of the same column (the
    /// pair kernel's), for top sets above, at and below the zero group, with negative
    /// entries and ties, whether the source is sparse or a dense array of mostly zeros.
    #[test]
    fn sparse_units_match_dense_units(
        n in 40usize..300,
        k in 1usize..6,
        seed in any::<u64>(),
        alpha in 0.005f64..0.6,
        density in 0.01f64..0.5,
        signed in any::<bool>(),
    ) {
        let t = 4;
        let mut s = seed;
        let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (s >> 33) as f64 / (1u64 << 31) as f64 };
        // Column-major units with few entries, often tied (small integers), some negative.
        let mut indptr = vec![0i64];
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        let mut dense = vec![0.0; n * k];
        for u in 0..k {
            for i in 0..n {
                if next() < density {
                    let mut v = if next() < 0.5 { (next() * 3.0).floor() + 1.0 } else { next() + 0.01 };
                    if signed && next() < 0.3 { v = -v; }
                    indices.push(i as i64);
                    values.push(v);
                    dense[i * k + u] = v;
                }
            }
            indptr.push(indices.len() as i64);
        }
        // Sparse concepts (the sweep path): binary labels and soft values.
        let c: Vec<f64> = (0..n * t).map(|_| {
            let r = next();
            if r < 0.02 { 1.0 } else if r < 0.04 { 0.05 + r } else { 0.0 }
        }).collect();
        let density_c = c.iter().filter(|&&v| v != 0.0).count() as f64 / c.len() as f64;
        prop_assume!(density_c <= DENSE_PRODUCT_DENSITY);
        let sparse = SparseColumns::new(n, &indptr, &indices, &values).unwrap();
        let av = MatrixView::row_major(&dense, n, k).unwrap();
        let cv = MatrixView::row_major(&c, n, t).unwrap();
        let params = Params { alpha, ..Params::default() };
        let metrics = Metric::ALL.to_vec();
        let pairs: Vec<(i64, i64)> = (0..k as i64).flat_map(|u| (0..t as i64).map(move |c| (u, c))).collect();
        let reference = score_pairs(&av, &cv, &pairs, &metrics, &params).unwrap();
        for source in [&sparse as &dyn neuroneval_core::MatrixSource, &av] {
            let got = score_matrix(source, &cv, &metrics, &params, 0).unwrap();
            for (m, (x, y)) in got.iter().zip(&reference).enumerate() {
                for (p, (u, v)) in x.iter().zip(y).enumerate() {
                    prop_assert!((u - v).abs() <= 1e-12 * v.abs().max(1.0) || (u.is_nan() && v.is_nan()),
                        "{} pair {}: matrix {} vs pair kernel {}", metrics[m].name(), p, u, v);
                }
            }
        }
    }

    /// The NeuronEval reference's conventions (units already binary, the reference's values
    /// where SPEC's are undefined) agree on every path: the pair kernel, the matrix sweeps of
    /// a dense source, and a sparse source (as `sparse_units_match_dense_units`, to rounding:
    /// a sparse unit's products come from its entries). Units include an all-zero and an
    /// all-one one; concepts an empty one.
    #[test]
    fn reference_conventions_agree_on_every_path(
        n in 30usize..150,
        seed in any::<u64>(),
        ones in 0.0f64..0.6,
        binary_units in any::<bool>(),
        reference_values in any::<bool>(),
    ) {
        let (k, t) = (4, 3);
        let mut s = seed;
        let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (s >> 33) as f64 / (1u64 << 31) as f64 };
        let mut a = vec![0.0; n * k];
        for i in 0..n {
            a[i * k] = if next() < ones { 1.0 } else { 0.0 };
            a[i * k + 1] = if next() < 0.1 { 1.0 } else { 0.0 };
            a[i * k + 3] = 1.0; // unit 2 stays all zero
        }
        // concept 0 binary, 1 soft, 2 empty
        let c: Vec<f64> = (0..n * t).map(|j| {
            let r = next();
            match j % t {
                0 if r < 0.03 => 1.0,
                1 if r < 0.02 => 0.7,
                1 if r < 0.04 => 0.2,
                _ => 0.0,
            }
        }).collect();
        let density = c.iter().filter(|&&v| v != 0.0).count() as f64 / c.len() as f64;
        prop_assume!(density <= DENSE_PRODUCT_DENSITY);
        let mut indptr = vec![0i64];
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        for u in 0..k {
            for i in 0..n {
                if a[i * k + u] != 0.0 {
                    indices.push(i as i64);
                    values.push(a[i * k + u]);
                }
            }
            indptr.push(indices.len() as i64);
        }
        let sparse = SparseColumns::new(n, &indptr, &indices, &values).unwrap();
        let av = MatrixView::row_major(&a, n, k).unwrap();
        let cv = MatrixView::row_major(&c, n, t).unwrap();
        let params = Params { alpha: 0.1, top_random_k: 7, binary_units, reference_values, ..Params::default() };
        let metrics = Metric::ALL.to_vec();
        let pairs: Vec<(i64, i64)> = (0..k as i64).flat_map(|u| (0..t as i64).map(move |c| (u, c))).collect();
        let kernel = score_pairs(&av, &cv, &pairs, &metrics, &params).unwrap();
        for source in [&av as &dyn neuroneval_core::MatrixSource, &sparse] {
            let got = score_matrix(source, &cv, &metrics, &params, 0).unwrap();
            for (m, (x, y)) in got.iter().zip(&kernel).enumerate() {
                for (p, (u, v)) in x.iter().zip(y).enumerate() {
                    prop_assert!(u == v || (u - v).abs() <= 1e-12 * v.abs().max(1.0) || (u.is_nan() && v.is_nan()),
                        "{} pair {}: matrix {} vs pair kernel {}", metrics[m].name(), p, u, v);
                }
            }
        }
        // an empty concept: the reference's values are numbers where SPEC's are NaN
        let precision = metrics.iter().position(|m| m.name() == "precision").unwrap();
        let empty = kernel[precision][2];
        let expected = if reference_values { empty == 0.0 } else { empty.is_nan() };
        prop_assert!(expected, "precision of an empty concept: {}", empty);
    }
}

/// A dense array of mostly-zero units with some dense ones among them (90% nonzeros, above
/// the engine's limit for a sparse profile): once a thread's last block was mostly sparse, it
/// reads a block's units as entries, and a dense unit among them gets its column back from
/// its entries (its zeros, -0.0 included, as +0.0). That unit's
/// scores must still equal the pair kernel's, which reads the column itself, bit for bit.
/// (4 blocks of 10 units, each of 7 sparse and 3 dense units, on at most 2 threads: at least
/// two blocks come after one of the same thread.)
#[test]
fn dense_units_read_as_entries_match_the_pair_kernel() {
    let (n, k, t) = (3000, 40, 3);
    let mut rng = neuroneval_core::rng::SplitMix64::new(5);
    let mut next = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let dense_unit = |u: usize| u % 10 >= 7;
    // signed values, ties (a few levels), and zeros of both signs
    let a: Vec<f64> = (0..n * k)
        .map(|j| {
            let active = if dense_unit(j % k) { 0.9 } else { 0.2 };
            if next() < active {
                if next() < 0.3 {
                    (next() * 4.0).floor() - 1.5
                } else {
                    next() - 0.5
                }
            } else if next() < 0.5 {
                -0.0
            } else {
                0.0
            }
        })
        .collect();
    let c: Vec<f64> = (0..n * t)
        .map(|_| if next() < 0.03 { 1.0 } else { 0.0 })
        .collect();
    let av = MatrixView::row_major(&a, n, k).unwrap();
    let cv = MatrixView::row_major(&c, n, t).unwrap();
    let params = Params::default();
    let metrics = Metric::ALL.to_vec();
    let full = score_matrix(&av, &cv, &metrics, &params, 0).unwrap();
    let pairs: Vec<(i64, i64)> = (0..k as i64)
        .filter(|&u| dense_unit(u as usize))
        .flat_map(|u| (0..t as i64).map(move |c| (u, c)))
        .collect();
    let paired = score_pairs(&av, &cv, &pairs, &metrics, &params).unwrap();
    for (m, (x, y)) in full.iter().zip(&paired).enumerate() {
        for (&(u, c), v) in pairs.iter().zip(y) {
            let w = x[u as usize * t + c as usize];
            assert!(
                w.to_bits() == v.to_bits() || (w.is_nan() && v.is_nan()),
                "{} unit {u} concept {c}: {w} vs {v}",
                metrics[m].name()
            );
        }
    }
}
