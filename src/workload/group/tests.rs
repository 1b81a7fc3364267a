use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use proptest::prelude::*;

use super::*;

fn deployment(name: &str, replicas: i32) -> Member {
    Member {
        resource_version: Some("7".into()),
        ..Member::held("apps/v1", "Deployment", name, Value::Replicas(replicas))
    }
}

fn cronjob(name: &str, suspended: bool) -> Member {
    Member {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        value: Value::Suspended(suspended),
        ..deployment(name, 0)
    }
}

/// The workload after a write: its value, and the record as the write left it.
fn applied(m: &Member, w: &Write) -> Member {
    Member {
        value: w.to,
        record: w.record.clone(),
        ..m.clone()
    }
}

fn apply_all(members: &mut [Member], plan: &Plan) {
    for w in &plan.writes {
        members[w.member] = applied(&members[w.member], w);
    }
}

#[test]
fn a_boundary_records_the_own_count_in_the_same_write_and_the_end_gives_it_back() {
    let mut ms = vec![
        deployment("api", 3),
        deployment("web", 5),
        cronjob("report", false),
    ];
    let night = plan("sleep", Count::Replicas(0), &ms);
    assert_eq!(night.writes.len(), 3);
    for w in &night.writes {
        let r = w.record.as_ref().expect("recorded with the change");
        assert_eq!(
            (r.own, r.scheduled, r.holder.as_str()),
            (w.from, w.to, "sleep")
        );
    }
    assert_eq!(night.writes[2].to, Value::Suspended(true));
    assert_eq!(night.status.targets, "3/3");
    apply_all(&mut ms, &night);
    assert!(
        plan("sleep", Count::Replicas(0), &ms).writes.is_empty(),
        "idempotent"
    );

    let day = plan("sleep", Count::Own, &ms);
    let back: Vec<_> = day
        .writes
        .iter()
        .map(|w| (w.to, w.record.clone()))
        .collect();
    assert_eq!(
        back,
        [
            (Value::Replicas(3), None),
            (Value::Replicas(5), None),
            (Value::Suspended(false), None)
        ]
    );
    apply_all(&mut ms, &day);
    assert!(plan("sleep", Count::Own, &ms).writes.is_empty());
}

#[test]
fn a_rise_written_ahead_wakes_the_workloads_but_leaves_a_cronjob_to_its_transition() {
    let mut ms = vec![deployment("api", 3), cronjob("report", false)];
    let night = plan("sleep", Count::Replicas(0), &ms);
    apply_all(&mut ms, &night);
    // warmUp: the wake-up to `own` is written ahead while the schedule still says 0.
    let ahead = plan_within("sleep", Count::Own, Count::Replicas(0), &ms, usize::MAX);
    let writes: Vec<_> = ahead.writes.iter().map(|w| (w.member, w.to)).collect();
    assert_eq!(
        writes,
        [(0, Value::Replicas(3))],
        "only api, not the CronJob"
    );
    assert_eq!(ahead.status.targets, "2/2");
    apply_all(&mut ms, &ahead);
    // At the transition the CronJob gets its own suspend back, with its record gone.
    let at = plan_within("sleep", Count::Own, Count::Own, &ms, usize::MAX);
    let writes: Vec<_> = at
        .writes
        .iter()
        .map(|w| (w.member, w.to, w.why.clone()))
        .collect();
    assert_eq!(writes, [(1, Value::Suspended(false), Why::Own)]);
    assert!(at.writes[0].record.is_none());
    // A numeric rise written ahead (0, then 2): the same.
    let mut ms = vec![deployment("api", 3), cronjob("report", false)];
    let night = plan("sleep", Count::Replicas(0), &ms);
    apply_all(&mut ms, &night);
    let ahead = plan_within(
        "sleep",
        Count::Replicas(2),
        Count::Replicas(0),
        &ms,
        usize::MAX,
    );
    let writes: Vec<_> = ahead.writes.iter().map(|w| (w.member, w.to)).collect();
    assert_eq!(writes, [(0, Value::Replicas(2))]);
}

#[test]
fn a_count_set_by_someone_else_while_held_becomes_the_own_count() {
    let mut ms = vec![deployment("api", 3)];
    let night = plan("sleep", Count::Replicas(0), &ms);
    apply_all(&mut ms, &night);
    // A Helm upgrade sets 7 during the night.
    ms[0].value = Value::Replicas(7);
    let again = plan("sleep", Count::Replicas(0), &ms);
    assert_eq!(again.writes.len(), 1);
    let w = &again.writes[0];
    assert_eq!(
        w.why,
        Why::ChangedElsewhere {
            to: Value::Replicas(7)
        }
    );
    assert_eq!(w.to, Value::Replicas(0));
    assert_eq!(w.record.as_ref().map(|r| r.own), Some(Value::Replicas(7)));
    apply_all(&mut ms, &again);
    let day = plan("sleep", Count::Own, &ms);
    assert_eq!(day.writes[0].to, Value::Replicas(7), "wakes at 7");
}

#[test]
fn excluded_and_elsewhere_held_workloads_are_never_written() {
    let mut ex = deployment("db", 1);
    ex.place = Place::Excluded;
    let mut other = deployment("shared", 2);
    other.place = Place::HeldElsewhere("older".into());
    // Even carrying this TDSet's record, a workload another TDSet holds is the holder's.
    other.record = Some(Record {
        holder: "sleep".into(),
        own: Value::Replicas(4),
        scheduled: Value::Replicas(2),
        previous: None,
    });
    let p = plan("sleep", Count::Replicas(0), &[ex, other]);
    assert!(p.writes.is_empty(), "{:?}", p.writes);
    assert_eq!(
        (
            p.status.matched,
            p.status.excluded,
            p.status.conflicting,
            p.status.targets.as_str()
        ),
        (2, 1, 1, "0/0")
    );
}

#[test]
fn a_workload_that_leaves_gets_its_own_count_back_once_and_anothers_record_is_left_alone() {
    let mut gone = deployment("api", 0);
    gone.place = Place::Outside;
    gone.record = Some(Record {
        holder: "sleep".into(),
        own: Value::Replicas(3),
        scheduled: Value::Replicas(0),
        previous: None,
    });
    let mut foreign = gone.clone();
    foreign.name = "web".into();
    foreign.record.as_mut().unwrap().holder = "other".into();
    let p = plan("sleep", Count::Replicas(0), &[gone, foreign]);
    assert_eq!(p.writes.len(), 1);
    assert_eq!(
        (p.writes[0].member, p.writes[0].to, &p.writes[0].record),
        (0, Value::Replicas(3), &None)
    );
    assert_eq!(p.writes[0].why, Why::Left(LeaveReason::NoLongerSelected));
    assert_eq!(p.status.matched, 0);
}

#[test]
fn taking_over_from_another_tdsets_record_keeps_its_own_count() {
    let mut m = deployment("api", 0);
    m.record = Some(Record {
        holder: "deleted-tdset".into(),
        own: Value::Replicas(6),
        scheduled: Value::Replicas(0),
        previous: None,
    });
    let p = plan("sleep", Count::Replicas(1), &[m]);
    assert_eq!(
        p.writes[0].record,
        Some(Record {
            holder: "sleep".into(),
            own: Value::Replicas(6),
            scheduled: Value::Replicas(1),
            previous: None,
        })
    );
}

#[test]
fn a_scale_target_ref_taking_over_reads_the_own_count_not_the_sleeping_one() {
    let asleep: BTreeMap<String, String> = [
        (HELD_BY, "sleep"),
        (OWN_REPLICAS, "6"),
        (SCHEDULED_REPLICAS, "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(own_replicas(&asleep, 0), 6);
    // Set since by someone else: that is its own count now, as for a group.
    assert_eq!(own_replicas(&asleep, 4), 4);
    // No record, or one that cannot be read: the count it runs.
    assert_eq!(own_replicas(&BTreeMap::new(), 2), 2);
    let mut unreadable = asleep.clone();
    unreadable.insert(OWN_REPLICAS.into(), "many".into());
    assert_eq!(own_replicas(&unreadable, 0), 0);
}

#[test]
fn a_workload_another_tdset_holds_now_only_loses_the_record_when_let_go_of() {
    let night = plan("sleep", Count::Replicas(0), &[deployment("api", 3)]);
    let asleep = applied(&deployment("api", 3), &night.writes[0]);
    // Another TDSet holds it now, at the value the record says was set: given its own 3 back,
    // it would be written over its holder.
    for place in [Place::Outside, Place::Excluded] {
        let m = Member {
            place,
            handed_to: Some("single".into()),
            ..asleep.clone()
        };
        let p = plan("sleep", Count::Replicas(0), std::slice::from_ref(&m));
        let w = &p.writes[0];
        assert_eq!((w.to, w.record.as_ref()), (Value::Replicas(0), None));
    }
    // Nobody else holds it: its own count back.
    let m = Member {
        place: Place::Outside,
        ..asleep
    };
    let p = plan("sleep", Count::Replicas(0), std::slice::from_ref(&m));
    assert_eq!(p.writes[0].to, Value::Replicas(3));
}

#[test]
fn an_hpa_a_group_holds_has_the_floor_its_record_says_as_its_own() {
    let held: BTreeMap<String, String> = [
        (HELD_BY, "busy"),
        (OWN_MIN_REPLICAS, "2"),
        (SCHEDULED_MIN_REPLICAS, "4"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(own_floor(&held, 4), 2);
    // Set since by someone else; no record: the floor it has.
    assert_eq!(own_floor(&held, 5), 5);
    assert_eq!(own_floor(&BTreeMap::new(), 4), 4);
    // A replicas record is not a floor record.
    let replicas: BTreeMap<String, String> = [
        (HELD_BY, "busy"),
        (OWN_REPLICAS, "2"),
        (SCHEDULED_REPLICAS, "4"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(own_floor(&replicas, 4), 4);
}

#[test]
fn a_cronjob_sleeps_at_zero_and_runs_as_its_own_at_any_other_count() {
    let suspended_by_user = cronjob("nightly", true);
    assert!(
        plan(
            "g",
            Count::Replicas(0),
            std::slice::from_ref(&suspended_by_user)
        )
        .writes
        .is_empty()
    );
    assert!(
        plan("g", Count::Replicas(4), &[suspended_by_user])
            .writes
            .is_empty()
    );
    let p = plan("g", Count::Replicas(0), &[cronjob("nightly", false)]);
    assert_eq!(p.writes[0].to, Value::Suspended(true));
}

#[test]
fn the_apply_body_carries_the_value_the_record_and_the_preconditions() {
    let m = deployment("api", 3);
    let p = plan("sleep", Count::Replicas(0), std::slice::from_ref(&m));
    assert_eq!(
        p.writes[0].body(&m, "uid-sleep"),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "uid": "uid-api", "resourceVersion": "7", "annotations": {
                "schedule.rs/held-by": "sleep",
                "schedule.rs/own-replicas": "3",
                "schedule.rs/scheduled-replicas": "0",
            }, "labels": {"schedule.rs/held-by-uid": "uid-sleep"}},
            "spec": {"replicas": 0},
        })
    );
    let annotations: BTreeMap<String, String> =
        p.writes[0].body(&m, "u")["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
    assert_eq!(
        Record::read(&annotations, Value::Replicas(0)),
        p.writes[0].record,
        "what is written reads back"
    );
    let c = cronjob("report", false);
    let p = plan("sleep", Count::Replicas(0), std::slice::from_ref(&c));
    let body = p.writes[0].body(&c, "u");
    let released = plan("sleep", Count::Own, &[applied(&c, &p.writes[0])]);
    let back = released.writes[0].body(&c, "u");
    assert!(
        back["metadata"].get("labels").is_none() && back["metadata"].get("annotations").is_none()
    );
    assert_eq!(body["spec"], json!({"suspend": true}));
    assert_eq!(
        body["metadata"]["annotations"]["schedule.rs/own-suspend"],
        "false"
    );
}

#[test]
fn a_record_that_cannot_be_read_is_no_record() {
    let mut a = BTreeMap::new();
    a.insert(HELD_BY.to_string(), "x".to_string());
    a.insert(OWN_REPLICAS.to_string(), "three".to_string());
    a.insert(SCHEDULED_REPLICAS.to_string(), "0".to_string());
    assert_eq!(Record::read(&a, Value::Replicas(0)), None);
    a.insert(OWN_REPLICAS.to_string(), "-1".to_string());
    assert_eq!(Record::read(&a, Value::Replicas(0)), None);
    a.insert(OWN_REPLICAS.to_string(), "3".to_string());
    assert!(Record::read(&a, Value::Replicas(0)).is_some());
    assert_eq!(
        Record::read(&a, Value::Suspended(false)),
        None,
        "other shape"
    );
}

#[test]
fn selectors_match_as_the_api_server_does_and_bad_ones_name_the_field() {
    let sel = |labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        match_expressions: Some(exprs),
    };
    let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    };
    let labels = |l: &[(&str, &str)]| -> BTreeMap<String, String> {
        l.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let all = Selector::compile(&LabelSelector::default()).unwrap();
    assert!(all.matches(&labels(&[])), "{{}} selects everything");
    let s = Selector::compile(&sel(
        &[("env", "dev")],
        vec![
            req("tier", "In", &["web", "api"]),
            req("pin", "DoesNotExist", &[]),
            req("team", "NotIn", &["ops"]),
        ],
    ))
    .unwrap();
    assert!(s.matches(&labels(&[("env", "dev"), ("tier", "web")])));
    assert_eq!(
        s.to_query(),
        "env=dev,tier in (web,api),!pin,team notin (ops)"
    );
    assert_eq!(all.to_query(), "");
    assert!(!s.matches(&labels(&[("env", "dev"), ("tier", "db")])));
    assert!(!s.matches(&labels(&[("env", "dev"), ("tier", "web"), ("pin", "")])));
    assert!(!s.matches(&labels(&[("env", "dev"), ("tier", "web"), ("team", "ops")])));
    assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "web")])));
    let bad = Selector::compile(&sel(&[], vec![req("a", "Has", &[])])).unwrap_err();
    assert!(bad.contains("matchExpressions[0].operator"), "{bad}");
    let bad = Selector::compile(&sel(&[], vec![req("a", "In", &[])])).unwrap_err();
    assert!(bad.contains("values must not be empty"), "{bad}");
    let bad = Selector::compile(&sel(&[], vec![req("a", "Exists", &["x"])])).unwrap_err();
    assert!(bad.contains("values must be empty"), "{bad}");
}

/// What can happen to one workload between two reconciles.
#[derive(Clone, Debug)]
enum Step {
    /// The schedule's level is now this.
    Level(Count),
    /// Someone else sets its value.
    SetBySomeoneElse(i32),
    /// It leaves the group, or comes back.
    Selected(bool),
    /// The reconcile's write is lost (a crash before it, or a 409 from a stale read).
    LoseNextWrite,
    /// Of a two-request write (a custom kind), only the first lands: the record, not the
    /// value (a crash in between). A one-request write is lost whole.
    HalveNextWrite,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop_oneof![Just(Count::Own), (0..5i32).prop_map(Count::Replicas)].prop_map(Step::Level),
        (0..10i32).prop_map(Step::SetBySomeoneElse),
        any::<bool>().prop_map(Step::Selected),
        Just(Step::LoseNextWrite),
        Just(Step::HalveNextWrite),
    ]
}

proptest! {
    /// Whatever happens in between, once it is released (level own, or out of the group) and
    /// reconciled, a workload runs the last count anyone but the TDSet gave it, and carries
    /// no record; and the TDSet never writes a value other than the level's or the own count.
    #[test]
    fn the_own_count_is_never_lost(
        initial in 0..10i32,
        two_step in any::<bool>(),
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let mut m = Member { two_step, ..deployment("w", initial) };
        let mut own = initial;
        let mut level = Count::Own;
        let mut lose = None;
        let reconcile = |m: &mut Member, level: Count, lose: &mut Option<Step>| {
            let p = plan("me", level, std::slice::from_ref(m));
            prop_assert!(p.writes.len() <= 1);
            if let Some(w) = p.writes.first() {
                prop_assert!(w.to == Value::at(level, w.record.as_ref().map_or(w.to, |r| r.own)) || w.record.is_none());
                match lose.take() {
                    None => *m = applied(m, w),
                    // Held: the record first, then the value; released: the value first.
                    Some(Step::HalveNextWrite) if m.two_step => {
                        if w.record.is_some() {
                            m.record = w.record.clone();
                        } else {
                            m.value = w.to;
                        }
                    }
                    Some(_) => {}
                }
            }
            Ok(())
        };
        for s in steps {
            match s {
                Step::Level(l) => level = l,
                Step::SetBySomeoneElse(n) => {
                    // A value equal to the one the TDSet recorded setting cannot be told from
                    // its own write: the recorded own count stands (the contract's reading).
                    own = match &m.record {
                        Some(r) if r.set(Value::Replicas(n)) => r.own.replicas(),
                        _ => n,
                    };
                    m.value = Value::Replicas(n);
                }
                Step::Selected(on) => m.place = if on { Place::Held } else { Place::Outside },
                Step::LoseNextWrite | Step::HalveNextWrite => lose = Some(s.clone()),
            }
            reconcile(&mut m, level, &mut lose)?;
        }
        // Released, and reconciled until a write lands.
        m.place = Place::Outside;
        lose = None;
        reconcile(&mut m, level, &mut lose)?;
        prop_assert_eq!(m.value, Value::Replicas(own));
        prop_assert_eq!(&m.record, &None);
        prop_assert!(plan("me", level, std::slice::from_ref(&m)).writes.is_empty());
    }
}

fn hpa_of(workload: &str, min: i32, max: i32) -> Member {
    Member {
        api_version: "autoscaling/v2".into(),
        kind: "HorizontalPodAutoscaler".into(),
        value: Value::Floor(min),
        floor_of: Some((workload.into(), max)),
        ..deployment(&format!("{workload}-hpa"), 0)
    }
}

#[test]
fn an_autoscaled_workload_sleeps_at_zero_and_any_other_count_is_its_hpas_floor() {
    let mut api = deployment("api", 4);
    api.autoscaled_by = Some("api-hpa".into());
    let mut ms = vec![api, hpa_of("api", 2, 10)];
    // 0: the workload sleeps (the HPA idles), the floor stays its own.
    let night = plan("g", Count::Replicas(0), &ms);
    let to: Vec<_> = night.writes.iter().map(|w| (w.member, w.to)).collect();
    assert_eq!(to, [(0, Value::Replicas(0))]);
    assert_eq!(
        night.status.targets, "1/1",
        "the HPA is not a workload of its own"
    );
    apply_all(&mut ms, &night);
    // 6: the workload back to its own count for its HPA, the HPA's floor 6, recorded.
    let day = plan("g", Count::Replicas(6), &ms);
    let to: Vec<_> = day
        .writes
        .iter()
        .map(|w| (w.member, w.to, w.record.is_some()))
        .collect();
    assert_eq!(
        to,
        [(0, Value::Replicas(4), false), (1, Value::Floor(6), true)]
    );
    assert_eq!(
        day.writes[1].record.as_ref().map(|r| r.own),
        Some(Value::Floor(2))
    );
    apply_all(&mut ms, &day);
    // Above the HPA's maxReplicas: clamped, as in the HPA form.
    let peak = plan("g", Count::Replicas(50), &ms);
    assert_eq!(peak.writes[0].to, Value::Floor(10));
    // own: the floor given back, the record removed.
    let back = plan("g", Count::Own, &ms);
    assert_eq!(
        (back.writes[0].to, &back.writes[0].record),
        (Value::Floor(2), &None)
    );
    // Without its HPA among the members, a count is left to the HPA and said so.
    let alone = plan("g", Count::Replicas(6), &ms[..1]);
    assert!(alone.writes.is_empty());
    assert!(alone.status.not_at_schedule[0].message.contains("api-hpa"));
}

fn scaled_object_of(workload: &str, min: i32, max: i32) -> Member {
    Member {
        api_version: "keda.sh/v1alpha1".into(),
        kind: "ScaledObject".into(),
        value: Value::Keda {
            floor: min,
            paused: false,
        },
        floor_of: Some((workload.into(), max)),
        ..deployment(workload, 0)
    }
}

#[test]
fn a_workload_keda_scales_is_never_written_it_sleeps_through_its_scaled_objects_pause() {
    let mut api = deployment("api", 4);
    (api.autoscaled_by, api.keda) = (Some("api".into()), true);
    let mut ms = vec![api, scaled_object_of("api", 1, 10)];
    // 0: first the record on the workload (its count before, to wake it to should the
    // ScaledObject go), never its count: KEDA scales a workload up from any 0 written to it.
    let record = plan("g", Count::Replicas(0), &ms);
    let to: Vec<_> = (record.writes.iter())
        .map(|w| {
            (
                w.member,
                w.to,
                w.record.clone().map(|r| (r.own, r.scheduled)),
            )
        })
        .collect();
    let (four, zero) = (Value::Replicas(4), Value::Replicas(0));
    assert_eq!(to, [(0, four, Some((four, zero)))]);
    assert_eq!(record.status.targets, "1/1");
    apply_all(&mut ms, &record);
    // Then the pause on the ScaledObject, its floor left its own.
    let night = plan("g", Count::Replicas(0), &ms);
    let to: Vec<_> = night.writes.iter().map(|w| (w.member, w.to)).collect();
    let paused = Value::Keda {
        floor: 1,
        paused: true,
    };
    assert_eq!(to, [(1, paused)]);
    let body = night.writes[0].body(&ms[1], "uid-g");
    assert_eq!(
        body["metadata"]["annotations"],
        json!({
            HELD_BY: "g",
            OWN_MIN_REPLICAS: "1",
            SCHEDULED_MIN_REPLICAS: "1,paused",
            "autoscaling.keda.sh/paused-replicas": "0",
            "autoscaling.keda.sh/paused": "true",
        })
    );
    assert_eq!(body["spec"], json!({"minReplicaCount": 1}));
    apply_all(&mut ms, &night);
    ms[0].value = Value::Replicas(0);
    assert!(
        plan("g", Count::Replicas(0), &ms).writes.is_empty(),
        "idempotent"
    );
    // 6: the pause taken off (an apply that leaves it out), the floor 6, the own one recorded.
    let day = plan("g", Count::Replicas(6), &ms);
    let to: Vec<_> = (day.writes.iter())
        .map(|w| (w.member, w.to, w.record.as_ref().map(|r| r.own)))
        .collect();
    let floor = |floor| Value::Keda {
        floor,
        paused: false,
    };
    assert_eq!(to, [(1, floor(6), Some(floor(1)))]);
    let body = day.writes[0].body(&ms[1], "uid-g");
    assert_eq!(body["metadata"]["annotations"].get(keda::PAUSED), None);
    apply_all(&mut ms, &day);
    // The workload's record stays until KEDA runs it again (off 0), then goes; its count is
    // KEDA's.
    assert!(plan("g", Count::Replicas(6), &ms).writes.is_empty());
    ms[0].value = Value::Replicas(6);
    let resumed = plan("g", Count::Replicas(6), &ms);
    let to: Vec<_> = (resumed.writes.iter())
        .map(|w| (w.member, w.to, w.record.is_some()))
        .collect();
    assert_eq!(to, [(0, Value::Replicas(6), false)]);
    apply_all(&mut ms, &resumed);
    // Above maxReplicaCount: clamped.
    assert_eq!(plan("g", Count::Replicas(50), &ms).writes[0].to, floor(10));
    // own: the own floor given back, the record (and the pause) gone.
    let back = plan("g", Count::Own, &ms);
    assert_eq!(
        (
            back.writes[0].member,
            back.writes[0].to,
            &back.writes[0].record
        ),
        (1, floor(1), &None)
    );
    assert_eq!(
        back.writes[0].body(&ms[1], "uid-g")["metadata"].get("annotations"),
        None
    );
    // The ScaledObject not held (not found, held elsewhere): the workload is said not at its
    // count, and nothing is written to it.
    let alone = plan("g", Count::Replicas(0), &ms[..1]);
    assert!(alone.writes.is_empty());
    assert_eq!(alone.status.targets, "0/1");
}

#[test]
fn a_workload_asleep_through_a_scaled_object_that_goes_is_woken_by_the_group_to_its_count_before() {
    let mut api = deployment("api", 4);
    (api.autoscaled_by, api.keda) = (Some("api".into()), true);
    let mut ms = vec![api, scaled_object_of("api", 1, 10)];
    for _ in 0..2 {
        let night = plan("g", Count::Replicas(0), &ms);
        apply_all(&mut ms, &night);
    }
    assert!(matches!(ms[1].value, Value::Keda { paused: true, .. }));
    // KEDA takes it to 0; then the ScaledObject is deleted (KEDA leaves the workload at 0).
    ms[0].value = Value::Replicas(0);
    let mut gone = vec![Member {
        autoscaled_by: None,
        keda: false,
        ..ms[0].clone()
    }];
    assert!(
        plan("g", Count::Replicas(0), &gone).writes.is_empty(),
        "asleep by the group now, as recorded"
    );
    let day = plan("g", Count::Own, &gone);
    assert_eq!(
        (day.writes[0].to, &day.writes[0].record),
        (Value::Replicas(4), &None)
    );
    apply_all(&mut gone, &day);
    // Found at 0 already (KEDA's idle, a scale-to-zero trigger): the own floor, at least 1.
    let mut idle = deployment("api", 0);
    (idle.autoscaled_by, idle.keda) = (Some("api".into()), true);
    let so = scaled_object_of("api", 0, 10);
    let night = plan("g", Count::Replicas(0), &[idle, so]);
    assert_eq!(
        night.writes[0].record.as_ref().map(|r| r.own),
        Some(Value::Replicas(1))
    );
}

#[test]
fn a_scaled_objects_record_reads_back_what_it_wrote() {
    for v in [
        Value::Keda {
            floor: 0,
            paused: true,
        },
        Value::Keda {
            floor: 3,
            paused: false,
        },
    ] {
        let r = Record {
            holder: "g".into(),
            own: Value::Keda {
                floor: 0,
                paused: false,
            },
            scheduled: v,
            previous: None,
        };
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(r.annotations()).unwrap();
        assert_eq!(Record::read(&annotations, v), Some(r));
    }
    // Not a floor KEDA takes (negative), or not ours: no record.
    let a = BTreeMap::from([
        (HELD_BY.to_string(), "g".to_string()),
        (OWN_MIN_REPLICAS.to_string(), "-1".to_string()),
        (SCHEDULED_MIN_REPLICAS.to_string(), "2,paused".to_string()),
    ]);
    assert_eq!(
        Record::read(
            &a,
            Value::Keda {
                floor: 2,
                paused: true
            }
        ),
        None
    );
}

#[test]
fn a_custom_kind_crashed_between_its_record_and_its_scale_keeps_its_own_count() {
    // A custom kind: the record is one request, the count (through /scale) the next.
    let mut m = Member {
        two_step: true,
        ..deployment("w", 3)
    };
    let night = plan("sleep", Count::Replicas(0), std::slice::from_ref(&m));
    m = applied(&m, &night.writes[0]);
    // Morning, level 2: the record (scheduled 2) lands; the operator dies before the /scale.
    let morning = plan("sleep", Count::Replicas(2), std::slice::from_ref(&m));
    let record = morning.writes[0].record.clone().expect("holding");
    assert_eq!(
        (record.own, record.scheduled, record.previous),
        (
            Value::Replicas(3),
            Value::Replicas(2),
            Some(Value::Replicas(0))
        )
    );
    m.record = Some(record);
    // The 0 it still runs is the TDSet's, not someone else's: 3 stays its own count.
    assert_eq!(m.own(), Value::Replicas(3));
    let again = plan("sleep", Count::Replicas(2), std::slice::from_ref(&m));
    assert_eq!(
        (again.writes[0].to, &again.writes[0].why),
        (Value::Replicas(2), &Why::Schedule)
    );
    m = applied(&m, &again.writes[0]);
    // There: the announcement goes (a 0 set later by someone else is theirs), then nothing.
    let settled = plan("sleep", Count::Replicas(2), std::slice::from_ref(&m));
    let record = settled.writes[0].record.clone().expect("still held");
    assert_eq!(
        (settled.writes[0].to, record.previous),
        (Value::Replicas(2), None)
    );
    m = applied(&m, &settled.writes[0]);
    assert!(
        plan("sleep", Count::Replicas(2), std::slice::from_ref(&m))
            .writes
            .is_empty()
    );
    m.value = Value::Replicas(0);
    assert_eq!(m.own(), Value::Replicas(0));
}

/// Issue 48: with room for 3, a group holding a, b, c does not take a fourth workload that
/// sorts first (it would hold 4 and read 3: the one not read never gets its own count back).
#[test]
fn a_group_takes_no_workload_past_what_one_reconcile_reads() {
    let mut ms = vec![deployment("a", 2), deployment("b", 2), deployment("c", 2)];
    let night = plan_within("sleep", Count::Replicas(0), Count::Replicas(0), &ms, 3);
    assert_eq!(night.writes.len(), 3);
    apply_all(&mut ms, &night);
    ms.insert(0, deployment("0", 4));
    let again = plan_within("sleep", Count::Replicas(0), Count::Replicas(0), &ms, 3);
    assert!(again.writes.is_empty(), "{:?}", again.writes);
    let left = &again.status.not_at_schedule;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].name, "0");
    assert!(
        left[0].message.contains("--group-max-workloads 3"),
        "{left:?}"
    );
    assert_eq!(again.status.targets, "3/4");
    // One let go (its own count again, in the same round): there is room for the new one.
    ms[3].place = Place::Excluded;
    let day = plan_within("sleep", Count::Replicas(0), Count::Replicas(0), &ms, 3);
    assert_eq!(
        day.writes.iter().map(|w| w.member).collect::<Vec<_>>(),
        [0, 3],
        "the new one taken, the excluded one released"
    );
    apply_all(&mut ms, &day);
    assert!(
        plan_within("sleep", Count::Replicas(0), Count::Replicas(0), &ms, 3)
            .writes
            .is_empty()
    );
    ms[0] = deployment("0", 4);
    ms[3].place = Place::Held;
    ms[3].record = None;
    // What a younger group yields to it (that group's record on it) is taken over past the
    // room, up to what one reconcile reads of what it holds (`held_reads`: 6 here).
    let mut yielded = deployment("z", 1);
    yielded.record = Some(Record {
        holder: "younger".into(),
        own: Value::Replicas(5),
        scheduled: Value::Replicas(1),
        previous: None,
    });
    let mut with_z = ms.clone();
    with_z.push(yielded);
    let over = plan_within("sleep", Count::Replicas(0), Count::Replicas(0), &with_z, 3);
    let z = over.writes.iter().find(|w| w.member == with_z.len() - 1);
    let z = z.expect("z taken over past the room");
    assert_eq!(z.record.as_ref().map(|r| r.own), Some(Value::Replicas(5)));
    let full = plan_within("sleep", Count::Replicas(0), Count::Replicas(0), &with_z, 1);
    assert!(
        full.writes.iter().all(|w| w.member != with_z.len() - 1),
        "room 1 reads 2 held, and it holds 2 already: {:?}",
        full.writes
    );
    // Without a cap, nothing changes: every held workload is taken.
    let mut fresh = vec![deployment("0", 4), deployment("a", 2)];
    fresh.extend((0..5).map(|i| deployment(&format!("w{i}"), 1)));
    assert_eq!(
        plan("sleep", Count::Replicas(0), &fresh).writes.len(),
        fresh.len()
    );
}

/// Found in review: a floor changed at night under the operator's pause (a Helm upgrade sets
/// minReplicaCount 3) is the ScaledObject's own floor now; the pause stays the operator's, is
/// never taken for the own value, and the morning takes it off.
#[test]
fn a_floor_changed_under_the_operators_pause_is_the_own_floor_and_the_pause_stays_ours() {
    let mut api = deployment("api", 0);
    (api.autoscaled_by, api.keda) = (Some("api".into()), true);
    api.record = Some(Record {
        holder: "g".into(),
        own: Value::Replicas(4),
        scheduled: Value::Replicas(0),
        previous: None,
    });
    let mut so = scaled_object_of("api", 3, 10);
    let keda = |floor, paused| Value::Keda { floor, paused };
    so.value = keda(3, true);
    so.record = Some(Record {
        holder: "g".into(),
        own: keda(2, false),
        scheduled: keda(2, true),
        previous: None,
    });
    assert_eq!(so.own(), keda(3, false), "never paused");
    let mut ms = vec![api, so];
    let night = plan("g", Count::Replicas(0), &ms);
    assert_eq!(night.writes.len(), 1);
    let r = night.writes[0].record.as_ref().unwrap();
    assert_eq!((r.own, r.scheduled), (keda(3, false), keda(3, true)));
    apply_all(&mut ms, &night);
    let back = plan("g", Count::Own, &ms);
    let so_back = back.writes.iter().find(|w| w.member == 1).unwrap();
    assert_eq!((so_back.to, &so_back.record), (keda(3, false), &None));
    let body = so_back.body(&ms[1], "uid-g");
    assert_eq!(body["metadata"].get("annotations"), None, "{body}");
    // Given back while someone else's pause is on it (its night spelling by day): the own
    // floor recorded, not the scheduled one.
    let mut by_day = ms[1].clone();
    by_day.value = keda(5, true);
    by_day.record = Some(Record {
        holder: "g".into(),
        own: keda(2, false),
        scheduled: keda(5, false),
        previous: None,
    });
    by_day.place = Place::Outside;
    let left = plan("g", Count::Replicas(5), &[by_day]);
    assert_eq!(left.writes[0].to, keda(2, false));
}

/// Found in review: a workload KEDA scales, asleep under another TDSet's record (its own count
/// 4), taken over at night: its own count stays 4, not the 0 it runs.
#[test]
fn a_keda_workload_taken_over_at_night_keeps_the_own_count_on_record() {
    let mut api = deployment("api", 0);
    (api.autoscaled_by, api.keda) = (Some("api".into()), true);
    api.record = Some(Record {
        holder: "older".into(),
        own: Value::Replicas(4),
        scheduled: Value::Replicas(0),
        previous: None,
    });
    let night = plan(
        "g",
        Count::Replicas(0),
        &[api, scaled_object_of("api", 1, 10)],
    );
    let r = night.writes[0].record.as_ref().unwrap();
    assert_eq!((r.holder.as_str(), r.own), ("g", Value::Replicas(4)));
}

/// Letting go of a workload asleep on record under KEDA: the record goes once KEDA runs it
/// (or may keep it at 0, or another holds it), is kept while the pause is on or KEDA has not
/// acted, and past the bound the own count is written directly.
#[test]
fn a_group_let_go_of_waits_for_keda_to_run_what_it_put_to_sleep_then_wakes_it_itself() {
    let secs = std::time::Duration::from_secs;
    let mut web = deployment("web", 0);
    web.record = Some(Record {
        holder: "g".into(),
        own: Value::Replicas(2),
        scheduled: Value::Replicas(0),
        previous: None,
    });
    assert!(asleep_on_record("g", &web));
    assert!(!asleep_on_record("other", &web));
    let so = |floor, paused, holder: Option<&str>| KedaSeen {
        value: Value::Keda { floor, paused },
        holder: holder.map(String::from),
        keda_paused: false,
        idle: false,
    };
    let waited = |first, unpaused: Option<u64>| KedaWaited {
        since_first: secs(first),
        since_unpaused: unpaused.map(secs),
    };
    let decide = |m: &Member, so: &KedaSeen, w| keda_release("g", m, so, w);
    use KedaRelease::{Resumed, Wait, Wake};
    // Its pause not given back yet: waited for, at most 5 min.
    let ours = so(2, true, Some("g"));
    assert_eq!(decide(&web, &ours, waited(299, None)), Wait);
    assert_eq!(decide(&web, &ours, waited(300, None)), Wake);
    // Given back: KEDA has 60 s from then.
    let back = so(2, false, None);
    assert_eq!(decide(&web, &back, waited(100, Some(59))), Wait);
    assert_eq!(decide(&web, &back, waited(100, Some(60))), Wake);
    // KEDA's floor of 0, or an idle count: KEDA may keep it at 0, and that is KEDA's to decide.
    assert_eq!(
        decide(&web, &so(0, false, None), waited(0, Some(0))),
        Resumed
    );
    let idle = KedaSeen {
        idle: true,
        ..back.clone()
    };
    assert_eq!(decide(&web, &idle, waited(0, Some(0))), Resumed);
    // KEDA says Paused with no pause left (keda#6982): not resumed, whatever its floor.
    let stuck = KedaSeen {
        keda_paused: true,
        ..so(0, false, None)
    };
    assert_eq!(decide(&web, &stuck, waited(10, Some(10))), Wait);
    assert_eq!(decide(&web, &stuck, waited(70, Some(60))), Wake);
    // Someone else's: another TDSet's record, or a night pause not this TDSet's.
    assert_eq!(
        decide(&web, &so(2, true, Some("other")), waited(0, None)),
        Resumed
    );
    assert_eq!(decide(&web, &so(2, true, None), waited(0, None)), Resumed);
    let mut handed = web.clone();
    handed.handed_to = Some("other".into());
    assert_eq!(decide(&handed, &back, waited(0, Some(0))), Resumed);
    web.keda = true;
    assert!(released("g", &web, Some(Wait)).is_empty());
    let woken = released("g", &web, Some(Wake));
    let two = Value::Replicas(2);
    assert_eq!(
        (woken.len(), woken[0].to, &woken[0].record),
        (1, two, &None),
        "its own count, directly"
    );
    web.value = two;
    assert_eq!(decide(&web, &back, waited(0, Some(0))), Resumed);
    let resumed = released("g", &web, Some(Resumed));
    assert_eq!(
        (resumed[0].to, &resumed[0].record),
        (two, &None),
        "KEDA's count, left"
    );
}
