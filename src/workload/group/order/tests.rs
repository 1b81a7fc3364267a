use std::collections::BTreeSet;

use chrono::TimeZone;
use proptest::prelude::*;

use super::*;
use crate::schedule::Count;
use crate::workload::group::{Record, plan};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2027, 3, 1, 7, 0, 0).unwrap()
}

fn at(secs: i64) -> DateTime<Utc> {
    t0() + Duration::seconds(secs)
}

/// A Deployment the group `g` has put to sleep, its own count `own`.
fn asleep(name: &str, own: i32) -> Member {
    Member {
        resource_version: Some("1".into()),
        record: Some(Record {
            holder: "g".into(),
            own: Value::Replicas(own),
            scheduled: Value::Replicas(0),
            previous: None,
        }),
        ..Member::held("apps/v1", "Deployment", name, Value::Replicas(0))
    }
}

/// A Deployment the group `g` has put to sleep (its own count 1), and the HPA that scales it
/// (its floor 1, its ceiling 10).
fn autoscaled(name: &str) -> (Member, Member) {
    let mut workload = asleep(name, 1);
    workload.autoscaled_by = Some(name.into());
    let hpa = Member {
        api_version: "autoscaling/v2".into(),
        kind: "HorizontalPodAutoscaler".into(),
        uid: format!("uid-hpa-{name}"),
        value: Value::Floor(1),
        record: None,
        floor_of: Some((name.into(), 10)),
        ..asleep(name, 1)
    };
    (workload, hpa)
}

/// A group: its members, their tiers and what each has ready.
struct Group {
    members: Vec<Member>,
    tier: Vec<usize>,
    ready: Vec<Option<i32>>,
    tiers: usize,
    /// The spec's generation the plan is made from.
    generation: i64,
}

impl Group {
    /// data (tier 0), api (tier 1), web (the last: in no tier), all asleep.
    fn three_tiers() -> Group {
        Group {
            members: vec![asleep("db", 1), asleep("api", 3), asleep("web", 2)],
            tier: vec![0, 1, 2],
            ready: vec![Some(0); 3],
            tiers: 3,
            generation: 1,
        }
    }

    /// db, api, web and cache, each asleep (own count 1), in `tier` of `tiers`.
    fn four_asleep(tier: Vec<usize>, tiers: usize) -> Group {
        Group {
            members: ["db", "api", "web", "cache"].map(|n| asleep(n, 1)).to_vec(),
            ready: vec![Some(0); 4],
            tier,
            tiers,
            generation: 1,
        }
    }

    fn gate(
        &self,
        level: Count,
        previous: Option<&Wait>,
        now: DateTime<Utc>,
    ) -> (Vec<Write>, Gate) {
        let writes = plan("g", level, &self.members).writes;
        let tiers = Tiers {
            count: self.tiers,
            of: &self.tier,
            ready: &self.ready,
            timeout: Duration::minutes(5),
        };
        let change = Change {
            level: level.to_string(),
            generation: self.generation,
        };
        let gate = gate(&tiers, &self.members, &writes, previous, &change, now);
        (writes, gate)
    }

    /// Sends the gate's writes (they land), and says who got one.
    fn send(&mut self, writes: &[Write], gate: &Gate) -> Vec<String> {
        gate.now
            .iter()
            .map(|k| {
                let w = &writes[*k];
                let m = &mut self.members[w.member];
                m.value = w.to;
                m.record = w.record.clone();
                m.name.clone()
            })
            .collect()
    }

    fn wait_after(gate: &Gate, now: DateTime<Utc>) -> Option<Wait> {
        gate.wait.clone().map(|mut w| {
            w.started.get_or_insert(now);
            w
        })
    }
}

#[test]
fn waking_goes_tier_by_tier_each_once_the_one_before_is_ready() {
    let mut g = Group::three_tiers();
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    assert_eq!(g.send(&writes, &gate), ["db"], "the data tier first");
    assert_eq!(gate.held.len(), 2);
    assert!(
        !gate.continuing,
        "a new wake-up: its history entry is recorded"
    );
    let wait = Group::wait_after(&gate, at(0));
    assert_eq!(
        wait.as_ref().map(|w| (w.direction, w.tier)),
        Some((OrderDirection::Waking, 0))
    );
    assert_eq!(
        gate.waiting_for.as_deref(),
        Some("Deployment db: 0 of 1 ready")
    );

    // Written, not yet ready: nothing more.
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(10));
    assert_eq!(g.send(&writes, &gate), Vec::<String>::new());
    assert_eq!(
        gate.wait.as_ref().map(|w| (w.tier, w.since)),
        Some((0, at(0)))
    );

    g.ready[0] = Some(1);
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(20));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    assert!(gate.continuing, "the same wake-up: no second history entry");
    let wait = Group::wait_after(&gate, at(20));
    assert_eq!(wait.as_ref().map(|w| (w.tier, w.since)), Some((1, at(20))));
    assert_eq!(
        gate.waiting_for.as_deref(),
        Some("Deployment api: 0 of 3 ready")
    );

    g.ready[1] = Some(2);
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(30));
    assert!(
        writes.len() == 1 && gate.now.is_empty(),
        "2 of 3 ready is not ready"
    );
    assert_eq!(
        gate.waiting_for.as_deref(),
        Some("Deployment api: 2 of 3 ready")
    );

    g.ready[1] = Some(3);
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(40));
    assert_eq!(g.send(&writes, &gate), ["web"]);
    assert!(gate.held.is_empty(), "every tier written");
    assert!(gate.continuing);
    assert!(gate.timed_out.is_empty());
    // The last tier is followed until it is there: the status names it meanwhile.
    let wait = Group::wait_after(&gate, at(40));
    assert_eq!(wait.as_ref().map(|w| w.tier), Some(2));
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(45));
    assert!(writes.is_empty() && gate.poll);
    assert_eq!(
        gate.waiting_for.as_deref(),
        Some("Deployment web: 0 of 2 ready")
    );
    g.ready[2] = Some(2);
    let (_, gate) = g.gate(Count::Own, wait.as_ref(), at(50));
    assert_eq!(gate.wait, None, "the wake-up is over");
    let (_, gate) = g.gate(Count::Own, None, at(55));
    assert_eq!(
        gate,
        Gate {
            now: vec![],
            ..Gate::default()
        },
        "and nothing starts again"
    );
}

#[test]
fn going_to_sleep_goes_last_tier_first_each_once_the_one_after_has_no_ready_replicas() {
    let mut g = Group::three_tiers();
    for (m, own) in g.members.iter_mut().zip([1, 3, 2]) {
        m.value = Value::Replicas(own);
        m.record = None;
    }
    g.ready = vec![Some(1), Some(3), Some(2)];
    let (writes, gate) = g.gate(Count::Replicas(0), None, at(0));
    assert_eq!(g.send(&writes, &gate), ["web"], "the front ends first");
    assert_eq!(
        gate.waiting_for.as_deref(),
        Some("Deployment web: 2 ready, going to 0")
    );
    let wait = Group::wait_after(&gate, at(0));
    assert_eq!(
        wait.as_ref().map(|w| (w.direction, w.tier)),
        Some((OrderDirection::Sleeping, 2))
    );

    g.ready[2] = Some(1);
    let (writes, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(5));
    assert!(g.send(&writes, &gate).is_empty(), "one web pod still ready");
    g.ready[2] = Some(0);
    let (writes, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(8));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    let wait = Group::wait_after(&gate, at(8));
    g.ready[1] = Some(0);
    let (writes, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(12));
    assert_eq!(g.send(&writes, &gate), ["db"], "the data tier last");
    let wait = Group::wait_after(&gate, at(12));
    assert_eq!(wait.as_ref().map(|w| w.tier), Some(0));
    g.ready[0] = Some(0);
    let (_, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(15));
    assert_eq!(gate.wait, None, "asleep");
}

#[test]
fn a_tier_not_ready_by_its_timeout_is_passed_over_and_said() {
    let mut g = Group::three_tiers();
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    g.send(&writes, &gate);
    let wait = Group::wait_after(&gate, at(0));
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(299));
    assert!(
        g.send(&writes, &gate).is_empty(),
        "still within the timeout"
    );
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(300));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    assert_eq!(
        gate.timed_out,
        vec![(0, "Deployment db: 0 of 1 ready".to_string())]
    );
    assert_eq!(
        gate.wait.as_ref().map(|w| (w.tier, w.since)),
        Some((1, at(300))),
        "the next tier gets a timeout of its own"
    );
}

#[test]
fn a_write_that_keeps_failing_holds_its_tier_no_longer_than_the_timeout() {
    let g = Group::three_tiers();
    let (_, gate) = g.gate(Count::Own, None, at(0));
    let wait = Group::wait_after(&gate, at(0)).map(|w| Wait { started: None, ..w });
    // db's write never lands.
    let (_, gate) = g.gate(Count::Own, wait.as_ref(), at(100));
    assert_eq!(gate.now.len(), 1, "db's write is sent again");
    let (_, gate) = g.gate(Count::Own, wait.as_ref(), at(300));
    assert_eq!(gate.now.len(), 2, "db's write and api's");
    assert!(!gate.continuing, "nothing of the wake-up has landed yet");
}

#[test]
fn a_lost_wait_starts_again_at_the_first_tier_and_passes_those_already_there() {
    let mut g = Group::three_tiers();
    g.members[0].value = Value::Replicas(1);
    g.members[0].record = None;
    g.ready[0] = Some(1);
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    assert_eq!(g.send(&writes, &gate), ["api"]);
}

#[test]
fn releases_unchanged_counts_and_groups_without_order_are_never_held_back() {
    let mut g = Group::three_tiers();
    g.tiers = 1;
    g.tier = vec![0; 3];
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    assert_eq!(gate.now.len(), writes.len());
    assert_eq!(gate.wait, None);

    let mut g = Group::three_tiers();
    g.members[2].place = Place::Excluded;
    g.members[1].value = Value::Replicas(3);
    g.members[1].record = None;
    g.members[0].value = Value::Replicas(5);
    g.ready = vec![Some(5), Some(3), Some(0)];
    // Level 3: db falls from 5 (held back while waking? no: a fall), api stays, web leaves.
    let (writes, gate) = g.gate(Count::Replicas(3), None, at(0));
    assert_eq!(gate.now.len(), writes.len(), "{writes:?}");
}

fn scenario() -> impl Strategy<Value = Vec<(usize, i32, Option<i64>)>> {
    proptest::collection::vec(
        (
            0usize..4,
            1i32..4,
            proptest::option::weighted(0.8, 0i64..400),
        ),
        1..8,
    )
}

proptest! {
    /// For any group, tiers and readiness delays (some never ready): a tier's rises are sent
    /// only once every earlier tier is ready or was passed over for its timeout, every
    /// workload is woken within the timeouts, and going to sleep mirrors it.
    #[test]
    fn ordered_changes_never_overtake_a_tier_and_always_finish(members in scenario()) {
        let tiers = 4;
        let mut g = Group {
            members: members.iter().enumerate().map(|(i, (_, own, _))| asleep(&format!("w{i}"), *own)).collect(),
            tier: members.iter().map(|(t, _, _)| *t).collect(),
            ready: vec![Some(0); members.len()],
            tiers,
            generation: 1,
        };
        let delay: Vec<Option<i64>> = members.iter().map(|(_, _, d)| *d).collect();
        for (level, dir) in [(Count::Own, OrderDirection::Waking), (Count::Replicas(0), OrderDirection::Sleeping)] {
            let mut written_at: Vec<Option<i64>> = vec![None; members.len()];
            let mut passed: BTreeSet<usize> = BTreeSet::new();
            let mut wait: Option<Wait> = None;
            let limit = 300 * (tiers as i64 + 1) + 60;
            for s in (0..limit).step_by(5) {
                // Ready (waking: all of it; sleeping: none) once its delay has passed.
                for i in 0..g.members.len() {
                    let to = g.members[i].value.replicas();
                    let done = written_at[i].zip(delay[i]).is_some_and(|(w, d)| s >= w + d);
                    g.ready[i] = Some(match (dir, done) {
                        (OrderDirection::Waking, true) => to,
                        (OrderDirection::Waking, false) => 0,
                        (OrderDirection::Sleeping, true) => 0,
                        (OrderDirection::Sleeping, false) => g.ready[i].unwrap_or(0),
                    });
                }
                let (writes, gate) = g.gate(level, wait.as_ref(), at(s));
                passed.extend(gate.timed_out.iter().map(|(t, _)| *t));
                for k in &gate.now {
                    let i = writes[*k].member;
                    let t = g.tier[i];
                    for j in 0..g.members.len() {
                        let before = match dir {
                            OrderDirection::Waking => g.tier[j] < t,
                            OrderDirection::Sleeping => g.tier[j] > t,
                        };
                        let there = match dir {
                            OrderDirection::Waking => g.ready[j] >= Some(g.members[j].own().replicas()),
                            OrderDirection::Sleeping => g.ready[j] == Some(0),
                        };
                        prop_assert!(!before || there || passed.contains(&g.tier[j]),
                            "{} (tier {t}) written at {s} before w{j} (tier {}) was there", g.members[i].name, g.tier[j]);
                    }
                    written_at[i] = Some(s);
                }
                g.send(&writes, &gate);
                wait = Group::wait_after(&gate, at(s)).map(|mut w| {
                    w.started = wait.as_ref().and_then(|p| p.started).or(Some(at(s)));
                    w
                });
            }
            for m in &g.members {
                let want = match dir { OrderDirection::Waking => m.own(), OrderDirection::Sleeping => Value::Replicas(0) };
                prop_assert_eq!(m.value, want, "{} not at its count after every timeout", m.name);
            }
        }
    }
}

// The review of the first version: each of these failed on it.

/// A level rising again mid-wake (a ramp: 2 at 08:00, 5 at 08:05) while tier 1 waits: the
/// new rise of tier 0 and of tier 1 must not go out together (tier 1 overtakes tier 0 at 5).
#[test]
fn a_new_rise_mid_wake_does_not_overtake_tier_0() {
    let mut g = Group::three_tiers();
    let (writes, gate) = g.gate(Count::Replicas(2), None, at(0));
    assert_eq!(g.send(&writes, &gate), ["db"]);
    let wait = Group::wait_after(&gate, at(0));
    g.ready[0] = Some(2);
    let (writes, gate) = g.gate(Count::Replicas(2), wait.as_ref(), at(10));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    let wait = Group::wait_after(&gate, at(10));
    // api not ready yet; the level rises to 5.
    let (writes, gate) = g.gate(Count::Replicas(5), wait.as_ref(), at(20));
    let sent = g.send(&writes, &gate);
    assert_eq!(
        sent,
        ["db"],
        "only tier 0 may rise to 5 first; sent {sent:?}"
    );
}

/// Same: a new rise is a new change (its own history entry), not `continuing`.
#[test]
fn a_new_rise_mid_wake_is_a_new_change() {
    let mut g = Group::three_tiers();
    let (writes, gate) = g.gate(Count::Replicas(2), None, at(0));
    g.send(&writes, &gate);
    let wait = Group::wait_after(&gate, at(0));
    let (_, gate) = g.gate(Count::Replicas(5), wait.as_ref(), at(20));
    assert!(!gate.continuing, "the rise 2 -> 5 gets no history entry");
}

/// A workload relabelled into a tier the change has passed is woken at once, and the tiers
/// passed are not waited on again in the same change: what a passed tier still has to write
/// (a refusal retried, a relabelled workload) never holds the walk back a second time, so a
/// tier that never gets there costs one timeout per change.
#[test]
fn a_workload_relabelled_into_a_passed_tier_is_woken_at_once() {
    let mut g = Group::four_asleep(vec![0, 1, 2, 3], 4);
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    assert_eq!(g.send(&writes, &gate), ["db"]);
    g.ready[0] = Some(1);
    let wait = Group::wait_after(&gate, at(0));
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(5));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    let wait = Group::wait_after(&gate, at(5));
    g.tier[3] = 0;
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(10));
    assert_eq!(g.send(&writes, &gate), ["cache"]);
    assert_eq!(
        gate.wait.as_ref().map(|w| w.tier),
        Some(1),
        "still waiting on api"
    );
}

/// `order` edited mid-wake: a tier inserted ahead. The stored index (1) now names the data
/// tier; the new first tier (cache) and backend go out together.
#[test]
fn a_tier_inserted_mid_wake_walks_the_tiers_again() {
    let mut g = Group::four_asleep(vec![0, 1, 2, 2], 3);
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    assert_eq!(g.send(&writes, &gate), ["db"]);
    g.ready[0] = Some(1);
    let wait = Group::wait_after(&gate, at(0));
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(5));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    let wait = Group::wait_after(&gate, at(5));
    g.ready[1] = Some(1);
    // order: [cache, data, backend]: cache 0, db 1, api 2, web 3.
    g.tiers = 4;
    g.tier = vec![1, 2, 3, 0];
    g.generation = 2;
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(6));
    let sent = g.send(&writes, &gate);
    assert_eq!(
        sent,
        ["cache"],
        "the new first tier alone, not the last with it: {sent:?}"
    );
}

/// An autoscaled workload in tier 0: waking at level 5 writes its own count (1) and its
/// HPA's floor (5). The tier is "there" at 1 ready, while its new count is 5.
#[test]
fn an_autoscaled_tier_is_there_at_its_floor_not_its_own_count() {
    let (db, hpa) = autoscaled("db");
    let mut g = Group {
        members: vec![db, hpa, asleep("api", 3)],
        tier: vec![0, 0, 1],
        ready: vec![Some(0), None, Some(0)],
        tiers: 2,
        generation: 1,
    };
    let (writes, gate) = g.gate(Count::Replicas(5), None, at(0));
    let mut sent = g.send(&writes, &gate);
    sent.sort();
    assert_eq!(sent, ["db", "db"], "db and its HPA's floor");
    let wait = Group::wait_after(&gate, at(0));
    // db runs its own count (1) at once; its HPA takes it to 5 a sync later.
    g.ready[0] = Some(1);
    let (writes, gate) = g.gate(Count::Replicas(5), wait.as_ref(), at(5));
    let sent = g.send(&writes, &gate);
    assert!(
        sent.is_empty(),
        "api woken while db is 1 of 5 ready: {sent:?}"
    );
}

/// HPA floor writes held back are taken off `atSchedule`, which never counted them.
#[test]
fn held_floor_writes_are_counted_through_their_workload() {
    use crate::workload::group::not_reached;
    let (api, hpa) = autoscaled("api");
    let members = vec![asleep("db", 1), api, hpa];
    let tier = vec![0, 1, 1];
    let ready = vec![Some(0); 3];
    let p = plan("g", Count::Replicas(5), &members);
    let tiers = Tiers {
        count: 2,
        of: &tier,
        ready: &ready,
        timeout: Duration::minutes(5),
    };
    let change = Change {
        level: "5".into(),
        generation: 1,
    };
    let gate = gate(&tiers, &members, &p.writes, None, &change, at(0));
    let mut status = p.status.clone();
    let held: Vec<_> = gate
        .held
        .iter()
        .map(|k| (p.writes[*k].member, p.writes[*k].to, "held".to_string()))
        .collect();
    not_reached(&mut status, &members, &held);
    assert_eq!(
        status.targets, "1/2",
        "db is at its count, api is not; got {}",
        status.targets
    );
}

/// Tier 0 never ready (a crash-looping db), one write of the last tier refused every time
/// (a webhook, a GitOps tool setting it back): the change never ends; every timeout the
/// wait is cleared, started again from tier 0, and a TierTimedOut Warning goes out again.
#[test]
fn a_refused_write_in_the_last_tier_is_said_once_not_every_timeout() {
    let mut g = Group::three_tiers();
    let mut wait: Option<Wait> = None;
    let mut warnings = 0;
    let mut cleared = 0;
    for s in (0..3600).step_by(5) {
        let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(s));
        warnings += gate.timed_out.len();
        // Every write lands but web's.
        for k in &gate.now {
            let w = &writes[*k];
            if g.members[w.member].name != "web" {
                let m = &mut g.members[w.member];
                m.value = w.to;
                m.record = w.record.clone();
            }
        }
        if g.members[1].value.replicas() > 0 {
            g.ready[1] = Some(3);
        }
        if wait.is_some() && gate.wait.is_none() {
            cleared += 1;
        }
        wait = gate.wait.clone().map(|mut w| {
            w.started = wait.as_ref().and_then(|p| p.started).or(Some(at(s)));
            w
        });
    }
    assert!(
        warnings <= 1 && cleared <= 1,
        "{warnings} TierTimedOut Warnings and {cleared} status.order clears in an hour"
    );
}

#[test]
fn a_sleep_that_begins_mid_wake_is_a_new_change_from_the_last_tier() {
    let mut g = Group::three_tiers();
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    g.send(&writes, &gate);
    g.ready[0] = Some(1);
    let wait = Group::wait_after(&gate, at(0));
    let (writes, gate) = g.gate(Count::Own, wait.as_ref(), at(5));
    assert_eq!(g.send(&writes, &gate), ["api"]);
    let wait = Group::wait_after(&gate, at(5));
    g.ready[1] = Some(2); // api starting
    let (writes, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(10));
    assert_eq!(
        g.send(&writes, &gate),
        ["api"],
        "web is asleep: api goes first"
    );
    assert!(!gate.continuing);
    let wait = Group::wait_after(&gate, at(10));
    let (writes, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(15));
    assert!(
        g.send(&writes, &gate).is_empty(),
        "db waits for api's 2 ready"
    );
    g.ready[1] = Some(0);
    let (writes, gate) = g.gate(Count::Replicas(0), wait.as_ref(), at(20));
    assert_eq!(g.send(&writes, &gate), ["db"]);
}

#[test]
fn a_level_own_that_raises_some_and_lowers_others_is_not_stuck() {
    // level 2 -> own: db own 1 (falls), api own 3 (rises), web own 2 (stays)
    let mut g = Group::three_tiers();
    for m in g.members.iter_mut() {
        m.value = Value::Replicas(2);
        if let Some(r) = m.record.as_mut() {
            r.scheduled = Value::Replicas(2);
        }
    }
    g.ready = vec![Some(2); 3];
    let (writes, gate) = g.gate(Count::Own, None, at(0));
    let sent = g.send(&writes, &gate);
    assert!(
        sent.contains(&"db".to_string()) && sent.contains(&"api".to_string()),
        "{sent:?}"
    );
}

/// Found in review: a workload KEDA scales sleeps through its ScaledObject, its record a round
/// before the pause. Its tier (the last: it sleeps first) holds the tier before it back until
/// the pause is written and KEDA has it at 0, whatever the ScaledObject's floor (0 included).
#[test]
fn a_tier_keda_scales_sleeps_before_the_tier_before_it() {
    for min in [2, 0] {
        let mut db = asleep("db", 2);
        (db.value, db.record) = (Value::Replicas(2), None);
        let mut web = asleep("web", 3);
        (web.value, web.record) = (Value::Replicas(3), None);
        (web.autoscaled_by, web.keda) = (Some("web".into()), true);
        let so = Member {
            api_version: "keda.sh/v1alpha1".into(),
            kind: "ScaledObject".into(),
            uid: "uid-so".into(),
            value: Value::Keda {
                floor: min,
                paused: false,
            },
            record: None,
            floor_of: Some(("web".into(), 10)),
            ..asleep("web", 1)
        };
        let mut members = vec![db, web, so];
        let tier = vec![0, 1, 1];
        let mut ready = vec![Some(2), Some(3), None];
        let mut sent_db_at = None;
        for round in 0..4 {
            let p = plan("g", Count::Replicas(0), &members);
            let tiers = Tiers {
                count: 2,
                of: &tier,
                ready: &ready,
                timeout: Duration::minutes(5),
            };
            let change = Change {
                level: "0".into(),
                generation: 1,
            };
            let g = gate(&tiers, &members, &p.writes, None, &change, at(round));
            for k in &g.now {
                let w = &p.writes[*k];
                if w.member == 0 {
                    sent_db_at.get_or_insert(round);
                }
                members[w.member].value = w.to;
                members[w.member].record = w.record.clone();
            }
            // KEDA takes the workload to 0 once the pause is on.
            if matches!(members[2].value, Value::Keda { paused: true, .. }) {
                members[1].value = Value::Replicas(0);
                ready[1] = Some(0);
            }
        }
        // Round 0: web's record; round 1: its pause (KEDA scales it to 0); round 2: db.
        assert_eq!(sent_db_at, Some(2), "min {min}");
    }
}
