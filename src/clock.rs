//! "Now", injected: the controller never calls `Utc::now()` itself, so tests and benchmarks can
//! run it a second before a boundary.

use chrono::{DateTime, Duration, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock, shifted by a fixed offset (zero in production).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock {
    pub offset: Duration,
}

impl SystemClock {
    /// A clock that reads `at` right now and then runs at real speed.
    pub fn starting_at(at: DateTime<Utc>) -> SystemClock {
        SystemClock {
            offset: at - Utc::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }
}
