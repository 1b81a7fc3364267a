//! What Prometheus last answered to each query `spec.idle` asks (one per distinct text, for
//! every TDSet), filled by the traffic loop (`run/traffic.rs`) and read by the reconciles.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::workload::traffic::Rates;

/// Where traffic is read, and how often.
#[derive(Clone, Debug)]
pub struct TrafficOptions {
    /// Prometheus's base URL (`--prometheus-url`).
    pub url: String,
    /// How often every query is asked (`--idle-read-interval`).
    pub every: Duration,
}

/// One query's last answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub at: DateTime<Utc>,
    /// The rates, or why there are none: the `IdleSignal` reason and a message.
    pub rates: Result<Arc<Rates>, (&'static str, String)>,
}

/// The answers, by query text.
#[derive(Default)]
pub struct Traffic {
    answers: RwLock<HashMap<String, Answer>>,
}

impl Traffic {
    pub fn answer(&self, query: &str) -> Option<Answer> {
        self.answers.read().ok()?.get(query).cloned()
    }

    /// Records what `query` answered.
    pub fn set(&self, query: &str, answer: Answer) {
        if let Ok(mut a) = self.answers.write() {
            a.insert(query.to_string(), answer);
        }
    }

    /// Keeps only the answers to `wanted` (a query no TDSet asks any more is forgotten).
    pub fn retain(&self, wanted: &std::collections::BTreeSet<String>) {
        if let Ok(mut a) = self.answers.write() {
            a.retain(|q, _| wanted.contains(q));
        }
    }
}
