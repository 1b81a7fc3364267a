//! How long to wait after a failure: a failed reconcile (doubling from 5 s to 5 min per TDSet,
//! each wait spread by +-25 % so TDSets that failed together do not retry together), and a
//! watch against an API server that cannot be reached (`ApiBackoff`).

use std::time::Duration;

/// The wait before retry `attempt` (1, 2, ...), `jitter` in [0, 1).
pub(crate) fn after(attempt: u32, jitter: f64) -> Duration {
    const FIRST: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(300);
    let base = FIRST
        .saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(MAX);
    base.mul_f64(0.75 + jitter / 2.0)
}

/// A number in [0, 1) that differs between calls: each `RandomState` is keyed afresh, so
/// hashing the same byte gives a new value every time (no random-number crate needed).
pub(crate) fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Retries against an unreachable API server every few seconds at most: kube's default grows
/// to 30 s per layer, and the watch and the controller each back off, so an operator could sit
/// idle for a minute after the API server was already back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ApiBackoff {
    next: Duration,
}

impl ApiBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(5);
}

impl Iterator for ApiBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for ApiBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

pub(crate) fn api_backoff() -> ApiBackoff {
    ApiBackoff {
        next: ApiBackoff::MIN,
    }
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
