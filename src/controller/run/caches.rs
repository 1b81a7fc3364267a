//! What the wiring opens first: the indexes and memos the watches fill (`Caches`), and each
//! watch's store with the stream that fills it (`Watches`).

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use super::calendars;
use super::watches::{self, InitialList, api_for, hpa_watch, owned_watch, tdset_watch};
use crate::api::{TDCalendar, TDSet};
use crate::cache::Cached;
use crate::clock::Clock;
use crate::controller::state::{
    CalendarIndex, GroupIndex, IcsSources, PortsHandedOut, Sharding, TargetIndex, Wakeups,
};
use crate::memo::{OwnWrites, StatusMemo};

/// The indexes and memos the watches fill and the reconciles read.
pub(super) struct Caches {
    pub(super) index: TargetIndex,
    pub(super) groups: GroupIndex,
    pub(super) calendar_index: CalendarIndex,
    pub(super) ics: Arc<IcsSources>,
    pub(super) statuses: Arc<StatusMemo>,
    pub(super) own_writes: Arc<OwnWrites>,
    pub(super) wakeups: Arc<Wakeups>,
}

impl Caches {
    pub(super) fn new(concurrency: u16) -> Self {
        Self {
            index: TargetIndex::default(),
            groups: GroupIndex::default(),
            calendar_index: CalendarIndex::default(),
            ics: Arc::new(IcsSources::default()),
            statuses: Arc::new(StatusMemo::default()),
            own_writes: Arc::new(OwnWrites::default()),
            // Twice what can run, so a reconcile that ends finds the next one already waiting.
            wakeups: Arc::new(Wakeups::new(usize::from(concurrency) * 2)),
        }
    }
}

pub(super) type Events<K> = BoxStream<'static, std::result::Result<K, watcher::Error>>;

/// Each watch's store, and the stream that fills it (driven by the controller).
pub(super) struct Watches {
    /// Whether the API server streams the initial lists.
    pub(super) stream: bool,
    pub(super) tdsets: Store<Cached<TDSet>>,
    pub(super) tdset_events: Events<Cached<TDSet>>,
    pub(super) deployments: Store<Cached<Deployment>>,
    pub(super) deployment_events: Events<Cached<Deployment>>,
    pub(super) services: Store<Cached<Service>>,
    pub(super) service_events: Events<Cached<Service>>,
    pub(super) hpas: Store<HorizontalPodAutoscaler>,
    pub(super) hpa_events: Events<HorizontalPodAutoscaler>,
    pub(super) wake_slices: Store<EndpointSlice>,
    pub(super) wake_slice_events: Events<EndpointSlice>,
    pub(super) ports_handed_out: Arc<PortsHandedOut>,
    pub(super) calendars: Store<TDCalendar>,
    pub(super) calendar_events: Events<TDCalendar>,
}

impl Watches {
    /// `ns`: the namespace watched, all when `None`.
    pub(super) async fn open(
        client: &Client,
        (ns, initial_list): (&Option<String>, InitialList),
        caches: &Caches,
        shard: Option<Arc<Sharding>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let stream = watches::streams_lists(api_for(client, ns), initial_list).await;
        let hooks = watches::TDSetHooks {
            index: caches.index.clone(),
            groups: caches.groups.clone(),
            calendars: caches.calendar_index.clone(),
            statuses: caches.statuses.clone(),
            wakeups: caches.wakeups.clone(),
            shard,
            relisted: Default::default(),
        };
        let (tdsets, tdset_events) = tdset_watch(api_for(client, ns), hooks, stream);
        let (deployments, deployment_events) = owned_watch(api_for(client, ns), stream);
        let (services, service_events) = owned_watch(api_for(client, ns), stream);
        let (hpas, hpa_events) = hpa_watch(api_for(client, ns), stream);
        let ports_handed_out = Arc::new(PortsHandedOut::default());
        let (wake_slices, wake_slice_events) =
            watches::wake_slice_watch(api_for(client, ns), stream, ports_handed_out.clone(), clock);
        let (calendars, calendar_events) =
            calendars::calendar_watch(kube::Api::all(client.clone()));
        Self {
            stream,
            tdsets,
            tdset_events: tdset_events.boxed(),
            deployments,
            deployment_events: deployment_events.boxed(),
            services,
            service_events: service_events.boxed(),
            hpas,
            hpa_events: hpa_events.boxed(),
            wake_slices,
            wake_slice_events: wake_slice_events.boxed(),
            ports_handed_out,
            calendars,
            calendar_events: calendar_events.boxed(),
        }
    }
}
