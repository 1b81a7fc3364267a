//! What one tenant may take of the proxy: connections in all, through one namespace's Services,
//! through one Service (read, held or relayed), from one client address to one Service, and
//! held for one Service; and how long a relayed connection may sit idle. A namespace's share is
//! at most half of the whole, a Service's at most its namespace's, a client's at most half a
//! Service's: no one namespace, Service or client takes everything above it. A client is
//! counted per Service, not in all: the clients of many tenants' Services share the few
//! addresses of an ingress controller or of the nodes, and must not be one client.

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
    /// Open at once through the Services of one namespace.
    pub per_namespace: usize,
    /// Open at once from one client address to one Service.
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
            per_namespace: 1024,
            per_source: 128,
            per_service: 512,
            held_per_service: 256,
            relay_idle: Duration::from_secs(120),
        }
    }
}

impl Caps {
    /// Refuses caps that would let one Service or one client take the whole proxy.
    pub fn checked(self) -> Result<Caps> {
        let bad = |what: &str, value: usize, most: usize, of: &str| {
            Err(Error::Config(format!(
                "--max-{what} is {value}: it must be at least 1 and at most {most} ({of}), so \
                 that no one of them takes everything the proxy has"
            )))
        };
        let c = self;
        if c.per_namespace == 0 || c.per_namespace > (c.connections / 2).max(1) {
            let most = (c.connections / 2).max(1);
            return bad(
                "per-namespace",
                c.per_namespace,
                most,
                "half of --max-connections",
            );
        }
        if c.per_service == 0 || c.per_service > c.per_namespace {
            return bad(
                "per-service",
                c.per_service,
                c.per_namespace,
                "--max-per-namespace",
            );
        }
        if c.per_source == 0 || c.per_source > (c.per_service / 2).max(1) {
            let most = (c.per_service / 2).max(1);
            return bad(
                "per-source",
                c.per_source,
                most,
                "half of --max-per-service",
            );
        }
        if c.held_per_service == 0 || c.held_per_service > c.per_service {
            return bad(
                "held-per-service",
                c.held_per_service,
                c.per_service,
                "--max-per-service",
            );
        }
        if c.relay_idle.is_zero() {
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
    fn caps_that_let_one_namespace_service_or_client_take_what_is_above_it_are_refused() {
        assert!(Caps::default().checked().is_ok());
        let refused = |c: Caps, flag: &str| {
            let e = c.checked().unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        };
        refused(
            Caps {
                per_namespace: 4096,
                ..Caps::default()
            },
            "--max-per-namespace is 4096",
        );
        refused(
            Caps {
                per_service: 2048,
                ..Caps::default()
            },
            "--max-per-service",
        );
        refused(
            Caps {
                per_source: 512,
                ..Caps::default()
            },
            "--max-per-source",
        );
        refused(
            Caps {
                held_per_service: 600,
                ..Caps::default()
            },
            "--max-held-per-service",
        );
        // The smallest that holds: one connection in all.
        let one = Caps {
            connections: 1,
            per_namespace: 1,
            per_service: 1,
            per_source: 1,
            held_per_service: 1,
            ..Caps::default()
        };
        assert!(one.checked().is_ok());
    }
}
