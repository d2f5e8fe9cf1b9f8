//! A seeded random number generator (SplitMix64), so that a run's choices
//! (which call, which name, which fault, when) come from its seed alone and
//! the same seed replays the same workload. Not a cryptographic generator:
//! owner tokens come from the broker, never from here.

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014): one u64 of state, good enough statistics for a
/// workload, and trivially forked per client.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator of its own for part `n` of a run (a client, the
    /// nemesis), independent of how many numbers the others draw.
    pub fn fork(seed: u64, n: u64) -> Self {
        let mut base = Rng(seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F));
        base.next_u64();
        base
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// An index into `len` items: a number in `0..len` (0 when `len` is
    /// 0), drawn as [`below`](Self::below) draws it.
    pub fn index(&mut self, len: usize) -> usize {
        let i = self.below(len as u64);
        usize::try_from(i).expect("an index below a usize length fits a usize")
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }

    /// One of `items`, each with its weight (a weight of 0 is never picked).
    pub fn weighted<'a, T>(&mut self, items: &'a [(u32, T)]) -> &'a T {
        let total: u64 = items.iter().map(|(w, _)| u64::from(*w)).sum();
        let mut pick = self.below(total);
        for (w, item) in items {
            if pick < u64::from(*w) {
                return item;
            }
            pick -= u64::from(*w);
        }
        &items.last().expect("weighted() of no items").1
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn one_seed_one_sequence_and_forks_differ() {
        let a: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(Rng::fork(7, 1).next_u64(), Rng::fork(7, 2).next_u64());
    }

    #[test]
    fn weighted_never_picks_a_zero_weight_and_covers_the_rest() {
        let mut r = Rng::new(1);
        let mut seen = [0u32; 3];
        for _ in 0..3000 {
            seen[*r.weighted(&[(1, 0usize), (0, 1), (2, 2)])] += 1;
        }
        assert_eq!(seen[1], 0);
        assert!(seen[0] > 700 && seen[2] > 1700, "{seen:?}");
    }
}
