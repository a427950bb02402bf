//! A small, fully specified random stream (SplitMix64), so every draw is reproducible.

#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// An independent stream for item `stream` (a unit index) under one user seed.
    pub fn for_stream(seed: u64, stream: u64) -> Self {
        let mut s = SplitMix64::new(seed);
        let base = s.next_u64();
        let mut t = SplitMix64::new(base ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        t.next_u64();
        t
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits of one draw.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) without modulo bias (Lemire's method with rejection).
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as usize;
            }
        }
    }

    /// `k` distinct indices from [0, n), Floyd's algorithm (k steps, no O(n) buffer).
    pub fn sample_without_replacement(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut chosen: Vec<usize> = Vec::with_capacity(k);
        for j in (n - k)..n {
            let t = self.below(j + 1);
            if chosen.contains(&t) {
                chosen.push(j);
            } else {
                chosen.push(t);
            }
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_is_distinct_and_in_range() {
        let mut r = SplitMix64::new(7);
        for &(n, k) in &[(10, 10), (100, 25), (1, 1), (5, 0)] {
            let mut s = r.sample_without_replacement(n, k);
            assert_eq!(s.len(), k);
            s.sort();
            s.dedup();
            assert_eq!(s.len(), k);
            assert!(s.iter().all(|&x| x < n));
        }
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4)
            .map(|s| SplitMix64::for_stream(1, s).next_u64())
            .collect();
        let b: Vec<u64> = (0..4)
            .map(|s| SplitMix64::for_stream(1, s).next_u64())
            .collect();
        assert_eq!(a, b);
        assert!(a.windows(2).all(|w| w[0] != w[1]));
    }
}
