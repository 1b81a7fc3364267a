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

/// One TDSet's failed reconciles, as the backoff counts them. A failure counts (the wait
/// doubles) only once the shortest wait the last count gave has run out: reconciles that
/// watch events start meanwhile and fail the same way do not count again. Counted each, six
/// failures in two seconds (a workload's pods changing while its write is refused) made the
/// next retry 170 s away, far past the refusal's end.
#[derive(Clone, Copy, Debug, Default)]
pub struct Failures {
    counted: u32,
    until: Option<std::time::Instant>,
}

impl Failures {
    /// A failure at `now`; the attempt it makes (1, 2, ...).
    pub(crate) fn fail(&mut self, now: std::time::Instant) -> u32 {
        // (No `until` yet: the first failure.)
        if self.until.is_none_or(|until| now >= until) {
            self.counted = self.counted.saturating_add(1);
            self.until = Some(now + after(self.counted, 0.0));
        }
        self.counted
    }
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

    #[test]
    fn failures_within_the_last_wait_do_not_double_it() {
        let t0 = std::time::Instant::now();
        let mut f = super::Failures::default();
        assert_eq!(f.fail(t0), 1);
        // Five more within 2 s (watch events): still the first attempt's wait (5 s).
        for ms in [100, 400, 900, 1500, 2000] {
            assert_eq!(f.fail(t0 + std::time::Duration::from_millis(ms)), 1);
        }
        // Once the shortest first wait (3.75 s) has run out, the next failure counts.
        assert_eq!(f.fail(t0 + std::time::Duration::from_millis(3800)), 2);
        assert_eq!(f.fail(t0 + std::time::Duration::from_secs(5)), 2);
        assert_eq!(f.fail(t0 + std::time::Duration::from_secs(12)), 3);
    }

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
