//! Shards, the pure part: which TDSets a shard reconciles (a label selector, as kubectl
//! writes them), whose claim a TDSet carries, and when another shard's claim may be taken
//! over. The controller's side (claiming, letting go, reading the other shard's Lease) is
//! `controller/state/sharding.rs` (and the claim stage, `controller/stages/claim.rs`).
//!
//! The rule: a shard writes a TDSet (its workload, its status) only while `status.shard`
//! names it. It claims a TDSet whose claim is empty with the TDSet's resourceVersion as a
//! precondition, so of two shards that both see it empty only one succeeds. A shard lets go
//! (removes its name) of every TDSet it has claimed and no longer matches, once its
//! reconciles of that TDSet have ended and nothing of it is queued. A claim is taken over
//! without that only when that shard no longer takes the TDSet (the selector its leader
//! publishes on its Lease does not match it) and is proven not to write it: its Lease is
//! released or gone, has not been renewed for the lease's duration (by the taker's own
//! clock), or a new leadership of it began after the taker saw the claim (a new leader lists
//! the TDSets afresh, so it sees the move and lets go). While the holder's selector matches
//! (overlapping selectors), the claim stays where it is, across the holder's restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube::core::{Expression, Selector, SelectorExt};

/// A shard: its name (in `status.shard` and its Lease's name) and what it selects.
#[derive(Clone, Debug)]
pub struct ShardSpec {
    pub name: String,
    pub selector: Selector,
    /// The selector as given, for logs.
    pub selector_text: String,
}

impl ShardSpec {
    pub fn new(name: &str, selector: &str) -> Result<ShardSpec, String> {
        if name.is_empty()
            || name.len() > 40
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            || name.starts_with('-')
            || name.ends_with('-')
        {
            return Err(format!(
                "shard name {name:?}: use 1-40 lowercase letters, digits and '-' (it becomes part of a Lease's name)"
            ));
        }
        Ok(ShardSpec {
            name: name.to_string(),
            selector: parse_selector(selector)?,
            selector_text: selector.to_string(),
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }
}

/// Parses a label selector as kubectl writes it: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`, joined by commas (all must hold). An empty selector is
/// refused: a shard that selects everything is a second operator, not a shard.
pub fn parse_selector(text: &str) -> Result<Selector, String> {
    let mut expressions = Vec::new();
    for part in split_top_level(text)? {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("selector {text:?}: an empty requirement"));
        }
        expressions.push(requirement(part).map_err(|e| format!("selector {text:?}: {e}"))?);
    }
    if expressions.is_empty() {
        return Err("a shard needs a selector that names what it takes, e.g. shard=a".into());
    }
    Ok(Selector::from_iter(expressions))
}

/// Splits at the commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("selector {text:?}: unbalanced parentheses"));
        }
    }
    if depth != 0 {
        return Err(format!("selector {text:?}: unbalanced parentheses"));
    }
    if !text.trim().is_empty() {
        parts.push(&text[start..]);
    }
    Ok(parts)
}

fn requirement(part: &str) -> Result<Expression, String> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(label_key(key.trim())?));
    }
    for (op, not) in [(" notin ", true), (" in ", false)] {
        if let Some((key, values)) = part.split_once(op) {
            let values = values
                .trim()
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or_else(|| format!("{part:?}: the values go in parentheses"))?;
            let set = values
                .split(',')
                .map(|v| label_value(v.trim()))
                .collect::<Result<BTreeSet<_>, _>>()?;
            let key = label_key(key.trim())?;
            return Ok(if not {
                Expression::NotIn(key, set)
            } else {
                Expression::In(key, set)
            });
        }
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(Expression::NotEqual(
            label_key(key.trim())?,
            label_value(value.trim())?,
        ));
    }
    if let Some((key, value)) = part.split_once('=') {
        let value = value.strip_prefix('=').unwrap_or(value);
        return Ok(Expression::Equal(
            label_key(key.trim())?,
            label_value(value.trim())?,
        ));
    }
    Ok(Expression::Exists(label_key(part)?))
}

fn label_key(key: &str) -> Result<String, String> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let valid = match key.split_once('/') {
        Some((prefix, name)) => ok(prefix) && ok(name) && name.len() <= 63,
        None => ok(key) && key.len() <= 63,
    };
    if valid {
        Ok(key.to_string())
    } else {
        Err(format!("{key:?} is not a label key"))
    }
}

fn label_value(value: &str) -> Result<String, String> {
    if value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(value.to_string())
    } else {
        Err(format!("{value:?} is not a label value"))
    }
}

/// What a shard may do with a TDSet it matches, given the claim the TDSet carries.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim<'a> {
    /// It names this shard: reconcile.
    Mine,
    /// Nobody's: claim it (with the resourceVersion precondition), then reconcile.
    Free,
    /// Another shard's: write nothing until it lets go or is proven gone.
    Held(&'a str),
}

pub fn claim<'a>(me: &str, status_shard: Option<&'a str>) -> Claim<'a> {
    match status_shard {
        None | Some("") => Claim::Free,
        Some(s) if s == me => Claim::Mine,
        Some(s) => Claim::Held(s),
    }
}

/// On a shard's Lease: its selector, so another shard knows whether it still takes a TDSet.
pub const SELECTOR_ANNOTATION: &str = "schedule.rs/shard-selector";

/// A Lease as the takeover rule reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: String,
    pub acquired: String,
    pub transitions: i32,
    pub renewed: String,
    pub duration: Duration,
    /// The shard's selector as its leader published it (`SELECTOR_ANNOTATION`).
    pub selector: Option<String>,
}

/// What a waiting shard has seen of the holder's Lease since it first saw the claim.
#[derive(Clone, Debug)]
pub struct Watch {
    /// The shard whose claim this is: a claim that changes hands starts a new watch.
    shard: String,
    /// (holder, acquireTime, transitions) when first seen: a leadership.
    leadership: (String, String, i32),
    renewed: String,
    /// When `renewed` last changed, by the watcher's clock.
    changed_at: Instant,
}

/// Whether another shard's claim on a TDSet may be taken over, and why.
#[derive(Debug, PartialEq, Eq)]
pub enum Takeover {
    Take(&'static str),
    Wait(&'static str),
}

/// Whether the claim of shard `holder` on a TDSet labelled `labels` may be taken over, from
/// that shard's Lease now (`None`: no Lease found). `watch` carries what was seen before, for
/// this TDSet; it starts empty when the claim is first seen, so only changes seen after that
/// count (the first look must be a fresh read).
pub fn may_take_over(
    watch: &mut Option<Watch>,
    holder: &str,
    lease: Option<&LeaseRecord>,
    labels: &BTreeMap<String, String>,
    now: Instant,
) -> Takeover {
    let Some(lease) = lease else {
        // Deleted (how a removed shard hands its TDSets over), or the shards disagree on the
        // Lease's name or namespace: every shard of one installation must share both.
        return Takeover::Take("that shard has no Lease");
    };
    if let Some(selector) = lease.selector.as_deref()
        && parse_selector(selector).is_ok_and(|s| s.matches(labels))
    {
        // Whatever happens to its leaders, that shard takes this TDSet: overlap.
        return Takeover::Wait(
            "that shard's selector matches the TDSet too (overlapping selectors)",
        );
    }
    if lease.holder.is_empty() {
        // Released on a clean shutdown: its controller has stopped; a later leader lists afresh.
        return Takeover::Take("its Lease was released");
    }
    let leadership = (
        lease.holder.clone(),
        lease.acquired.clone(),
        lease.transitions,
    );
    let w = match watch {
        Some(w) if w.shard == holder => w,
        _ => {
            *watch = Some(Watch {
                shard: holder.to_string(),
                leadership,
                renewed: lease.renewed.clone(),
                changed_at: now,
            });
            return Takeover::Wait("waiting for it to let go");
        }
    };
    if w.leadership != leadership {
        // A leadership that began after the claim was seen here, so after the move.
        return Takeover::Take("a new leadership of it began after the move");
    }
    if w.renewed != lease.renewed {
        w.renewed.clone_from(&lease.renewed);
        w.changed_at = now;
        return Takeover::Wait("waiting for it to let go");
    }
    // Not renewed for the lease's duration: its holder stopped writing before that (it stops
    // at two thirds of it, see leader.rs).
    if now.duration_since(w.changed_at) >= lease.duration {
        Takeover::Take("its Lease was not renewed for its duration")
    } else {
        Takeover::Wait("waiting for it to let go")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_read_as_kubectl_writes_them() {
        let s = ShardSpec::new("a", "team=a").unwrap();
        assert!(s.matches(&labels(&[("team", "a")])));
        assert!(!s.matches(&labels(&[("team", "b")])));
        assert!(!s.matches(&labels(&[])));

        let s = ShardSpec::new("b", "team in (b, c),tier!=gold, !legacy").unwrap();
        assert!(s.matches(&labels(&[("team", "c"), ("tier", "silver")])));
        assert!(!s.matches(&labels(&[("team", "c"), ("tier", "gold")])));
        assert!(!s.matches(&labels(&[("team", "b"), ("legacy", "")])));

        let s = ShardSpec::new("c", "example.com/shard notin (a,b),region").unwrap();
        assert!(s.matches(&labels(&[("region", "eu")])));
        assert!(!s.matches(&labels(&[("region", "eu"), ("example.com/shard", "a")])));
        assert!(
            ShardSpec::new("d", "team==d")
                .unwrap()
                .matches(&labels(&[("team", "d")]))
        );
    }

    #[test]
    fn bad_selectors_and_names_are_refused_with_the_reason() {
        for bad in ["", " ", "team in (a", "team in a", "=a", "team=a b", "a,,b"] {
            assert!(parse_selector(bad).is_err(), "{bad:?} accepted");
        }
        assert!(
            ShardSpec::new("A", "x=y")
                .unwrap_err()
                .contains("lowercase")
        );
        assert!(ShardSpec::new("", "x=y").is_err());
        assert!(
            ShardSpec::new("a", "")
                .unwrap_err()
                .contains("needs a selector")
        );
    }

    #[test]
    fn a_claim_is_mine_free_or_held() {
        assert_eq!(claim("a", Some("a")), Claim::Mine);
        assert_eq!(claim("a", None), Claim::Free);
        assert_eq!(claim("a", Some("")), Claim::Free);
        assert_eq!(claim("a", Some("b")), Claim::Held("b"));
    }

    fn lease(holder: &str, transitions: i32, renewed: &str) -> LeaseRecord {
        LeaseRecord {
            holder: holder.into(),
            acquired: "t0".into(),
            transitions,
            renewed: renewed.into(),
            duration: Duration::from_secs(15),
            selector: Some("team=a".into()),
        }
    }

    /// The TDSet moved to team b; shard "a" (selector team=a) holds its claim.
    fn take(w: &mut Option<Watch>, l: Option<&LeaseRecord>, at: Instant) -> bool {
        matches!(
            may_take_over(w, "a", l, &labels(&[("team", "b")]), at),
            Takeover::Take(_)
        )
    }

    #[test]
    fn a_live_holder_keeps_its_claim() {
        let t0 = Instant::now();
        let mut w = None;
        assert!(!take(&mut w, Some(&lease("a-0", 1, "r1")), t0));
        for (i, r) in ["r2", "r3", "r4", "r5"].iter().enumerate() {
            let at = t0 + Duration::from_secs(10 * (i as u64 + 1));
            assert!(!take(&mut w, Some(&lease("a-0", 1, r)), at));
        }
    }

    #[test]
    fn a_holder_that_stopped_renewing_loses_its_claim_after_the_lease_duration() {
        let t0 = Instant::now();
        let mut w = None;
        let l = lease("a-0", 1, "r1");
        assert!(!take(&mut w, Some(&l), t0));
        assert!(!take(&mut w, Some(&l), t0 + Duration::from_secs(14)));
        assert!(take(&mut w, Some(&l), t0 + Duration::from_secs(15)));
        // Timed from the last renewal seen, not from the first look.
        let mut w = None;
        assert!(!take(&mut w, Some(&l), t0));
        let l2 = lease("a-0", 1, "r2");
        assert!(!take(&mut w, Some(&l2), t0 + Duration::from_secs(10)));
        assert!(!take(&mut w, Some(&l2), t0 + Duration::from_secs(24)));
        assert!(take(&mut w, Some(&l2), t0 + Duration::from_secs(25)));
    }

    #[test]
    fn a_new_leadership_after_the_claim_was_seen_lets_it_go_at_once() {
        let t0 = Instant::now();
        let mut w = None;
        assert!(!take(&mut w, Some(&lease("a-0", 1, "r1")), t0));
        // Another replica, or the same pod's new process (leader.rs counts a transition).
        assert!(take(&mut w, Some(&lease("a-1", 2, "r9")), t0));
        let mut w = None;
        assert!(!take(&mut w, Some(&lease("a-0", 1, "r1")), t0));
        assert!(take(&mut w, Some(&lease("a-0", 2, "r2")), t0));
    }

    #[test]
    fn a_released_or_deleted_lease_frees_the_claim() {
        let mut w = None;
        assert!(take(&mut w, Some(&lease("", 3, "")), Instant::now()));
        assert!(take(&mut None, None, Instant::now()));
    }

    #[test]
    fn a_holder_whose_selector_still_matches_is_never_taken_over() {
        let t0 = Instant::now();
        let still_a = labels(&[("team", "a")]);
        let mut w = None;
        for l in [
            lease("", 3, ""),
            lease("a-0", 1, "r1"),
            lease("a-1", 2, "r2"),
        ] {
            assert!(matches!(
                may_take_over(
                    &mut w,
                    "a",
                    Some(&l),
                    &still_a,
                    t0 + Duration::from_secs(60)
                ),
                Takeover::Wait(_)
            ));
        }
    }

    #[test]
    fn a_claim_that_changes_hands_is_watched_afresh() {
        let t0 = Instant::now();
        let mut w = None;
        assert!(!take(&mut w, Some(&lease("a-0", 1, "r1")), t0));
        // Shard c now holds it: its Lease is not a's next leadership.
        let c = LeaseRecord {
            selector: Some("team=c".into()),
            ..lease("c-0", 7, "q1")
        };
        let on = |w: &mut Option<Watch>, at| {
            matches!(
                may_take_over(w, "c", Some(&c), &labels(&[("team", "b")]), at),
                Takeover::Take(_)
            )
        };
        assert!(!on(&mut w, t0 + Duration::from_secs(1)));
        assert!(!on(&mut w, t0 + Duration::from_secs(2)));
    }
}
