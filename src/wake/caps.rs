//! What one tenant may take of the proxy: connections in all, from one client address, through
//! one Service (read, held or relayed), and held for one Service; and how long a relayed
//! connection may sit idle. Every Service's and every source's share is at most half of the
//! whole, so no one Service, and no one client, can take every connection the proxy has.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

/// The caps, as the flags give them.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Open at once, in all.
    pub connections: usize,
    /// Open at once from one client address.
    pub per_source: usize,
    /// Open at once through one Service: read, held or relayed.
    pub per_service: usize,
    /// Held at once for one Service (past it: 503 at once).
    pub held_per_service: usize,
    /// A relayed connection that carries no byte either way for this long is closed.
    pub relay_idle: Duration,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            connections: 4096,
            per_source: 512,
            per_service: 512,
            held_per_service: 256,
            relay_idle: Duration::from_secs(120),
        }
    }
}

impl Caps {
    /// Refuses caps that would let one Service or one client take the whole proxy.
    pub fn checked(self) -> Result<Caps> {
        let half = self.connections / 2;
        let bad = |what: &str, value: usize| {
            Err(Error::Config(format!(
                "--max-{what} is {value}: at most half of --max-connections ({half}), so that one \
                 {} never takes every connection the proxy has",
                if what == "per-source" {
                    "client"
                } else {
                    "Service"
                }
            )))
        };
        if self.per_source == 0 || self.per_source > half {
            return bad("per-source", self.per_source);
        }
        if self.per_service == 0 || self.per_service > half {
            return bad("per-service", self.per_service);
        }
        if self.held_per_service > self.per_service {
            return Err(Error::Config(format!(
                "--max-held-per-service is {}: at most --max-per-service ({})",
                self.held_per_service, self.per_service
            )));
        }
        if self.relay_idle.is_zero() {
            return Err(Error::Config(
                "--relay-idle-seconds must be at least 1".into(),
            ));
        }
        Ok(self)
    }
}

/// Counts of what is open per key (a client address, a Service); a key is forgotten when its
/// count is back to 0, so the map is as large as what is open.
pub struct Counts<K: Eq + Hash + Clone>(Arc<Mutex<HashMap<K, usize>>>);

impl<K: Eq + Hash + Clone> Default for Counts<K> {
    fn default() -> Self {
        Counts(Arc::default())
    }
}

impl<K: Eq + Hash + Clone> Counts<K> {
    /// One more open for `key`, if it has fewer than `cap`; given back when the slot drops.
    pub fn take(&self, key: &K, cap: usize) -> Option<Slot<K>> {
        let mut counts = self.0.lock().ok()?;
        let n = counts.entry(key.clone()).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Slot {
            counts: self.0.clone(),
            key: key.clone(),
        })
    }

    /// How many keys have something open.
    pub fn keys(&self) -> usize {
        self.0.lock().map(|c| c.len()).unwrap_or(0)
    }
}

/// One open connection counted for its key.
pub struct Slot<K: Eq + Hash + Clone> {
    counts: Arc<Mutex<HashMap<K, usize>>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.counts.lock()
            && let Some(n) = counts.get_mut(&self.key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_at_most_its_cap_and_is_forgotten_once_nothing_is_open() {
        let counts: Counts<&str> = Counts::default();
        let a: Vec<_> = (0..3).filter_map(|_| counts.take(&"a", 3)).collect();
        assert_eq!(a.len(), 3);
        assert!(counts.take(&"a", 3).is_none(), "past its cap");
        let b = counts.take(&"b", 3);
        assert!(b.is_some(), "another key is not held back by the first");
        assert_eq!(counts.keys(), 2);
        drop(a);
        drop(b);
        assert_eq!(counts.keys(), 0);
        assert!(counts.take(&"a", 3).is_some());
    }

    #[test]
    fn caps_that_let_one_service_or_client_take_the_whole_proxy_are_refused() {
        assert!(Caps::default().checked().is_ok());
        let whole = Caps {
            per_service: 4096,
            ..Caps::default()
        };
        let e = whole.checked().unwrap_err().to_string();
        assert!(e.contains("--max-per-service") && e.contains("2048"), "{e}");
        let client = Caps {
            connections: 8,
            per_source: 5,
            per_service: 4,
            held_per_service: 4,
            ..Caps::default()
        };
        assert!(
            client
                .checked()
                .unwrap_err()
                .to_string()
                .contains("--max-per-source")
        );
        let held = Caps {
            held_per_service: 600,
            ..Caps::default()
        };
        assert!(
            held.checked()
                .unwrap_err()
                .to_string()
                .contains("--max-held-per-service")
        );
    }
}
