//! An Event as a stage decides on it, kept small while it waits in the lane; the API object
//! is made when it is sent.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Resource;

use crate::api::TDSet;
use crate::workload::owned::FIELD_MANAGER;

/// The Events one reconcile decided on, in order. Stages add to it; the driver hands it to the
/// lane once, after the stages (`Lane::publish_all`).
pub(crate) type Events = Vec<EventNote>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An Event about a TDSet, as a stage decides on it.
pub(crate) fn note(tdset: &TDSet, type_: EventType, reason: &str, note: String) -> EventNote {
    EventNote {
        regarding: tdset.object_ref(&()),
        type_,
        reason: reason.into(),
        note: truncate(note, 1000),
        at: k8s_openapi::jiff::Timestamp::now(),
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

/// At most `max` bytes of `s`, cut at a character boundary.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
