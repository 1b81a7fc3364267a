//! Events about TDSets: what is published on which change. The bookkeeping lane sends them.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::{Resource, ResourceExt};
use tracing::info;

use super::context::{Change, Context};
use crate::api::TDSet;
use crate::schedule::Evaluation;
use crate::workload::owned::FIELD_MANAGER;

/// The Events one reconcile decided on, in order. Stages add to it; the driver hands it to the
/// bookkeeping lane once, after the stages (`publish_all`).
pub(super) type Events = Vec<EventNote>;

pub(super) fn record_deployment_change(
    tdset: &TDSet,
    ctx: &Context,
    eval: &Evaluation,
    before: Option<&Deployment>,
    change: &Change,
    template_changed: bool,
    events: &mut Events,
) {
    let name = format!(
        "{}/{}",
        tdset.namespace().unwrap_or_default(),
        tdset.name_any()
    );
    match change {
        Change::Unchanged => {}
        Change::Created => {
            info!(replicas = eval.replicas, window = ?eval.window_label, "created Deployment");
            let text = format!(
                "created Deployment {name} with {} replicas ({})",
                eval.replicas,
                eval.why()
            );
            events.push(self::note(tdset, EventType::Normal, "Created", text));
        }
        Change::Updated => {
            let from = before
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.replicas);
            let scaled = from.filter(|&f| f != eval.replicas);
            if let Some(from) = scaled {
                let change = format!("scaled Deployment {name}");
                events.push(record_scale(ctx, tdset, &change, from, eval.replicas, eval));
            }
            if template_changed || scaled.is_none() {
                let what = template_changes(before, tdset)
                    .or_else(|| template_changed.then(|| "pod template changed".into()))
                    .unwrap_or_else(|| "restored labels, selector or owner reference".into());
                info!(changes = %what, "updated Deployment to match the TDSet");
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "Updated",
                    format!("updated Deployment {name}: {what}"),
                ));
            }
        }
    }
}

/// A replica change the operator made (`change` says what: "scaled Deployment ns/web",
/// "set HorizontalPodAutoscaler web minReplicas"): counted, logged; the Event saying why.
pub(super) fn record_scale(
    ctx: &Context,
    tdset: &TDSet,
    change: &str,
    from: i32,
    to: i32,
    eval: &Evaluation,
) -> EventNote {
    let (direction, reason) = if to > from {
        ("up", "ScaledUp")
    } else {
        ("down", "ScaledDown")
    };
    ctx.metrics
        .scale_operations
        .with_label_values(&[direction])
        .inc();
    info!(from, to, window = ?eval.window_label, change, "scaled");
    let text = format!("{change} from {from} to {to} replicas: {}", eval.why());
    note(tdset, EventType::Normal, reason, text)
}

/// "image a -> b, port 80 -> 8080": what an update changed in a `container` Deployment.
fn template_changes(before: Option<&Deployment>, tdset: &TDSet) -> Option<String> {
    let spec = tdset.spec.container.as_ref()?;
    let container = before
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first());
    let old_image = container.and_then(|c| c.image.clone()).unwrap_or_default();
    let old_port = container
        .and_then(|c| c.ports.as_ref())
        .and_then(|p| p.first())
        .map(|p| p.container_port);
    let mut parts = Vec::new();
    if old_image != spec.image {
        parts.push(format!("image {old_image} -> {}", spec.image));
    }
    if old_port != Some(spec.port) {
        parts.push(format!(
            "port {} -> {}",
            old_port.map_or("-".into(), |p| p.to_string()),
            spec.port
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event about a TDSet, as a stage decides on it.
pub(super) fn note(tdset: &TDSet, type_: EventType, reason: &str, note: String) -> EventNote {
    EventNote {
        regarding: tdset.object_ref(&()),
        type_,
        reason: reason.into(),
        note: truncate(note, 1000),
        at: k8s_openapi::jiff::Timestamp::now(),
    }
}

/// Queues a reconcile's Events on the bookkeeping lane (they are sent after the workload
/// writes). Waits only when the lane's Event queue is full.
///
/// Each Event is created once: the operator emits only on real changes, so kube's Recorder,
/// which keeps every Event for six minutes to aggregate repeats and scans that cache on each
/// publish, would cost memory in proportion to the TDSets and buy nothing.
pub(super) async fn publish_all(ctx: &Context, events: Events) {
    for e in events {
        ctx.lane.event(e).await;
    }
}

/// An Event waiting in the bookkeeping lane: only what differs between Events, so a burst of
/// thousands stays small; `to_event` makes the API object when it is sent.
#[derive(Clone, Debug)]
pub struct EventNote {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub note: String,
    pub at: k8s_openapi::jiff::Timestamp,
}

impl EventNote {
    pub fn to_event(&self, instance: &str) -> Event {
        let ns = self
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        Event {
            metadata: ObjectMeta {
                // A trailing "-" is the one separator generateName allows.
                generate_name: Some(format!(
                    "{}-",
                    self.regarding.name.as_deref().unwrap_or("tdset")
                )),
                namespace: Some(ns),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(self.at)),
            type_: Some(format!("{:?}", self.type_)),
            reason: Some(self.reason.clone()),
            action: Some("Reconcile".into()),
            note: Some(self.note.clone()),
            regarding: Some(self.regarding.clone()),
            reporting_controller: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(instance.into()),
            ..Event::default()
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
