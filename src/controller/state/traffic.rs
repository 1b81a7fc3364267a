//! What Prometheus last answered to each query `spec.idle` asks (one per distinct text, for
//! every TDSet), filled by the traffic loop (`run/traffic.rs`) and read by the reconciles.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::workload::traffic::{Rates, Source};

/// Where traffic is read, and how often.
#[derive(Clone, Debug)]
pub struct TrafficOptions {
    /// Prometheus's base URL (`--prometheus-url`).
    pub url: String,
    /// How often every query is asked (`--idle-read-interval`).
    pub every: Duration,
    /// The templates' rates are over this many seconds (`--idle-rate-window`).
    pub window_secs: u64,
}

impl TrafficOptions {
    /// Reads at `url` every `every`, the templates' rates over `window_secs`, raised to how
    /// long an answer counts (`status::idle::fresh_for`) where it is shorter: a request counts
    /// in a rate only for the window after it, and a window shorter than the time between two
    /// answers that count lets one fall between them unseen.
    pub fn new(url: String, every: Duration, window_secs: u64) -> TrafficOptions {
        let fresh = crate::status::idle::fresh_for(every).num_seconds();
        TrafficOptions {
            url,
            every,
            window_secs: window_secs.max(u64::try_from(fresh).unwrap_or(u64::MAX)),
        }
    }
}

/// One query's last answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub at: DateTime<Utc>,
    /// The rates, or why there are none: the `IdleSignal` reason and a message.
    pub rates: Result<Arc<Rates>, (&'static str, String)>,
}

/// The answers, by what was asked.
#[derive(Default)]
pub struct Traffic {
    answers: RwLock<HashMap<Source, Answer>>,
}

impl Traffic {
    pub fn answer(&self, asked: &Source) -> Option<Answer> {
        self.answers.read().ok()?.get(asked).cloned()
    }

    /// Records what `asked` answered.
    pub fn set(&self, asked: &Source, answer: Answer) {
        if let Ok(mut a) = self.answers.write() {
            a.insert(asked.clone(), answer);
        }
    }

    /// Keeps only the answers to `wanted` (a query no TDSet asks any more is forgotten).
    pub fn retain(&self, wanted: &std::collections::BTreeSet<Source>) {
        if let Ok(mut a) = self.answers.write() {
            a.retain(|q, _| wanted.contains(q));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_window_shorter_than_an_answer_counts_is_raised_to_it() {
        let o = |every, window| {
            TrafficOptions::new(String::new(), Duration::from_secs(every), window).window_secs
        };
        assert_eq!(o(30, 120), 120);
        assert_eq!(
            o(30, 20),
            90,
            "a request between two answers would go unseen"
        );
        assert_eq!(o(5, 10), 60);
        assert_eq!(o(60, 120), 180);
    }
}
