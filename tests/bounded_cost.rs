//! What one evaluation of a TDSet costs, for the schema's extremes: any namespace editor can
//! create these, and the operator evaluates them at every reconcile (compile, evaluate, next
//! transition, warnings). A counting allocator measures the peak heap of each evaluation; the
//! budget is the same for every spec the API server accepts.
//!
//! One test function, so no other test's allocations run beside the measurement.
//! A binary of its own (not a module of `tests/it`): its counting allocator is the global one.

#[path = "it/support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use support::{tdset, utc};
use tdset_operator::schedule::Schedule;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The heap one evaluation may use at its peak, beyond what was live before it.
const BUDGET: usize = 4 << 20;

/// Peak bytes allocated (above the live heap at the start) while `f` runs.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst).saturating_sub(base))
}

fn hhmm(minute: u32) -> String {
    format!("{:02}:{:02}", minute / 60 % 24, minute % 60)
}

/// 64 back-to-back windows over the day, alternating between `low` and `high`.
fn alternating_windows(low: i32, high: i32, days: Option<&[&str]>) -> Vec<Value> {
    (0..64u32)
        .map(|i| {
            let (start, end) = (i * 1440 / 64, (i + 1) * 1440 / 64);
            let mut w = json!({
                "startTime": hhmm(start),
                "endTime": hhmm(end),
                "replica": if i % 2 == 0 { low } else { high },
            });
            if let Some(days) = days {
                w["days"] = json!(days);
            }
            w
        })
        .collect()
}

/// The most holidays allowed: 366 single days, every other day from `from`.
fn holidays(from: DateTime<Utc>) -> Vec<String> {
    (0..366)
        .map(|i| {
            (from + Duration::days(2 * i))
                .format("%Y-%m-%d")
                .to_string()
        })
        .collect()
}

/// The most overrides allowed: 32 alternating between 0 and 10000, an hour each, a day apart.
fn overrides(from: DateTime<Utc>) -> Vec<Value> {
    (0..32)
        .map(|i| {
            let start = from + Duration::hours(25 * i);
            json!({
                "start": start.to_rfc3339(),
                "end": (start + Duration::hours(1)).to_rfc3339(),
                "replica": if i % 2 == 0 { 0 } else { 10000 },
            })
        })
        .collect()
}

fn spec(extra: Value) -> Value {
    let mut spec = json!({
        "container": {"image": "nginx", "port": 80},
        "defaultReplica": 1,
        "timeZone": "Europe/Berlin",
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec
}

#[test]
fn every_spec_the_schema_accepts_evaluates_within_a_small_heap() {
    let t0 = utc("2026-10-20T08:07:00Z"); // five days before Berlin falls back
    let weekdays = ["Mon", "Tue", "Wed", "Thu", "Fri", "Hol"];
    let cases = [
        (
            // The report's example: every minute a step of 1 between 1 and 10000.
            "64 windows 1/10000, ramp 1 every 1m",
            spec(json!({
                "schedulingConfig": alternating_windows(1, 10000, None),
                "ramp": {"step": 1, "every": "1m"},
            })),
        ),
        (
            "the same, Up only, weekdays and holidays",
            spec(json!({
                "schedulingConfig": alternating_windows(1, 10000, Some(&weekdays)),
                "ramp": {"step": 1, "every": "1m", "direction": "Up"},
                "holidays": holidays(t0 - Duration::days(10)),
            })),
        ),
        (
            "the same, Down only, with 32 overrides",
            spec(json!({
                "schedulingConfig": alternating_windows(0, 10000, None),
                "defaultReplica": 0,
                "ramp": {"step": 1, "every": "1m", "direction": "Down"},
                "overrides": overrides(t0 - Duration::days(3)),
            })),
        ),
        (
            "the longest ramp step: 1 every 24h over 7 replicas",
            spec(json!({
                "schedulingConfig": alternating_windows(0, 7, Some(&weekdays)),
                "defaultReplica": 0,
                "ramp": {"step": 1, "every": "24h"},
                "holidays": holidays(t0),
            })),
        ),
        (
            "no ramp: 64 overlapping windows, 366 holidays, 32 overrides",
            spec(json!({
                "schedulingConfig": (0..64).map(|i| json!({
                    "startTime": hhmm(i * 20), "endTime": hhmm(i * 20 + 600),
                    "replica": i, "days": weekdays,
                })).collect::<Vec<_>>(),
                "holidays": holidays(t0),
                "overrides": overrides(t0),
            })),
        ),
    ];
    let mut worst = (0, "");
    for (name, spec) in &cases {
        let spec = tdset("cost", spec.clone()).spec;
        for at in [
            t0,
            t0 + Duration::seconds(30),
            t0 + Duration::hours(13),
            t0 + Duration::days(5) - Duration::hours(1),
            t0 + Duration::days(40),
        ] {
            let (out, peak) = peak_of(|| {
                let schedule = Schedule::compile(&spec).expect("a valid spec");
                let eval = schedule.evaluate(at);
                let next = schedule.next_transition(at);
                let warnings = schedule.warnings();
                (eval.replicas, next, warnings.len())
            });
            let (replicas, next, _) = out;
            if let Some(next) = next {
                assert!(next.at > at, "{name} at {at}: next transition {next:?}");
                assert_ne!(next.replicas, replicas, "{name} at {at}");
            }
            if peak > worst.0 {
                worst = (peak, name);
            }
            assert!(
                peak <= BUDGET,
                "{name} at {at}: one evaluation peaked at {peak} bytes of heap, over the {BUDGET} budget"
            );
        }
    }
    eprintln!("worst peak: {} bytes ({})", worst.0, worst.1);
}
