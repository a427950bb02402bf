//! The one dense matrix product the library needs.

/// The most rows (units) a caller multiplies at once; [`at_b`] gives each row the same bits
/// for any number of rows up to this.
pub const MAX_ROWS: usize = 32;

/// Rows to run gemm with for an (m, n) product, so that its kernel does not depend on m.
/// gemm picks a kernel by shape, and each adds in its own order: a dot-product kernel when
/// m n <= 256, a matrix-vector one when m = 1, the blocked kernel otherwise. Padding with
/// zero rows to m >= 2, and to m n > 256 when some m <= MAX_ROWS would reach the blocked
/// kernel, keeps every call on one kernel per n (the test below pins it).
fn padded_rows(m: usize, n: usize) -> usize {
    const SMALL_PRODUCT: usize = 256;
    let mut rows = m.max(2);
    if n * MAX_ROWS > SMALL_PRODUCT {
        rows = rows.max(SMALL_PRODUCT / n + 1);
    }
    rows
}

/// G = X Y^T where X is (m, k) and Y is (n, k), both row-major (each row contiguous):
/// G[i, j] = sum_l X[i, l] Y[j, l], returned row-major (m, n). Single-threaded: callers
/// parallelise over blocks. Row i of G depends on row i of X and on Y only, bit for bit,
/// for any m <= [`MAX_ROWS`], so results do not depend on how callers split the rows.
pub fn at_b(x: &[f64], y: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    assert_eq!(x.len(), m * k);
    assert_eq!(y.len(), n * k);
    assert!(m <= MAX_ROWS, "at most {MAX_ROWS} rows per product");
    if m == 0 || n == 0 {
        return vec![0.0; m * n];
    }
    let rows = padded_rows(m, n);
    let padded: Vec<f64>;
    let x = if rows > m {
        padded = x
            .iter()
            .copied()
            .chain(std::iter::repeat_n(0.0, (rows - m) * k))
            .collect();
        &padded[..]
    } else {
        x
    };
    let mut g = vec![0.0; rows * n];
    // SAFETY: dst is rows x n with row stride n; lhs is rows x k with row stride k; rhs is
    // k x n with column stride k and row stride 1 (Y transposed). All three buffers hold
    // exactly those extents (x and y checked above, x padded to `rows`) and do not alias.
    unsafe {
        gemm::gemm(
            rows,
            n,
            k,
            g.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            y.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    g.truncate(m * n);
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row i of the product is the same bits whatever the number of rows and wherever the
    /// row sits among them, for shapes on every side of gemm's kernel thresholds.
    #[test]
    fn rows_do_not_depend_on_the_number_of_rows() {
        let mut s = 1u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.3
        };
        for &(n, k) in &[
            (1usize, 700usize),
            (2, 300),
            (3, 700),
            (8, 600),
            (9, 600),
            (50, 2000),
            (70, 1500),
            (300, 520),
            (5, 2),
        ] {
            let x: Vec<f64> = (0..MAX_ROWS * k).map(|_| next()).collect();
            let y: Vec<f64> = (0..n * k).map(|_| next()).collect();
            let full = at_b(&x, &y, MAX_ROWS, n, k);
            for m in 1..=MAX_ROWS {
                for start in [0, 1, 5, MAX_ROWS - m] {
                    if start + m > MAX_ROWS {
                        continue;
                    }
                    let part = at_b(&x[start * k..(start + m) * k], &y, m, n, k);
                    for i in 0..m {
                        for j in 0..n {
                            assert_eq!(
                                part[i * n + j].to_bits(),
                                full[(start + i) * n + j].to_bits(),
                                "n {n}, k {k}, rows {start}..{}: row {i}, column {j}",
                                start + m
                            );
                        }
                    }
                }
            }
        }
    }
}
