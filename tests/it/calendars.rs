//! Shared calendars on the real API server: a `TDCalendar`'s dates are holidays of every TDSet
//! that names it, in each TDSet's own zone; a change to it reaches them at once; a missing one
//! is reported and picked up when it appears.

use crate::support::*;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tdset_operator::api::{TDCalendar, TDSet};
use tdset_operator::clock::SystemClock;

/// Weekdays 09:00-17:00 at 3, else 1, naming `calendar`.
fn weekdays(zone: &str, calendar: &str) -> Value {
    json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 3,
                              "days": ["Mon", "Tue", "Wed", "Thu", "Fri"]}],
        "defaultReplica": 1,
        "timeZone": zone,
        "calendars": [calendar],
    })
}

/// A cluster-scoped calendar, unique to the test (tests share the cluster).
struct Calendar {
    api: Api<TDCalendar>,
    name: String,
}

impl Calendar {
    fn new(client: &kube::Client, prefix: &str) -> Calendar {
        Calendar {
            api: Api::all(client.clone()),
            name: format!("{prefix}-{}", unique_suffix()),
        }
    }

    async fn set(&self, holidays: &[&str]) {
        self.apply(json!({"holidays": holidays})).await;
    }

    /// The calendar takes its dates from key `holidays.ics` of ConfigMap `ns/name`.
    async fn set_ics(&self, ns: &str, name: &str) {
        self.apply(json!({"ics": {"configMapRef": {"name": name, "namespace": ns, "key": "holidays.ics"}}}))
            .await;
    }

    async fn apply(&self, spec: Value) {
        let calendar: TDCalendar = serde_json::from_value(json!({
            "apiVersion": "schedule.rs/v1", "kind": "TDCalendar",
            "metadata": {"name": self.name},
            "spec": spec,
        }))
        .unwrap();
        self.api
            .patch(
                &self.name,
                &PatchParams::apply("tdset-tests").force(),
                &Patch::Apply(&calendar),
            )
            .await
            .expect("applying the calendar");
    }

    async fn delete(&self) {
        let _ = self.api.delete(&self.name, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn a_calendar_stops_weekday_windows_on_its_dates_and_its_changes_apply_at_once() {
    let (client, ns) = setup("calendar").await;
    let calendar = Calendar::new(&client, "company");
    // Thursday 2026-12-03, 10:00 UTC: the weekday window is open.
    let clock = SystemClock::starting_at(utc("2026-12-03T10:00:00Z"));
    let _op = Operator::start(&client, &ns.name, clock, None, "test");
    create_tdset(
        &client,
        &ns.name,
        &tdset("web", weekdays("UTC", &calendar.name)),
    )
    .await;

    // The calendar does not exist yet: its dates do not apply, and the TDSet says so.
    deployment_at(&client, &ns.name, "web", 3).await;
    let t = tdset_with_reason(&client, &ns.name, "web", "Degraded", "CalendarNotFound").await;
    let degraded = condition(&t, "Degraded").unwrap();
    assert_eq!(degraded.status, "True");
    assert!(degraded.message.contains(&calendar.name), "{degraded:?}");
    let progressing = condition(&t, "Progressing").unwrap();
    assert_ne!(progressing.reason, "Blocked", "{progressing:?}");
    wait_for_event(&client, &ns.name, "web", |(kind, reason, note)| {
        kind == "Warning" && reason == "CalendarNotFound" && note.contains(&calendar.name)
    })
    .await;

    // Created with today in it: today is a holiday, the weekday window does not start.
    calendar.set(&["2026-12-24", "2026-12-03"]).await;
    deployment_at(&client, &ns.name, "web", 1).await;
    tdset_with_reason(&client, &ns.name, "web", "Degraded", "AsExpected").await;

    // The date taken out again: the window applies at once.
    calendar.set(&["2026-12-24"]).await;
    deployment_at(&client, &ns.name, "web", 3).await;

    // A range that covers today, then the calendar deleted: reported, its dates gone.
    calendar.set(&["2026-12-01/2026-12-04"]).await;
    deployment_at(&client, &ns.name, "web", 1).await;
    calendar.delete().await;
    tdset_with_reason(&client, &ns.name, "web", "Degraded", "CalendarNotFound").await;
    deployment_at(&client, &ns.name, "web", 3).await;
    ns.cleanup().await;
}

#[tokio::test]
async fn one_calendar_is_read_in_each_tdsets_own_zone() {
    let (client, ns) = setup("calendar-zones").await;
    let calendar = Calendar::new(&client, "shared");
    calendar.set(&["2026-12-03"]).await;
    // 2026-12-03T23:30Z: Thursday 23:30 in London, Friday 08:30 in Tokyo. The windows run
    // 22:00-02:00 in each zone (over midnight): London's started on the 3rd, a holiday.
    let clock = SystemClock::starting_at(utc("2026-12-03T23:30:00Z"));
    let _op = Operator::start_reporting_calendars(&client, &ns.name, clock);
    for (name, zone, start, end) in [
        ("london", "Europe/London", "22:00", "02:00"),
        ("tokyo", "Asia/Tokyo", "08:00", "12:00"),
    ] {
        let mut spec = weekdays(zone, &calendar.name);
        spec["schedulingConfig"][0]["startTime"] = json!(start);
        spec["schedulingConfig"][0]["endTime"] = json!(end);
        create_tdset(&client, &ns.name, &tdset(name, spec)).await;
    }
    // London: the window would have started on Thursday the 3rd, a holiday there: 1.
    // Tokyo: it is Friday the 4th there, not a holiday: its window runs, 3.
    deployment_at(&client, &ns.name, "london", 1).await;
    deployment_at(&client, &ns.name, "tokyo", 3).await;

    // The CLI at the same instant agrees: `preview -f` with the calendar's manifest, and the
    // plugin's `preview NAME`, which reads the live calendar.
    let dir = plugin_dir();
    let london = dir.join("london.yaml");
    let mut spec = weekdays("Europe/London", &calendar.name);
    spec["schedulingConfig"][0]["startTime"] = json!("22:00");
    spec["schedulingConfig"][0]["endTime"] = json!("02:00");
    std::fs::write(
        &london,
        serde_json::to_string(&tdset("london", spec)).unwrap(),
    )
    .unwrap();
    let file = dir.join("calendar.yaml");
    std::fs::write(
        &file,
        json!({"apiVersion": "schedule.rs/v1", "kind": "TDCalendar",
               "metadata": {"name": calendar.name}, "spec": {"holidays": ["2026-12-03"]}})
        .to_string(),
    )
    .unwrap();
    let at = "2026-12-03T23:30:00Z";
    let desired = |args: &[&str]| {
        let (ok, out, err) = kubectl_tdset(&dir, args);
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        v["desiredReplicas"].as_i64()
    };
    let london = london.to_str().unwrap();
    let with = [
        "preview",
        "-f",
        london,
        "--calendar",
        file.to_str().unwrap(),
        "--at",
        at,
        "-o",
        "json",
    ];
    assert_eq!(desired(&with), Some(1), "preview -f with the calendar");
    let without = ["preview", "-f", london, "--at", at, "-o", "json"];
    assert_eq!(desired(&without), Some(3), "preview -f without it");
    let (ok, out, err) = kubectl_tdset(&dir, &["preview", "-f", london, "--at", at]);
    assert!(
        ok && out.contains(&format!("TDCalendar {} not given", calendar.name)),
        "{out}{err}"
    );
    let live = [
        "preview", "london", "-n", &ns.name, "--at", at, "-o", "json",
    ];
    assert_eq!(
        desired(&live),
        Some(1),
        "the plugin's preview of the live TDSet"
    );

    // The calendar's status (`kubectl get tdcalendars` columns): its days, and two users.
    eventually(GUARD, "the calendar's usage in its status", || async {
        let c = calendar.api.get_status(&calendar.name).await.ok()?;
        let s = c.status?;
        (s.days == Some(1) && s.used_by == Some(2)).then_some(())
    })
    .await;

    // `kubectl tdset calendars`: the days it holds and who names it.
    let (ok, out, err) = kubectl_tdset(&dir, &["calendars"]);
    assert!(ok, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&calendar.name))
        .unwrap_or_else(|| panic!("no row for {}: {out}", calendar.name));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "1", "{row}");
    for user in ["london", "tokyo"] {
        assert!(cells[2].contains(&format!("{}/{user}", ns.name)), "{row}");
    }
    calendar.delete().await;
    ns.cleanup().await;
}

/// A calendar stored before the schema checked its dates (an operator upgraded over it): the
/// operator leaves it out as it would a missing one, says why on the calendar and on every
/// TDSet that names it, and the TDSets keep scheduling; fixed, its dates apply at once.
#[tokio::test]
async fn a_calendar_stored_with_a_date_that_does_not_exist_freezes_no_tdset() {
    // A control plane of its own: the TDCalendar CRD is swapped for an older one here.
    let dir = std::env::temp_dir().join(format!("tdset-calendar-cp-{}", unique_suffix()));
    let cp = start_control_plane(&dir);
    let client = client_for(&cp.kubeconfig).await;
    install_crd(&client).await;
    let current: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("crds/tdcalendar.yaml")).unwrap(),
    )
    .unwrap();
    // The CRD of before: the same without the rule that each date exists.
    let mut older = current.clone();
    let holiday = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/holidays/items/x-kubernetes-validations";
    let rules = older.pointer_mut(holiday).unwrap().as_array_mut().unwrap();
    let before = rules.len();
    rules.retain(|r| !r["rule"].as_str().unwrap().contains("format.date()"));
    assert_eq!(
        rules.len(),
        before - 1,
        "the rule is in crds/tdcalendar.yaml"
    );
    let crds = Api::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >::all(client.clone());
    let apply_crd = |crd: serde_json::Value| {
        let crds = crds.clone();
        async move {
            crds.patch(
                "tdcalendars.schedule.rs",
                &PatchParams::apply("tdset-tests").force(),
                &Patch::Apply(&crd),
            )
            .await
            .expect("applying the TDCalendar CRD");
        }
    };
    apply_crd(older).await;
    let calendar = Calendar::new(&client, "stored");
    // Thursday 2026-12-03 is in it, next to a date that does not exist.
    eventually(GUARD, "the older CRD to take the calendar", || async {
        let c: TDCalendar = serde_json::from_value(json!({
            "apiVersion": "schedule.rs/v1", "kind": "TDCalendar",
            "metadata": {"name": calendar.name},
            "spec": {"holidays": ["2026-12-03", "2027-02-29"]},
        }))
        .unwrap();
        calendar
            .api
            .patch(
                &calendar.name,
                &PatchParams::apply("tdset-tests").force(),
                &Patch::Apply(&c),
            )
            .await
            .ok()
    })
    .await;
    // The operator's version installed: stored objects stay as they are.
    apply_crd(current).await;

    let ns = TestNamespace::new(&client, "calendar-stored").await;
    let clock = SystemClock::starting_at(utc("2026-12-03T10:00:00Z"));
    let _op = Operator::start_reporting_calendars(&client, &ns.name, clock);
    create_tdset(
        &client,
        &ns.name,
        &tdset("web", weekdays("UTC", &calendar.name)),
    )
    .await;

    // Not frozen: the window's count, none of the calendar's dates applied (today's neither).
    deployment_at(&client, &ns.name, "web", 3).await;
    let t = tdset_with_reason(&client, &ns.name, "web", "Degraded", "CalendarInvalid").await;
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.message.contains(&calendar.name)
            && degraded
                .message
                .contains("spec.holidays[1]: \"2027-02-29\""),
        "{degraded:?}"
    );
    assert_ne!(condition(&t, "Progressing").unwrap().reason, "Blocked");
    wait_for_event(&client, &ns.name, "web", |(kind, reason, _)| {
        kind == "Warning" && reason == "CalendarInvalid"
    })
    .await;
    // The calendar says so itself (`kubectl get tdcalendars -o wide`).
    eventually(GUARD, "the calendar's problem in its status", || async {
        let c = calendar.api.get_status(&calendar.name).await.ok()?;
        let problem = c.status?.problem?;
        problem.contains("spec.holidays[1]").then_some(())
    })
    .await;

    // Fixed: its dates apply at once (today is one), and both say nothing is wrong.
    calendar.set(&["2026-12-03", "2027-02-28"]).await;
    deployment_at(&client, &ns.name, "web", 1).await;
    tdset_with_reason(&client, &ns.name, "web", "Degraded", "AsExpected").await;
    eventually(GUARD, "the calendar's problem gone", || async {
        let c = calendar.api.get_status(&calendar.name).await.ok()?;
        c.status?.problem.is_none().then_some(())
    })
    .await;
    cp.stop();
}

/// ConfigMap `holidays` in `ns` holding `ics` at key `holidays.ics`.
async fn set_document(client: &kube::Client, ns: &str, ics: &str) {
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "holidays"},
        "data": {"holidays.ics": ics},
    });
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "holidays",
            &PatchParams::apply("tdset-tests").force(),
            &Patch::Apply(&cm),
        )
        .await
        .expect("applying the ConfigMap");
}

/// Waits until TDSet `web` is Degraded for its calendar, saying `what`.
async fn degraded_saying(client: &kube::Client, ns: &str, what: &str) -> TDSet {
    object_where(
        client,
        ns,
        "web",
        &format!("CalendarInvalid: {what}"),
        |t: &TDSet| {
            condition(t, "Degraded").is_some_and(|c| {
                c.status == "True" && c.reason == "CalendarInvalid" && c.message.contains(what)
            })
        },
    )
    .await
}

/// A published holiday file's shape (Google's export: CRLF, folded lines, `VALUE=DATE`, `X-`
/// properties) with one holiday on `day` (YYYYMMDD), and a yearly rule.
fn document(day: &str) -> String {
    [
        "BEGIN:VCALENDAR",
        "PRODID:-//Google Inc//Google Calendar 70.9054//EN",
        "VERSION:2.0",
        "X-WR-CALNAME:Company holidays",
        "BEGIN:VEVENT",
        &format!("DTSTART;VALUE=DATE:{day}"),
        "SUMMARY:Founders' day",
        "DESCRIPTION:The office is closed\\, all teams. See the intranet for the long ",
        " er text of this folded line",
        "END:VEVENT",
        "BEGIN:VEVENT",
        "DTSTART;TZID=Europe/Berlin;VALUE=DATE:20201225",
        "RRULE:FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=25",
        "SUMMARY:Christmas Day",
        "END:VEVENT",
        "END:VCALENDAR",
        "",
    ]
    .join("\r\n")
}

/// A calendar whose dates come from an iCalendar document in a ConfigMap: its holiday
/// stops the weekday window; an edit of the ConfigMap applies at once; a document the
/// operator cannot read (an event with a time of day) or one that is gone is said on the
/// calendar and the TDSet, and freezes no TDSet.
#[tokio::test]
async fn a_calendar_takes_its_dates_from_an_icalendar_document_in_a_configmap() {
    let (client, ns) = setup("calendar-ics").await;
    let n = &ns.name;
    let calendar = Calendar::new(&client, "ics");
    set_document(&client, n, &document("20261203")).await;
    calendar.set_ics(n, "holidays").await;
    // Thursday 2026-12-03, 10:00 UTC: a holiday by the document.
    let clock = SystemClock::starting_at(utc("2026-12-03T10:00:00Z"));
    let _op = Operator::start_reporting_calendars(&client, n, clock);
    create_tdset(&client, n, &tdset("web", weekdays("UTC", &calendar.name))).await;
    deployment_at(&client, n, "web", 1).await;
    let c = eventually(GUARD, "the calendar's days reported", || async {
        let c = calendar.api.get(&calendar.name).await.ok()?;
        (c.status.as_ref()?.days? > 1).then_some(c)
    })
    .await;
    // The day, and Christmas in each of the years read (2025..2028).
    assert_eq!(c.status.as_ref().unwrap().days, Some(5), "{:?}", c.status);
    assert_eq!(c.status.as_ref().unwrap().problem, None);
    // The plugin's preview of the live TDSet reads the document as the operator does.
    let (ok, out, err) = kubectl_tdset(
        &plugin_dir(),
        &[
            "preview",
            "web",
            "-n",
            n,
            "--at",
            "2026-12-03T10:00:00Z",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["desiredReplicas"].as_i64(), v["holiday"].as_bool()),
        (Some(1), Some(true)),
        "{v}"
    );

    // The holiday moves to Friday: today is a working day again, at once.
    set_document(&client, n, &document("20261204")).await;
    deployment_at(&client, n, "web", 3).await;

    // Back on today, but as an event with a time of day: refused, said on the calendar and
    // the TDSet, and the TDSet schedules without the calendar's dates.
    let timed = document("20261203").replace(
        "DTSTART;VALUE=DATE:20261203",
        "DTSTART;TZID=Europe/Berlin:20261203T090000",
    );
    set_document(&client, n, &timed).await;
    let t = degraded_saying(&client, n, "has a time of day").await;
    let message = condition(&t, "Degraded").unwrap().message.clone();
    assert!(message.contains("Founders' day"), "{message}");
    eventually(GUARD, "the calendar's problem reported", || async {
        let c = calendar.api.get(&calendar.name).await.ok()?;
        c.status?
            .problem
            .filter(|p| p.contains("has a time of day"))
    })
    .await;
    deployment_at(&client, n, "web", 3).await;

    // Fixed: its date applies again. Then the ConfigMap goes: said, and nothing frozen.
    set_document(&client, n, &document("20261203")).await;
    deployment_at(&client, n, "web", 1).await;
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), n)
        .delete("holidays", &DeleteParams::default())
        .await
        .unwrap();
    // (Waited for by its message: the status of the timed event's phase may still be there.)
    degraded_saying(&client, n, "does not exist").await;
    deployment_at(&client, n, "web", 3).await;
    calendar.delete().await;
    ns.cleanup().await;
}
