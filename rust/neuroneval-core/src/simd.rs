//! Run-time choice of instruction set for the hot loops.
//!
//! The extension is built for baseline x86-64 so that it runs anywhere; the loops that stream
//! over long arrays (products, label sums, column copies, sort keys, norms) are also compiled
//! for AVX2 and AVX-512, and each call takes the widest version the CPU supports. Rust never
//! fuses a multiply and an add, and every version adds in the same order, so all versions
//! return the same bits (the property test `matrix_and_pairs_agree_bit_for_bit` compares the
//! wide product sweeps with the pair kernel's scalar loops).

/// Compiles each function for AVX-512 and AVX2 as well as the baseline, picked at run time.
/// (multiversion takes AVX-512 only with the Ice Lake feature set: on older CPUs it lowers
/// the clock, and those get the AVX2 version.)
macro_rules! widest {
    ($($item:item)*) => {
        $(
            #[multiversion::multiversion(targets("x86_64+avx512f", "x86_64+avx2+fma"))]
            $item
        )*
    };
}
pub(crate) use widest;

/// A hint to load the cache line at `p`; never faults, whatever the address.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: _mm_prefetch only hints the cache; it does not dereference for the program
    // and cannot fault, even for an invalid address. SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Whether the CPU has AVX-512F and POPCNT, for the few loops written with intrinsics
/// (asked once; the answer is cached by the standard library).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("popcnt")
}

/// `x`, hidden from the optimiser: a mask built from it stays a mask, where the compiler
/// would otherwise turn a select on it back into a branch (unpredictable ones cost more
/// than the arithmetic).
#[inline(always)]
pub(crate) fn opaque(x: u64) -> u64 {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut x = x;
        // SAFETY: a template of one comment: no instruction, no memory touched; `x` is only marked
        // as possibly changed.
        unsafe {
            std::arch::asm!("/* {0} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags))
        };
        x
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        std::hint::black_box(x)
    }
}
