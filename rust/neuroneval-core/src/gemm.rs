//! The one dense matrix product the library needs.

/// G = X Y^T where X is (m, k) and Y is (n, k), both row-major (each row contiguous):
/// G[i, j] = sum_l X[i, l] Y[j, l], returned row-major (m, n). Single-threaded: callers
/// parallelise over blocks so results do not depend on the thread count.
pub fn at_b(x: &[f64], y: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    assert_eq!(x.len(), m * k);
    assert_eq!(y.len(), n * k);
    let mut g = vec![0.0; m * n];
    if m == 0 || n == 0 {
        return g;
    }
    // SAFETY: dst is m x n with row stride n; lhs is m x k with row stride k; rhs is k x n
    // with column stride k and row stride 1 (Y transposed). All three buffers hold exactly
    // those extents (checked above) and do not alias.
    unsafe {
        gemm::gemm(
            m,
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
    g
}
