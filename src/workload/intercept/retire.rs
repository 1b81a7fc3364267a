//! A slice that leaves the path is retired before it goes: applied again with no endpoint
//! (kube-proxy sends the Service to its own endpoints alone) and the instant it left, and
//! deleted `RETIRE_FOR` later. While it exists its proxy ports are taken, so a port is handed
//! to another Service only after the proxy has stopped routing it: the proxy routes every
//! slice of the operator's there is, and late connections (kube-proxy on another node a moment
//! behind, held ones waiting for the proxy's view of the woken pods) reach the right Service.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{MANAGED_BY, MANAGED_BY_LABEL, OWN_ANNOTATIONS, SERVICE_NAME_LABEL, TDSET_LABEL};

/// When a slice left the path (RFC 3339), on the slice itself: a restart or a new leader
/// goes on from it.
pub const RETIRED_ANNOTATION: &str = "schedule.rs/wake-retired-at";

/// How long a retired slice stays: the longest hold (60 s) and kube-proxy's lag.
pub fn retire_for() -> Duration {
    Duration::seconds(90)
}

/// When `slice` left the path; `None`: it is in the path. A value that does not read as an
/// instant counts as long ago (the slice goes).
pub fn retired_at(slice: &EndpointSlice) -> Option<DateTime<Utc>> {
    let at = slice
        .metadata
        .annotations
        .as_ref()?
        .get(RETIRED_ANNOTATION)?;
    Some(
        DateTime::parse_from_rfc3339(at)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or(DateTime::<Utc>::MIN_UTC),
    )
}

/// What becomes of one slice of the operator's that is no longer wanted in the path.
#[derive(Clone, Debug, PartialEq)]
pub enum Leaving {
    /// Apply this: the slice with no endpoint, retired now.
    Retire(Box<EndpointSlice>),
    /// Retired long enough: delete it (by name).
    Remove(String),
    /// Retired, and kept this much longer.
    Wait(std::time::Duration),
}

pub fn leave(slice: &EndpointSlice, now: DateTime<Utc>) -> Leaving {
    let name = slice.metadata.name.clone().unwrap_or_default();
    match retired_at(slice) {
        // Retired "later than now" (a replica's clock ahead, a fake clock): retired again now,
        // so a slice never holds its ports for longer than `retire_for`.
        Some(at) if at > now => Leaving::Retire(Box::new(retired(slice, now))),
        Some(at) => {
            let left = (at + retire_for()) - now;
            match left.to_std() {
                Ok(left) if !left.is_zero() => Leaving::Wait(left),
                _ => Leaving::Remove(name),
            }
        }
        None => Leaving::Retire(Box::new(retired(slice, now))),
    }
}

/// `slice` as the operator applies it retired: its own labels, annotations and owner, its
/// ports (still taken), no endpoint, and when it left.
fn retired(slice: &EndpointSlice, now: DateTime<Utc>) -> EndpointSlice {
    let meta = &slice.metadata;
    let pick =
        |map: &Option<BTreeMap<String, String>>, keys: &[&str]| -> BTreeMap<String, String> {
            (map.iter().flatten())
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
    let mut annotations = pick(&meta.annotations, &OWN_ANNOTATIONS);
    annotations.insert(RETIRED_ANNOTATION.to_string(), now.to_rfc3339());
    let mut labels = pick(&meta.labels, &[SERVICE_NAME_LABEL, TDSET_LABEL]);
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
    EndpointSlice {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: meta.owner_references.clone(),
            ..Default::default()
        },
        address_type: slice.address_type.clone(),
        endpoints: Vec::new(),
        ports: slice.ports.clone(),
    }
}

/// Proxy ports a change of one of the operator's slices let go of without retiring them: a
/// slice deleted (its TDSet deleted, the garbage collector taking it; or a retired one past
/// its time) or applied with fewer ports (its Service's port renamed or removed). The proxy
/// routes a port for `retire_for` after its route went, so those ports are not handed to
/// another Service for what is left of that: `retire_for` from now, or, for a slice retired
/// at `t`, until `t + retire_for`. `old`: the slice before (None: not seen), `new`: after
/// (None: deleted). The Service (`namespace/name`) they were its, the ports, and how long
/// they stay taken; None: nothing let go of that the proxy may still route.
pub fn ports_left(
    old: Option<&EndpointSlice>,
    new: Option<&EndpointSlice>,
    now: DateTime<Utc>,
) -> Option<(String, Vec<u16>, std::time::Duration)> {
    let ports = |s: &EndpointSlice| -> Vec<u16> {
        (s.ports.iter().flatten())
            .filter_map(|p| p.port.and_then(|p| u16::try_from(p).ok()))
            .collect()
    };
    let old = old?;
    let kept = new.map(ports).unwrap_or_default();
    let left: Vec<u16> = (ports(old).into_iter())
        .filter(|p| !kept.contains(p))
        .collect();
    if left.is_empty() {
        return None;
    }
    let until = match retired_at(old) {
        Some(at) if at <= now => at + retire_for(),
        _ => now + retire_for(),
    };
    let hold = (until - now).to_std().ok().filter(|d| !d.is_zero())?;
    let labels = old.metadata.labels.as_ref();
    let service = labels.and_then(|l| l.get(SERVICE_NAME_LABEL))?;
    let namespace = old.metadata.namespace.as_ref()?;
    Some((format!("{namespace}/{service}"), left, hold))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::EndpointPort;

    fn slice(annotations: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-tdset-wake-ipv4", "namespace": "ns",
                         "resourceVersion": "7", "uid": "u",
                         "labels": {SERVICE_NAME_LABEL: "web", TDSET_LABEL: "t",
                                    MANAGED_BY_LABEL: MANAGED_BY, "tenant": "x"},
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "schedule.rs/v1", "kind": "TDSet",
                                              "name": "t", "uid": "uid-t", "controller": true}]},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 20001, "protocol": "TCP"}],
        }))
        .unwrap()
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_slice_leaving_the_path_is_emptied_keeps_its_ports_and_goes_90_s_later() {
        let now = at("2026-12-02T03:00:00Z");
        let Leaving::Retire(r) = leave(
            &slice(serde_json::json!({"schedule.rs/wake-hold-seconds": "20"})),
            now,
        ) else {
            panic!("a slice in the path is retired first");
        };
        assert!(r.endpoints.is_empty(), "nothing of the proxy's in the path");
        assert_eq!(
            r.ports.as_ref().unwrap()[0].port,
            Some(20001),
            "its port still taken"
        );
        assert_eq!(retired_at(&r), Some(now));
        let a = r.metadata.annotations.as_ref().unwrap();
        assert_eq!(a["schedule.rs/wake-hold-seconds"], "20");
        let l = r.metadata.labels.as_ref().unwrap();
        assert_eq!(l.get("tenant"), None, "only the operator's own labels");
        assert_eq!(l[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(r.metadata.resource_version, None, "an apply, not an update");
        assert_eq!(
            r.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-t"
        );

        let retired = slice(serde_json::json!({RETIRED_ANNOTATION: "2026-12-02T03:00:00Z"}));
        assert_eq!(
            leave(&retired, at("2026-12-02T03:01:00Z")),
            Leaving::Wait(std::time::Duration::from_secs(30))
        );
        assert_eq!(
            leave(&retired, at("2026-12-02T03:01:30Z")),
            Leaving::Remove("web-tdset-wake-ipv4".into())
        );
        let early = at("2026-12-02T02:59:00Z");
        assert!(
            matches!(leave(&retired, early), Leaving::Retire(r) if retired_at(&r) == Some(early)),
            "retired in the future: retired again now"
        );
        assert_eq!(
            leave(
                &slice(serde_json::json!({RETIRED_ANNOTATION: "yesterday"})),
                now
            ),
            Leaving::Remove("web-tdset-wake-ipv4".into()),
            "an instant that does not read: long ago"
        );
    }

    #[test]
    fn ports_a_slice_lets_go_of_stay_taken_for_as_long_as_the_proxy_may_route_them() {
        let now = at("2026-12-02T03:00:00Z");
        let web = slice(serde_json::json!({}));
        let ninety = std::time::Duration::from_secs(90);
        // Deleted in the path (its TDSet deleted): 90 s from now.
        assert_eq!(
            ports_left(Some(&web), None, now),
            Some(("ns/web".into(), vec![20001], ninety))
        );
        // Deleted once retired: what is left of its 90 s; none left, nothing.
        let retired = slice(serde_json::json!({RETIRED_ANNOTATION: "2026-12-02T02:59:00Z"}));
        assert_eq!(
            ports_left(Some(&retired), None, now),
            Some((
                "ns/web".into(),
                vec![20001],
                std::time::Duration::from_secs(30)
            ))
        );
        let long_ago = slice(serde_json::json!({RETIRED_ANNOTATION: "2026-12-02T02:58:00Z"}));
        assert_eq!(ports_left(Some(&long_ago), None, now), None);
        // Applied with a port dropped (its Service port renamed): that port.
        let mut two = web.clone();
        two.ports.as_mut().unwrap().push(EndpointPort {
            name: Some("admin".into()),
            port: Some(20002),
            protocol: Some("TCP".into()),
            app_protocol: None,
        });
        assert_eq!(
            ports_left(Some(&two), Some(&web), now),
            Some(("ns/web".into(), vec![20002], ninety))
        );
        // Unchanged, or never seen before: nothing.
        assert_eq!(ports_left(Some(&web), Some(&web), now), None);
        assert_eq!(ports_left(None, Some(&web), now), None);
    }
}
