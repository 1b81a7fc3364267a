//! The watches that feed the controller, each with a cache that keeps only what a reconcile
//! reads, and the backoff they share.

use std::fmt::Debug;
use std::time::Duration;

use futures::TryStreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::TDSet;
use crate::cache::{Cached, Prune};
use crate::resources::{self, FIELD_MANAGER};

pub(super) fn tdset_watch(
    api: Api<TDSet>,
) -> (
    Store<TDSet>,
    impl futures::Stream<Item = Result<TDSet, watcher::Error>> + Send,
) {
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .backoff(api_backoff())
        .modify(|o: &mut TDSet| o.prune())
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// A watch of the owned objects of kind `K` (by label), cached compactly (see `Cached`).
pub(super) fn owned_watch<K>(
    api: Api<K>,
) -> (
    Store<Cached<K>>,
    impl futures::Stream<Item = Result<Cached<K>, watcher::Error>> + Send,
)
where
    K: Resource<DynamicType = ()>
        + Prune
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let owned = watcher::Config::default()
        .labels(&format!("{}={FIELD_MANAGER}", resources::MANAGED_BY_LABEL));
    let stream = watcher(api, owned)
        .backoff(api_backoff())
        .map_ok(|event| match event {
            watcher::Event::Apply(o) => watcher::Event::Apply(Cached::new(o)),
            watcher::Event::Delete(o) => watcher::Event::Delete(Cached::new(o)),
            watcher::Event::InitApply(o) => watcher::Event::InitApply(Cached::new(o)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
        })
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// Retries against an unreachable API server every few seconds at most: kube's default grows
/// to 30 s per layer, and the watch and the controller each back off, so an operator could sit
/// idle for a minute after the API server was already back.
#[derive(Clone, Copy, Debug)]
pub(super) struct ApiBackoff {
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

pub(super) fn api_backoff() -> ApiBackoff {
    ApiBackoff {
        next: ApiBackoff::MIN,
    }
}

pub(super) fn api_for<K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>>(
    client: &Client,
    ns: &Option<String>,
) -> Api<K> {
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
