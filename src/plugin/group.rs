//! `kubectl tdset preview NAME` of a group: the workloads its selector matches now, what each
//! runs, its own count, and what it gets at the next transition (read with the user's own
//! credentials; the operator is not asked).

use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::api::{GroupKind, NamedKind, TDSet};
use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::workload::group::{Record, Selector, Value};

/// One matched workload, as the preview shows it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberPreview {
    pub kind: String,
    pub name: String,
    /// What it runs now: a count, or "suspended"/"running" for a CronJob.
    pub now: String,
    /// Its own count (recorded on it while a TDSet holds it).
    pub own: String,
    /// What the next transition gives it; absent when none is scheduled.
    pub next: Option<String>,
    /// "excluded", or the TDSet whose record it carries when that is another one.
    pub note: Option<String>,
}

pub(super) async fn resource(client: &Client, k: &GroupKind) -> Result<Option<ApiResource>> {
    let (group, version, plural) = match k {
        GroupKind::Named(NamedKind::Deployment) => ("apps", "v1", "deployments"),
        GroupKind::Named(NamedKind::StatefulSet) => ("apps", "v1", "statefulsets"),
        GroupKind::Named(NamedKind::CronJob) => ("batch", "v1", "cronjobs"),
        GroupKind::Scalable { kind, group } => {
            return match kube::discovery::group(client, group).await {
                Ok(g) => Ok(g.recommended_kind(kind).map(|(r, _)| r)),
                Err(_) => Ok(None),
            };
        }
    };
    Ok(Some(ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: k.kind().into(),
        plural: plural.into(),
    }))
}

fn value_of(k: &GroupKind, o: &DynamicObject) -> Option<Value> {
    match k {
        GroupKind::Named(NamedKind::CronJob) => Some(Value::Suspended(
            o.data
                .pointer("/spec/suspend")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        )),
        GroupKind::Named(_) => Some(Value::Replicas(
            o.data
                .pointer("/spec/replicas")
                .and_then(serde_json::Value::as_i64)
                .map_or(1, |v| v as i32),
        )),
        // Where a custom kind keeps its count is its CRD's business; most use spec.replicas.
        GroupKind::Scalable { .. } => o
            .data
            .pointer("/spec/replicas")
            .and_then(serde_json::Value::as_i64)
            .map(|v| Value::Replicas(v as i32)),
    }
}

/// The group's workloads, with what the next transition after `at` gives each.
pub async fn members(
    client: &Client,
    ns: &str,
    tdset: &TDSet,
    schedule: &Schedule,
    at: DateTime<Utc>,
) -> Result<Vec<MemberPreview>> {
    let Some(sel) = &tdset.spec.scale_target_selector else {
        return Ok(vec![]);
    };
    let selector = Selector::compile(&sel.selector).map_err(Error::Config)?;
    let next = schedule.next_transition(at);
    let me = tdset.name_any();
    let mut out = Vec::new();
    for k in sel.kinds() {
        let Some(res) = resource(client, &k).await? else {
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
        let list = api
            .list(&ListParams::default().labels(&selector.to_query()))
            .await
            .map_err(Error::kube(format!("listing {} in {ns}", res.plural)))?;
        for o in list.items.iter().filter(|o| selector.matches(o.labels())) {
            let Some(value) = value_of(&k, o) else {
                continue;
            };
            let record = Record::read(o.annotations(), value);
            let own = match &record {
                Some(r) if r.scheduled == value => r.own,
                _ => value,
            };
            let name = o.name_any();
            let note = if sel.exclude.contains(&name) {
                Some("excluded".to_string())
            } else {
                record
                    .as_ref()
                    .filter(|r| r.holder != me)
                    .map(|r| format!("held by TDSet {}", r.holder))
            };
            out.push(MemberPreview {
                kind: res.kind.clone(),
                name,
                now: value.short(),
                own: own.short(),
                next: next
                    .filter(|_| note.is_none())
                    .map(|n| Value::at(n.count(), own).short()),
                note,
            });
        }
    }
    out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    Ok(out)
}

/// The workloads as a table, after the preview.
pub fn table(members: &[MemberPreview], next_at: Option<&str>) -> String {
    let next = format!("NEXT ({})", next_at.unwrap_or("none"));
    let header = ["KIND", "NAME", "NOW", "OWN", &next, "NOTE"].map(String::from);
    let rows: Vec<[String; 6]> = members
        .iter()
        .map(|m| {
            [
                m.kind.clone(),
                m.name.clone(),
                m.now.clone(),
                m.own.clone(),
                m.next.clone().unwrap_or_else(|| "-".into()),
                m.note.clone().unwrap_or_default(),
            ]
        })
        .collect();
    format!(
        "\nworkloads matched: {}\n{}",
        members.len(),
        super::table(&[header], &rows)
    )
}
