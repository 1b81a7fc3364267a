//! How long a failed reconcile waits before it is retried: doubling from 5 s to 5 min per
//! TDSet, each wait spread by +-25 % so TDSets that failed together do not retry together.

use std::time::Duration;

/// The wait before retry `attempt` (1, 2, ...), `jitter` in [0, 1).
pub(super) fn after(attempt: u32, jitter: f64) -> Duration {
    const FIRST: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(300);
    let base = FIRST
        .saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(MAX);
    base.mul_f64(0.75 + jitter / 2.0)
}

/// A number in [0, 1) that differs between calls: each `RandomState` is keyed afresh, so
/// hashing the same byte gives a new value every time (no random-number crate needed).
pub(super) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_back_off_exponentially_with_jitter_up_to_five_minutes() {
        assert_eq!(after(1, 0.5), Duration::from_secs(5));
        assert_eq!(after(2, 0.5), Duration::from_secs(10));
        assert_eq!(after(4, 0.5), Duration::from_secs(40));
        assert_eq!(after(50, 0.5), Duration::from_secs(300));
        assert_eq!(after(1, 0.0), Duration::from_millis(3750));
        assert!(after(1, 0.999) < Duration::from_millis(6250));
        let spread: std::collections::HashSet<u64> =
            (0..20).map(|_| (jitter() * 1e6) as u64).collect();
        assert!(spread.len() > 15, "jitter repeats: {spread:?}");
        assert!((0..1000).map(|_| jitter()).all(|j| (0.0..1.0).contains(&j)));
    }
}
