//! Run-time choice of instruction set for the hot loops.
//!
//! The extension is built for baseline x86-64 so that it runs anywhere; the loops that stream
//! over long arrays (products, label sums, column copies, norms) are also compiled for AVX2
//! and AVX-512, and each call takes the widest version the CPU supports. Rust never fuses a
//! multiply and an add, and every version adds in the same order, so all versions return
//! the same bits.

/// Compiles each function for AVX-512 and AVX2 as well as the baseline, picked at run time.
macro_rules! widest {
    ($($item:item)*) => {
        $(
            #[multiversion::multiversion(targets(
                "x86_64+avx512f+avx512bw+avx512cd+avx512dq+avx512vl",
                "x86_64+avx2+fma",
            ))]
            $item
        )*
    };
}
pub(crate) use widest;
