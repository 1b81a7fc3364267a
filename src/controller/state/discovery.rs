//! Which kind a `scaleTargetRef` names, as the API server's discovery describes it (its
//! resource and whether it has a `/scale` subresource), remembered between reconciles.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};

use super::outcome::Answer;
use crate::api::ScaleTargetRef;
use crate::error::{Error, Result};
use crate::status::Problem;

/// A kind as discovery describes it.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub(crate) resource: ApiResource,
    pub(crate) has_scale: bool,
}

/// Discovery of target kinds, remembered so a reconcile does not ask the API server each
/// time: a kind that is served for ten minutes, one that is not for ten seconds (a CRD
/// installed after the TDSet is picked up quickly).
pub struct Discovery {
    client: Client,
    kinds: Mutex<HashMap<String, Lookup>>,
}

/// When a kind was looked up, and what was found.
type Lookup = (Instant, Result<Resolved, Problem>);

impl Discovery {
    const FOUND_FOR: Duration = Duration::from_secs(600);
    const MISSING_FOR: Duration = Duration::from_secs(10);

    pub fn new(client: Client) -> Discovery {
        Discovery {
            client,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// `Ok(Err(problem))` when the kind is not served; `Err` when discovery itself failed.
    pub(crate) async fn resolve(&self, r: &ScaleTargetRef) -> Answer<Resolved> {
        let key = format!("{}/{}", r.api_version, r.kind);
        if let Ok(kinds) = self.kinds.lock()
            && let Some((at, found)) = kinds.get(&key)
        {
            let ttl = if found.is_ok() {
                Self::FOUND_FOR
            } else {
                Self::MISSING_FOR
            };
            if at.elapsed() < ttl {
                return Ok(found.clone());
            }
        }
        let gvk = GroupVersionKind::gvk(r.group(), r.version(), &r.kind);
        let found = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => Ok(Resolved {
                resource,
                has_scale: caps.subresources.iter().any(|(s, _)| s.plural == "scale"),
            }),
            Err(kube::Error::Discovery(_)) => Err(not_served(r)),
            Err(kube::Error::Api(s)) if s.is_not_found() => Err(not_served(r)),
            Err(e) => {
                return Err(Error::kube(format!(
                    "discovering {} {}",
                    r.api_version, r.kind
                ))(e));
            }
        };
        if let Ok(mut kinds) = self.kinds.lock() {
            remember(&mut kinds, key, (Instant::now(), found.clone()));
        }
        Ok(found)
    }

    /// A kind of a group, in the group's preferred version (a group's `Kind.group`).
    pub(crate) async fn resolve_kind(&self, group: &str, kind: &str) -> Answer<Resolved> {
        let key = format!("{group}/*/{kind}");
        if let Some(found) = self.remembered(&key) {
            return Ok(found);
        }
        let missing = || {
            Problem::TargetNotFound(format!(
                "the API server serves no kind {kind} in group {group}; check spec.scaleTargetSelector.kinds (is its CRD installed?)"
            ))
        };
        let found = match kube::discovery::group(&self.client, group).await {
            Ok(g) => match g.recommended_kind(kind) {
                Some((resource, caps)) => Ok(Resolved {
                    resource,
                    has_scale: caps.subresources.iter().any(|(s, _)| s.plural == "scale"),
                }),
                None => Err(missing()),
            },
            Err(kube::Error::Discovery(_)) => Err(missing()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Err(missing()),
            Err(e) => return Err(Error::kube(format!("discovering group {group}"))(e)),
        };
        if let Ok(mut kinds) = self.kinds.lock() {
            remember(&mut kinds, key, (Instant::now(), found.clone()));
        }
        Ok(found)
    }

    /// A lookup still fresh enough to use.
    fn remembered(&self, key: &str) -> Option<Result<Resolved, Problem>> {
        let kinds = self.kinds.lock().ok()?;
        let (at, found) = kinds.get(key)?;
        let ttl = if found.is_ok() {
            Self::FOUND_FOR
        } else {
            Self::MISSING_FOR
        };
        (at.elapsed() < ttl).then(|| found.clone())
    }
}

/// Kinds remembered at most. The keys come from TDSet specs, which any tenant writes: past
/// this, entries that have expired go, then the oldest, so made-up kinds cannot grow the map.
const MAX_KINDS: usize = 256;

fn remember(kinds: &mut HashMap<String, Lookup>, key: String, lookup: Lookup) {
    if kinds.len() >= MAX_KINDS && !kinds.contains_key(&key) {
        let now = lookup.0;
        kinds.retain(|_, (at, found)| {
            let ttl = if found.is_ok() {
                Discovery::FOUND_FOR
            } else {
                Discovery::MISSING_FOR
            };
            now.duration_since(*at) < ttl
        });
        while kinds.len() >= MAX_KINDS {
            let Some(oldest) = kinds
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            kinds.remove(&oldest);
        }
    }
    kinds.insert(key, lookup);
}

fn not_served(r: &ScaleTargetRef) -> Problem {
    Problem::TargetNotFound(format!(
        "the API server does not serve kind {} in {}; check spec.scaleTargetRef.apiVersion and kind (is its CRD installed?)",
        r.kind, r.api_version
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_kinds_never_grow_the_memory_past_its_bound() {
        let mut kinds = HashMap::new();
        let start = Instant::now();
        let missing = |i: usize| {
            Err(not_served(&ScaleTargetRef {
                api_version: "made.up/v1".into(),
                kind: format!("Kind{i}"),
                name: "x".into(),
            }))
        };
        for i in 0..10 * MAX_KINDS {
            // All within one TTL: nothing has expired, the oldest goes.
            let at = start + Duration::from_millis(i as u64);
            remember(&mut kinds, format!("made.up/v1/Kind{i}"), (at, missing(i)));
            assert!(kinds.len() <= MAX_KINDS);
        }
        assert!(kinds.contains_key(&format!("made.up/v1/Kind{}", 10 * MAX_KINDS - 1)));
        assert!(!kinds.contains_key("made.up/v1/Kind0"));
    }
}
