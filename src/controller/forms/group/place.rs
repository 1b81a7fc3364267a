//! Where a listed workload stands for a group: held by it, excluded, or held elsewhere.

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use crate::api::{GroupKind, NamedKind, ScaleTargetRef};
use crate::api::{ScaleTargetSelector, TDSet};
use crate::controller::state::Claim;
use crate::controller::state::Context;
use crate::workload::group::{self, Member, Place, Value};
use crate::workload::hpa::HpaView;
use crate::workload::keda;
use crate::workload::savings::Requests;
use crate::workload::target::conflicting_hpa;

use super::observe::{
    Kind, count_unset, int_at, is_floor_kind, is_hpa, is_scaled_object, member_of, pause_of,
    placed, requests_of,
};

/// What placing a workload needs to know about the TDSet.
pub(super) struct Placing<'a> {
    pub(super) tdset: &'a TDSet,
    pub(super) ctx: &'a Context,
    pub(super) ns: &'a str,
    pub(super) sel: &'a ScaleTargetSelector,
    /// This TDSet's claim (creationTimestamp, name).
    pub(super) me: Claim,
    /// The namespace's HPAs, read once for every workload placed.
    pub(super) hpas: &'a [HpaView],
}

/// Where a selected (or recorded) workload stands: excluded, held by something else (its
/// controller, the TDSet that owns it, an older claim), or held by this TDSet.
pub(super) fn place(p: &Placing<'_>, kind: &Kind, o: &DynamicObject) -> Place {
    let Placing {
        tdset,
        ctx,
        ns,
        sel,
        me,
        ..
    } = p;
    let name = o.name_any();
    let placed = placed(o);
    // The spec decides, not the index (which may not have caught up with it yet).
    if !kind.selected || !placed.selected {
        return Place::Outside;
    }
    if sel.exclude.contains(&name) {
        return Place::Excluded;
    }
    if let Some(c) = o
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        let what = if c.kind == "TDSet" && c.api_version.starts_with("schedule.rs/") {
            format!("TDSet {} (which owns it)", c.name)
        } else {
            format!("its controller, {} {}", c.kind, c.name)
        };
        if Some(&c.uid) != tdset.meta().uid.as_ref() {
            return Place::HeldElsewhere(what);
        }
    }
    // The oldest claim holds it: older groups that select it (and do not exclude it), and
    // TDSets that name it in scaleTargetRef.
    let (group, kind) = (kind.kind.group(), kind.kind.kind());
    let older_group = placed.oldest_other.filter(|c| c < me);
    let older_ref = ctx
        .index
        .claims(ns, group, kind, &name)
        .into_iter()
        .find(|c| c < me);
    let holder = match (older_group, older_ref) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match holder {
        Some((_, holder)) => Place::HeldElsewhere(format!("TDSet {holder} (the older claim)")),
        None => Place::Held,
    }
}

/// A workload this group takes over from a younger `scaleTargetRef` TDSet that held it: it
/// carries no record, and its value is that TDSet's count, so the own count is the one that
/// TDSet's status records for it (as if it were a record on the workload).
fn taken_over(p: &Placing<'_>, kind: &Kind, m: &Member) -> Option<group::Record> {
    let key = (p.ns, kind.kind.group(), kind.kind.kind(), m.name.as_str());
    let (holder, original) = left_by_me(p, kind, m).or_else(|| {
        p.ctx
            .index
            .original_elsewhere(key, &m.uid, &p.me.1, m.value.replicas())
    })?;
    let own = match m.value {
        Value::Replicas(_) => Value::Replicas(original),
        Value::Floor(_) => Value::Floor(original),
        Value::Suspended(_) | Value::Keda { .. } => return None,
    };
    Some(group::Record {
        holder,
        own,
        scheduled: m.value,
        previous: None,
    })
}

/// This TDSet's own record of the form it left (`scaleTargetRef`, whose `onDelete: Keep`
/// left the workload at the count it set): while the workload runs that count, the original
/// it recorded is the workload's own count.
pub(super) fn left_by_me(p: &Placing<'_>, kind: &Kind, m: &Member) -> Option<(String, i32)> {
    let status = p.ctx.statuses.current(p.tdset)?;
    let t = status.target.as_ref()?;
    let same = left_record_names(t, kind, m)
        && t.field == "spec.replicas"
        && status.desired_replicas == Some(m.value.replicas());
    // No holder's name: the record is not on the workload yet (see `left_target`).
    same.then_some((String::new(), t.original_replicas?))
}

/// Whether a target recorded in status is this listed workload (its kind, name and uid).
pub(super) fn left_record_names(t: &crate::api::TargetStatus, kind: &Kind, m: &Member) -> bool {
    t.group() == kind.kind.group()
        && t.kind == kind.kind.kind()
        && t.name == m.name
        && t.uid.as_deref().is_none_or(|u| u == m.uid)
}

/// The `scaleTargetRef` TDSet that holds a workload this group lets go of, once that TDSet's
/// status records the same own count as this group's record: the group then only takes its
/// record off, and never writes the count over that TDSet's. Otherwise (the holder has not
/// recorded it, or recorded another; another group selects it) the group gives the own count
/// back: a second write rather than a lost count.
pub(super) fn handed_to(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    o: &DynamicObject,
    m: &Member,
) -> Option<String> {
    let (group, kind_name) = (kind.kind.group(), kind.kind.kind());
    // Another group selects it: it gives the own count back itself.
    if placed(o).oldest_other.is_some() {
        return None;
    }
    let holder = ctx.index.holder(ns, group, kind_name, &m.name)?;
    let key = (ns, group, kind_name, m.name.as_str());
    let original = ctx.index.original_of(key, &m.uid, &holder)?;
    (original == m.own().replicas()).then_some(holder)
}

/// Whether an HPA, and so the workload it scales, is someone else's: its controller's (KEDA's
/// ScaledObject owns the HPAs it makes) or a TDSet's that names the HPA in scaleTargetRef.
pub(super) fn hpa_held_elsewhere(p: &Placing<'_>, o: &DynamicObject) -> Option<String> {
    let hpa = o.name_any();
    if let Some(c) = o
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
    {
        // KEDA scales a workload up from a 0 written to it: through its ScaledObject or not at all.
        let keda = c.kind == "ScaledObject" && c.api_version.starts_with("keda.sh/");
        let how = if keda {
            " (the group schedules the workload through its ScaledObject, not yet read)"
        } else {
            ""
        };
        return Some(format!(
            "{} {}, the controller of its HorizontalPodAutoscaler {hpa}{how}",
            c.kind, c.name
        ));
    }
    p.ctx
        .index
        .claims(p.ns, "autoscaling", "HorizontalPodAutoscaler", &hpa)
        .into_iter()
        .next()
        .map(|(_, holder)| {
            format!("TDSet {holder}, which schedules its HorizontalPodAutoscaler {hpa}")
        })
}

/// Whether a ScaledObject, and so the workload it scales, is someone else's to schedule: a
/// pause on it that is not the operator's night (the user's, or KEDA's users' tools'), or a
/// TDSet that names it in `scaleTargetRef`.
fn scaled_object_held_elsewhere(p: &Placing<'_>, o: &DynamicObject, m: &Member) -> Option<String> {
    let so = o.name_any();
    let pause = pause_of(o);
    // The operator's night: KEDA's pause at 0 where a TDSet's record says it paused it (its
    // floor may have been changed since: that is someone else's, the pause still ours).
    let ours = matches!(m.value, Value::Keda { paused: true, .. })
        && (m.record.as_ref())
            .is_some_and(|r| matches!(r.scheduled, Value::Keda { paused: true, .. }));
    if pause.pauses() && !ours {
        return Some(format!(
            "the pause on its ScaledObject {so} (autoscaling.keda.sh/paused-replicas {:?}, \
             paused {:?}), which is not the operator's: it is left as its user paused it",
            pause.paused_replicas.as_deref().unwrap_or("-"),
            pause.paused.as_deref().unwrap_or("-"),
        ));
    }
    p.ctx
        .index
        .claims(p.ns, keda::GROUP, keda::KIND, &so)
        .into_iter()
        .next()
        .map(|(_, holder)| format!("TDSet {holder}, which schedules its ScaledObject {so}"))
}

/// Which of the namespace's autoscalers were all read.
pub(super) struct Whole {
    pub(super) hpas: bool,
    pub(super) scaled_objects: bool,
}

/// One workload as listed, with what the status needs besides the plan's `Member`.
pub(super) struct Listed {
    pub(super) member: Member,
    /// What one replica's pod requests (`spec.template`; nothing for a CronJob, whose pods
    /// run only when a job does).
    pub(super) requests: Requests,
    /// `status.replicas`, `status.readyReplicas` and `status.availableReplicas`, where the
    /// kind reports them (a count left out of a status its controller keeps is 0).
    pub(super) running: Option<i32>,
    pub(super) ready: Option<i32>,
    pub(super) available: Option<i32>,
    /// For an HPA or a ScaledObject: who else sets its floor, if anyone (then this TDSet
    /// never does).
    pub(super) floor_elsewhere: Option<String>,
    /// For a ScaledObject: the group and kind of what it scales (`floor_of` has the name).
    pub(super) scales: Option<(String, String)>,
    /// Its tier in `order` (the workloads in none: the last; an HPA: its workload's).
    pub(super) tier: usize,
}

/// One listed object placed, with what the status needs of it.
fn one(placing: &Placing<'_>, kind: &Kind, o: &DynamicObject, value: Value) -> Listed {
    let placed = match place(placing, kind, o) {
        _ if is_floor_kind(kind) => Place::Outside,
        Place::Held if !kind.built_in && count_unset(o) => Place::HeldElsewhere(
            "its controller: spec.replicas is not set, so it runs its controller's default, \
             which the operator could not give back; set spec.replicas to schedule it"
                .into(),
        ),
        placed => placed,
    };
    let mut member = member_of(kind, o, value, placed);
    if member.record.is_none() && member.place == Place::Held {
        member.record = taken_over(placing, kind, &member);
    } else if member.record.is_some() && member.place != Place::Held {
        member.handed_to = handed_to(placing.ctx, placing.ns, kind, o, &member);
    }
    let mut scales = None;
    if is_scaled_object(kind) {
        let target = keda::target_of(&o.data);
        // As KEDA defaults it.
        let max = int_at(o, "/spec/maxReplicaCount").unwrap_or(keda::DEFAULT_MAX);
        scales = Some((target.group().to_string(), target.kind.clone()));
        member.floor_of = Some((target.name, max));
    } else if is_hpa(kind) {
        member.floor_of = Some((
            o.data
                .pointer("/spec/scaleTargetRef/name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
            int_at(o, "/spec/maxReplicas").unwrap_or(i32::MAX),
        ));
    }
    let target = ScaleTargetRef {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
        name: member.name.clone(),
    };
    member.autoscaled_by = conflicting_hpa(&target, placing.hpas).map(|h| h.name.clone());
    let requests = match kind.kind {
        GroupKind::Named(NamedKind::CronJob) => Requests::default(),
        _ => requests_of(o),
    };
    Listed {
        requests,
        running: int_at(o, "/status/replicas"),
        ready: reported(o, "/status/readyReplicas"),
        available: reported(o, "/status/availableReplicas"),
        floor_elsewhere: match kind {
            k if is_hpa(k) => hpa_held_elsewhere(placing, o),
            k if is_scaled_object(k) => scaled_object_held_elsewhere(placing, o, &member),
            _ => None,
        },
        scales,
        tier: super::observe::placed(o).tier,
        member,
    }
}

/// A count of the status: as it is, or 0 where the kind's controller keeps a status
/// (`observedGeneration`) and left it out (Go's `omitempty` drops a 0), or unknown.
fn reported(o: &DynamicObject, path: &str) -> Option<i32> {
    int_at(o, path).or_else(|| o.data.pointer("/status/observedGeneration").map(|_| 0))
}

/// An HPA's (or a ScaledObject's) floor is its workload's count: it is in that workload's
/// tier. Its workload is the one it scales by kind, group and name (`autoscaled_by`, see
/// `conflicting_hpa` and `scaled_by_keda`), never a workload of another kind that has the same
/// name.
fn floor_tiers(listed: &mut [(usize, Listed)]) {
    let tiers: Vec<Option<usize>> = (listed.iter())
        .map(|(_, f)| {
            f.member.floor_of.as_ref()?;
            (listed.iter())
                .find(|(_, w)| w.member.floor_of.is_none() && f.member.is_floor_of(&w.member))
                .map(|(_, w)| w.tier)
        })
        .collect();
    for ((_, l), tier) in listed.iter_mut().zip(tiers) {
        if let Some(t) = tier {
            l.tier = t;
        }
    }
}

/// What the listed ScaledObjects scale: (group, kind, name) of each target.
pub(super) fn keda_targets(
    kinds: &[Kind],
    found: &[(usize, DynamicObject, Value)],
) -> Vec<(String, String, String)> {
    (found.iter())
        .filter(|(k, ..)| is_scaled_object(&kinds[*k]))
        .map(|(_, o, _)| {
            let t = keda::target_of(&o.data);
            (t.group().to_string(), t.kind.clone(), t.name)
        })
        .collect()
}

/// The workloads a listed ScaledObject scales (by group, kind and name) are KEDA's: their
/// autoscaler is it, whatever HPA KEDA made for it.
fn scaled_by_keda(kinds: &[Kind], listed: &mut [(usize, Listed)]) {
    let scaled: Vec<(String, String, String, String)> = (listed.iter())
        .filter_map(|(_, l)| {
            let (group, kind) = l.scales.clone()?;
            let (workload, _) = l.member.floor_of.clone()?;
            Some((group, kind, workload, l.member.name.clone()))
        })
        .collect();
    for (k, l) in listed.iter_mut() {
        let resource = &kinds[*k].resource;
        if l.member.floor_of.is_some() {
            continue;
        }
        if let Some((.., so)) = scaled.iter().find(|(g, kind, w, _)| {
            *g == resource.group && *kind == resource.kind && *w == l.member.name
        }) {
            l.member.autoscaled_by = Some(so.clone());
            l.member.keda = true;
        }
    }
}

/// Places every listed object (index of its kind, the object, its value) for the plan, with
/// what the status needs besides: the listed workloads, and the plan's members in that order.
///
/// `whole`: whether every HPA and ScaledObject of the namespace was listed. Where not, a
/// workload which this TDSet does not hold yet is left alone if its HPA was not read, or (KEDA
/// installed) if the ScaledObjects were not all read: who sets its floor (KEDA, a TDSet's
/// `scaleTargetRef`) is not known.
pub(super) fn all(
    placing: &Placing<'_>,
    kinds: &[Kind],
    observed: Vec<(usize, DynamicObject, Value)>,
    whole: Whole,
) -> (Vec<(usize, Listed)>, Vec<Member>) {
    let mut listed: Vec<(usize, Listed)> = observed
        .into_iter()
        .map(|(k, o, value)| (k, one(placing, &kinds[k], &o, value)))
        .collect();
    scaled_by_keda(kinds, &mut listed);
    floor_tiers(&mut listed);
    let mut members: Vec<Member> = listed.iter().map(|(_, l)| l.member.clone()).collect();
    // A workload whose HPA (or ScaledObject) someone else schedules or manages is theirs: put
    // to sleep by this group, it would be woken by them (KEDA, a scaleTargetRef TDSet on the
    // HPA), and the two would take turns.
    for (_, l) in &listed {
        let Some(by) = &l.floor_elsewhere else {
            continue;
        };
        for m in members
            .iter_mut()
            .filter(|m| m.place == Place::Held && l.member.is_floor_of(m))
        {
            m.place = Place::HeldElsewhere(by.clone());
        }
    }
    let me = placing.tdset.name_any();
    let not_yet_mine =
        |m: &Member| m.place == Place::Held && m.record.as_ref().is_none_or(|r| r.holder != me);
    if !whole.hpas {
        let read: Vec<String> = (members.iter())
            .filter(|m| m.floor_of.is_some())
            .map(|m| m.name.clone())
            .collect();
        for m in members.iter_mut().filter(|m| not_yet_mine(m) && !m.keda) {
            if let Some(hpa) = m.autoscaled_by.as_ref().filter(|h| !read.contains(h)) {
                m.place = Place::HeldElsewhere(format!(
                    "its HorizontalPodAutoscaler {hpa} was not read (the namespace has more HPAs \
                     than one reconcile reads: twice --group-max-workloads), so who sets its \
                     floor is not known"
                ));
            }
        }
    }
    if !whole.scaled_objects {
        for m in members.iter_mut().filter(|m| not_yet_mine(m) && !m.keda) {
            m.place = Place::HeldElsewhere(
                "the namespace's ScaledObjects were not all read (more than one reconcile \
                 reads: twice --group-max-workloads, or not readable), so whether KEDA scales it \
                 is not known"
                    .into(),
            );
        }
    }
    // An HPA (a ScaledObject) is held with the workload whose floor it is (and only then).
    let held: Vec<Member> = (members.iter())
        .filter(|m| m.place == Place::Held && m.floor_of.is_none() && m.autoscaled_by.is_some())
        .cloned()
        .collect();
    for (m, _) in members
        .iter_mut()
        .zip(&listed)
        .filter(|(m, (_, l))| m.floor_of.is_some() && l.floor_elsewhere.is_none())
    {
        if held.iter().any(|w| m.is_floor_of(w)) {
            m.place = Place::Held;
        }
    }
    (listed, members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(api_version: &str, kind: &str, name: &str, tier: usize) -> (usize, Listed) {
        let member = Member {
            uid: format!("uid-{kind}-{name}"),
            ..Member::held(api_version, kind, name, Value::Replicas(1))
        };
        let l = Listed {
            member,
            requests: Requests::default(),
            running: None,
            ready: None,
            available: None,
            floor_elsewhere: None,
            scales: None,
            tier,
        };
        (0, l)
    }

    #[test]
    fn an_hpa_is_in_the_tier_of_the_workload_it_scales_not_of_a_same_named_one() {
        // Tiers: 0 data, 1 the last. Deployment db untiered, listed first; StatefulSet db in
        // data, scaled by HPA db-hpa (whose own labels put it in the last tier).
        let mut all = vec![
            listed("apps/v1", "Deployment", "db", 1),
            listed("apps/v1", "StatefulSet", "db", 0),
            listed("autoscaling/v2", "HorizontalPodAutoscaler", "db-hpa", 1),
        ];
        all[1].1.member.autoscaled_by = Some("db-hpa".into());
        all[2].1.member.floor_of = Some(("db".into(), 5));
        floor_tiers(&mut all);
        assert_eq!(
            all[2].1.tier, 0,
            "the StatefulSet's tier, not the Deployment's"
        );
        // An HPA whose workload is not listed (or not the one it scales) keeps its own tier.
        all[1].1.member.autoscaled_by = None;
        all[2].1.tier = 1;
        floor_tiers(&mut all);
        assert_eq!(all[2].1.tier, 1);
    }
}
