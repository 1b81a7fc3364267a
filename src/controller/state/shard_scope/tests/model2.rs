//! A second review's extension of `model.rs`: PROVISIONAL small (2 under test, so 5 names
//! overflow it),
//! watch lag (API changes queue as pending events, also during a list, delivered after it),
//! an empty fill page still checked, and a reconcile that passed the claim gate in a busy
//! namespace (`gated`) checked for as long as it runs.
use super::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

type Key = (String, String);
const NSS: [&str; 3] = ["dev", "prod", "qa"];
const NAMES: [&str; 5] = ["n1", "n2", "n3", "n4", "n5"];

fn t(k: &Key, shard: &str) -> TDSet {
    group(&k.0, &k.1, shard.split('#').next().unwrap(), 1)
}
fn is(v: &str, shard: &str) -> bool {
    v.split('#').next() == Some(shard)
}

struct Fill {
    ns: String,
    snap: Option<Vec<TDSet>>,
    pos: usize,
    read: u64,
}

struct Listing {
    snap: Vec<(Key, String)>,
    pos: usize,
}

pub struct Opts {
    pub busy: bool,
    pub shuffle: bool,
    pub lag: bool,
    pub gate: bool,
    pub leak: bool,
}

pub fn run(seed: u64, o: &Opts) -> Result<(), String> {
    let mut r = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
    let s = Shard::new();
    let mut api: BTreeMap<Key, String> = BTreeMap::new();
    let mut view: BTreeMap<Key, String> = BTreeMap::new();
    let mut store_own: BTreeSet<Key> = BTreeSet::new();
    let mut listing: Option<Listing> = None;
    let mut fills: Vec<Fill> = vec![];
    let mut pending: VecDeque<(Key, Option<String>)> = VecDeque::new();
    let mut gated: BTreeSet<String> = BTreeSet::new();
    let mut log: Vec<String> = vec![];
    let b = |ns: &str| s.busy.borrow().contains(ns);
    let random_change = |r: &mut Rng, api: &mut BTreeMap<Key, String>| -> (Key, Option<String>) {
        let k = (NSS[r.below(3)].to_string(), NAMES[r.below(5)].to_string());
        if api.contains_key(&k) && r.chance(30) {
            api.remove(&k);
            (k, None)
        } else {
            let sh = if r.chance(40) { "a" } else { "b" }.to_string();
            let uid = match api.get(&k) {
                Some(old) => old.split_once('#').unwrap().1.to_string(),
                None => format!("{}", r.next() % 1000000),
            };
            let v = format!("{sh}#{uid}");
            api.insert(k.clone(), v.clone());
            (k, Some(v))
        }
    };
    let start_list = |r: &mut Rng, api: &mut BTreeMap<Key, String>, log: &mut Vec<String>| {
        for _ in 0..r.below(4) {
            let (k, sh) = random_change(r, api);
            log.push(format!("downtime {k:?} -> {sh:?}"));
        }
        let mut snap: Vec<(Key, String)> =
            api.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if o.shuffle && r.chance(30) {
            for i in (1..snap.len()).rev() {
                let j = r.below(i + 1);
                snap.swap(i, j);
            }
        }
        log.push(format!("Init {:?}", snap));
        s.scope.list_started(&b);
        Listing { snap, pos: 0 }
    };
    // Delivers one watch event (not during a list).
    let deliver = |k: Key,
                   sh: Option<String>,
                   view: &mut BTreeMap<Key, String>,
                   store_own: &mut BTreeSet<Key>,
                   log: &mut Vec<String>| match sh {
        Some(sh) => {
            log.push(format!("Apply {k:?} {sh}"));
            s.shows(&t(&k, &sh), false);
            view.insert(k.clone(), sh.clone());
            if is(&sh, "a") {
                store_own.insert(k);
            } else {
                store_own.remove(&k);
            }
        }
        None => {
            log.push(format!("Delete {k:?}"));
            if let Some(old) = view.remove(&k) {
                s.deletes(&t(&k, &old));
            }
            store_own.remove(&k);
        }
    };
    for _step in 0..160 {
        while let Some(ns) = s.queued_fill() {
            log.push(format!("fill queued {ns}"));
            fills.push(Fill {
                ns,
                snap: None,
                pos: 0,
                read: 0,
            });
        }
        match r.below(12) {
            0..=2 => {
                if !o.lag && listing.is_some() {
                    continue;
                }
                let (k, sh) = random_change(&mut r, &mut api);
                if o.lag {
                    log.push(format!("api {k:?} -> {sh:?} (pending)"));
                    pending.push_back((k, sh));
                } else {
                    deliver(k, sh, &mut view, &mut store_own, &mut log);
                }
            }
            10 | 11 if listing.is_none() && !pending.is_empty() => {
                let (k, sh) = pending.pop_front().unwrap();
                deliver(k, sh, &mut view, &mut store_own, &mut log);
            }
            3 if listing.is_none() => {
                pending.clear();
                listing = Some(start_list(&mut r, &mut api, &mut log));
            }
            3..=4 if listing.is_some() => {
                let l = listing.as_mut().unwrap();
                if r.chance(10) {
                    log.push("cut".into());
                    pending.clear();
                    listing = Some(start_list(&mut r, &mut api, &mut log));
                } else if l.pos < l.snap.len() {
                    let (k, sh) = l.snap[l.pos].clone();
                    l.pos += 1;
                    log.push(format!("InitApply {k:?} {sh}"));
                    s.shows(&t(&k, &sh), true);
                    view.insert(k, sh);
                } else {
                    log.push("InitDone".into());
                    let seen: HashSet<_> = l
                        .snap
                        .iter()
                        .map(|(k, _)| tdset_ref_named(&k.0, &k.1))
                        .collect();
                    s.list_done(&seen);
                    view = l.snap.iter().cloned().collect();
                    store_own = view
                        .iter()
                        .filter(|(_, v)| is(v, "a"))
                        .map(|(k, _)| k.clone())
                        .collect();
                    listing = None;
                }
            }
            5..=6 if !fills.is_empty() => {
                let i = r.below(fills.len());
                let f = &mut fills[i];
                match &f.snap {
                    None => {
                        f.snap = Some(
                            api.iter()
                                .filter(|(k, _)| k.0 == f.ns)
                                .map(|(k, v)| t(k, v))
                                .collect(),
                        );
                        f.pos = 0;
                        f.read = s.scope.fill_reading();
                        log.push(format!("fill {} read", f.ns));
                    }
                    Some(snap) => {
                        if r.chance(10) {
                            log.push(format!("fill {} failed", f.ns));
                            f.snap = None;
                        } else if f.pos < snap.len() || (f.pos == 0 && snap.is_empty()) {
                            let end = (f.pos + 2).min(snap.len());
                            log.push(format!("fill {} page {}..{end}", f.ns, f.pos));
                            if s.fill_page(&f.ns, f.read, &snap[f.pos..end]) {
                                f.pos = end;
                                if snap.is_empty() {
                                    f.pos = 1;
                                }
                            } else {
                                log.push(format!("fill {} stale: read again", f.ns));
                                f.snap = None;
                            }
                        } else {
                            log.push(format!("fill {} done", f.ns));
                            s.scope.fill_done(&f.ns, &b);
                            fills.remove(i);
                        }
                    }
                }
            }
            7 if o.busy => {
                let ns = NSS[r.below(3)].to_string();
                let was = s.busy.borrow_mut().remove(&ns);
                if was {
                    log.push(format!("idle {ns}"));
                    gated.remove(&ns);
                    s.idle(&ns);
                } else {
                    log.push(format!("busy {ns}"));
                    s.busy.borrow_mut().insert(ns);
                }
            }
            _ => {}
        }
        // A reconcile in a busy namespace passes the claim gate (when ready) and reads the
        // indexes until it ends.
        if o.gate {
            for ns in NSS {
                if b(ns) && !gated.contains(ns) && s.scope.ready(ns) && r.chance(50) {
                    log.push(format!("gate passed in {ns}"));
                    gated.insert(ns.to_string());
                }
            }
        }
        for ns in NSS {
            let own_here = store_own.iter().any(|k| k.0 == ns);
            let checked = (own_here && s.scope.ready(ns)) || gated.contains(ns);
            if !checked {
                continue;
            }
            let indexed: BTreeSet<String> = s.indexed(ns).into_iter().collect();
            for (k, v) in &view {
                if k.0 == ns && is(v, "b") && api.get(k) == Some(v) && !indexed.contains(&k.1) {
                    return Err(format!(
                        "SAFETY seed {seed}: {ns} ready (gated {}), {k:?} missing; index {indexed:?}\n{}",
                        gated.contains(ns),
                        log.join("\n")
                    ));
                }
            }
        }
    }
    // Quiesce: end the list, deliver what is pending, nothing busy, all fills done.
    if let Some(l) = listing.take() {
        for (k, sh) in &l.snap[l.pos..] {
            s.shows(&t(k, sh), true);
        }
        let seen: HashSet<_> = l
            .snap
            .iter()
            .map(|(k, _)| tdset_ref_named(&k.0, &k.1))
            .collect();
        s.list_done(&seen);
        view = l.snap.iter().cloned().collect();
        log.push("quiesce: list ended".into());
    }
    while let Some((k, sh)) = pending.pop_front() {
        deliver(k, sh, &mut view, &mut store_own, &mut log);
    }
    let busy: Vec<String> = s.busy.borrow_mut().drain().collect();
    for ns in busy {
        s.idle(&ns);
        log.push(format!("quiesce: idle {ns}"));
    }
    loop {
        while let Some(ns) = s.queued_fill() {
            fills.push(Fill {
                ns,
                snap: None,
                pos: 0,
                read: 0,
            });
        }
        let Some(f) = fills.pop() else { break };
        let snap: Vec<TDSet> = api
            .iter()
            .filter(|(k, _)| k.0 == f.ns)
            .map(|(k, v)| t(k, v))
            .collect();
        assert!(s.fill_page(&f.ns, s.scope.fill_reading(), &snap));
        s.scope.fill_done(&f.ns, &|_| false);
        log.push(format!("quiesce: fill {}", f.ns));
    }
    let mut others_indexed = 0;
    for ns in NSS {
        let own_here = view.iter().any(|(k, v)| k.0 == ns && is(v, "a"));
        let indexed: BTreeSet<String> = s.indexed(ns).into_iter().collect();
        let others: Vec<_> = indexed
            .iter()
            .filter(|n| {
                !view
                    .get(&(ns.to_string(), n.to_string()))
                    .is_some_and(|v| is(v, "a"))
            })
            .collect();
        others_indexed += others.len() as i64;
        if own_here && !s.scope.ready(ns) {
            return Err(format!(
                "STUCK seed {seed}: {ns} never ready\n{}",
                log.join("\n")
            ));
        }
        if own_here {
            for (k, v) in &view {
                if k.0 == ns && is(v, "b") && !indexed.contains(&k.1) {
                    return Err(format!(
                        "SAFETY-AT-REST seed {seed}: {k:?} missing\n{}",
                        log.join("\n")
                    ));
                }
            }
        }
        if o.leak && !own_here && !others.is_empty() {
            return Err(format!(
                "LEAK seed {seed}: {ns} keeps {others:?}\n{}",
                log.join("\n")
            ));
        }
        for n in &indexed {
            if !view.contains_key(&(ns.to_string(), n.clone())) {
                return Err(format!("GHOST seed {seed}: {ns}/{n}\n{}", log.join("\n")));
            }
        }
    }
    if s.others() != others_indexed {
        return Err(format!(
            "GAUGE seed {seed}: gauge {} vs {others_indexed}\n{}",
            s.others(),
            log.join("\n")
        ));
    }
    Ok(())
}

fn sweep(o: Opts) {
    let mut kinds: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let seeds: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(800);
    for seed in 1..seeds {
        if let Err(e) = run(seed, &o) {
            let kind = e.split_whitespace().next().unwrap().to_string();
            let entry = kinds.entry(kind).or_insert((0, e.clone()));
            entry.0 += 1;
            if e.len() < entry.1.len() {
                entry.1 = e;
            }
        }
    }
    for (k, (n, e)) in &kinds {
        eprintln!("=== {k}: {n} seeds; shortest:\n{e}\n");
    }
    assert!(kinds.is_empty(), "{:?}", kinds.keys().collect::<Vec<_>>());
}

#[test]
fn model2_provisional_only() {
    sweep(Opts {
        busy: true,
        shuffle: true,
        lag: false,
        gate: false,
        leak: true,
    });
}
#[test]
fn model2_lag() {
    sweep(Opts {
        busy: true,
        shuffle: true,
        lag: true,
        gate: false,
        leak: true,
    });
}
#[test]
fn model2_gate() {
    sweep(Opts {
        busy: true,
        shuffle: true,
        lag: false,
        gate: true,
        leak: true,
    });
}
#[test]
fn model2_all() {
    sweep(Opts {
        busy: true,
        shuffle: true,
        lag: true,
        gate: true,
        leak: true,
    });
}
