//! Meshes that would black-hole a Service asleep behind the wake proxy, as far as the operator
//! can see them: the namespace's and the workload's pod template's labels and annotations,
//! and Istio's PeerAuthentications. Where one would, wake on request is refused for the
//! TDSet's Services before they sleep, with the mesh named and what to do; never a Service
//! whose clients silently reach nothing. Pure.
//!
//! - Istio ambient: ztunnel builds a Service's endpoints from its pods, not from EndpointSlices,
//!   so an ambient client never reaches the proxy's endpoints (istio#60951).
//! - Istio sidecars under STRICT mTLS: the proxy, outside the mesh, relays in plain TCP, which
//!   the pods' sidecars refuse (istio#37431).
//! - Linkerd with a default inbound policy that asks for authenticated clients (or denies):
//!   the proxy's unmeshed connection is refused the same way.

use std::collections::BTreeMap;
use std::fmt;

/// What a mesh reads of an object: its labels and annotations.
#[derive(Clone, Copy, Debug, Default)]
pub struct Marks<'a> {
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

impl<'a> Marks<'a> {
    fn label(&self, key: &str) -> Option<&'a str> {
        self.labels.and_then(|l| l.get(key)).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// A label, else an annotation of that name (Istio takes `sidecar.istio.io/inject` as
    /// either).
    fn mark(&self, key: &str) -> Option<&'a str> {
        self.label(key).or_else(|| self.annotation(key))
    }
}

/// An Istio PeerAuthentication as the decision needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerAuthentication {
    /// `namespace/name`, for the message.
    pub name: String,
    /// In Istio's root namespace: mesh-wide (when it selects no workload).
    pub mesh_wide: bool,
    /// `spec.selector.matchLabels`; None: every workload of its namespace.
    pub selector: Option<BTreeMap<String, String>>,
    /// `spec.mtls.mode`: STRICT, PERMISSIVE, DISABLE, UNSET (or none: UNSET).
    pub mode: Option<String>,
    /// Some port of `spec.portLevelMtls` is not STRICT: the proxy's connection may be let in
    /// there (the operator cannot tell which port a Service's targetPort is on).
    pub some_port_lenient: bool,
}

/// What the operator sees around one TDSet's workloads.
#[derive(Clone, Copy, Debug, Default)]
pub struct MeshSeen<'a> {
    pub namespace: Marks<'a>,
    /// The workloads' pod template (None: not known, a group's many).
    pub pods: Option<Marks<'a>>,
    /// The PeerAuthentications of the TDSet's namespace and of Istio's root namespace.
    pub peer_authentications: &'a [PeerAuthentication],
}

/// A mesh that would black-hole the TDSet's Services asleep, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mesh {
    /// Istio's ambient mode; where it was set (`namespace` or `pods`).
    IstioAmbient { on: &'static str },
    /// Istio sidecars under STRICT mTLS, by this PeerAuthentication.
    IstioStrict { by: String },
    /// Linkerd's proxies with this default inbound policy; where it was set.
    LinkerdAuthenticated { policy: String, on: &'static str },
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mesh::IstioAmbient { on } => write!(
                f,
                "is in Istio's ambient mesh (istio.io/dataplane-mode=ambient on the {on}): \
                 ztunnel builds its endpoints from pods, not EndpointSlices, so an ambient client \
                 would never reach the wake proxy and the Service would answer nobody while \
                 asleep. Label the workload's pods istio.io/dataplane-mode=none, or leave the \
                 Service out of wakeOnRequest"
            ),
            Mesh::IstioStrict { by } => write!(
                f,
                "is in Istio's mesh with STRICT mTLS (PeerAuthentication {by}): the pods' \
                 sidecars refuse the wake proxy's plain connection, so a woken request would \
                 never reach them. Set portLevelMtls to PERMISSIVE for the Service's target \
                 port in a PeerAuthentication selecting the workload, or leave the Service out \
                 of wakeOnRequest"
            ),
            Mesh::LinkerdAuthenticated { policy, on } => write!(
                f,
                "is in Linkerd's mesh with the default inbound policy {policy} (on the {on}): \
                 the pods' proxies refuse the wake proxy's unmeshed connection, so a woken \
                 request would never reach them. Allow unauthenticated clients on the \
                 Service's port (a Server and an AuthorizationPolicy, or \
                 config.linkerd.io/default-inbound-policy: all-unauthenticated), or leave the \
                 Service out of wakeOnRequest"
            ),
        }
    }
}

/// The mesh that would black-hole the TDSet's Services asleep behind the proxy, if any.
pub fn black_hole(seen: &MeshSeen<'_>) -> Option<Mesh> {
    istio_ambient(seen)
        .or_else(|| istio_strict(seen))
        .or_else(|| linkerd_authenticated(seen))
}

fn istio_ambient(seen: &MeshSeen<'_>) -> Option<Mesh> {
    const MODE: &str = "istio.io/dataplane-mode";
    match seen.pods.and_then(|p| p.label(MODE)) {
        Some("ambient") => Some(Mesh::IstioAmbient { on: "pods" }),
        // The pods opt out (or name another mode): the namespace's label does not hold.
        Some(_) => None,
        None => (seen.namespace.label(MODE) == Some("ambient"))
            .then_some(Mesh::IstioAmbient { on: "namespace" }),
    }
}

/// Whether Istio injects its sidecar into the workload's pods: by the pods' own mark, else by
/// the namespace's (`istio-injection`, or a revision label). Only then do its
/// PeerAuthentications matter.
pub fn sidecar_injected(seen: &MeshSeen<'_>) -> bool {
    match seen.pods.and_then(|p| p.mark("sidecar.istio.io/inject")) {
        Some(v) => v == "true",
        None => match seen.namespace.label("istio-injection") {
            Some(v) => v == "enabled",
            None => seen.namespace.label("istio.io/rev").is_some(),
        },
    }
}

/// The PeerAuthentication in force for the workload, as Istio picks it: one selecting the
/// workload, else its namespace's, else the mesh's; one whose mode is UNSET gives way to the
/// next. STRICT there, with no port let in otherwise, refuses the proxy.
fn istio_strict(seen: &MeshSeen<'_>) -> Option<Mesh> {
    if !sidecar_injected(seen) {
        return None;
    }
    let pod_labels = seen.pods.and_then(|p| p.labels);
    let selects = |p: &PeerAuthentication| match &p.selector {
        None => false,
        // Without the pods' labels, a policy that selects some workloads may be theirs:
        // taken, so a STRICT one is never missed.
        Some(want) => {
            pod_labels.is_none_or(|have| want.iter().all(|(k, v)| have.get(k) == Some(v)))
        }
    };
    let all = seen.peer_authentications;
    let tiers: [Vec<&PeerAuthentication>; 3] = [
        all.iter().filter(|p| !p.mesh_wide && selects(p)).collect(),
        all.iter()
            .filter(|p| !p.mesh_wide && p.selector.is_none())
            .collect(),
        all.iter()
            .filter(|p| p.mesh_wide && p.selector.is_none())
            .collect(),
    ];
    for tier in tiers {
        let mut set: Vec<&&PeerAuthentication> = tier
            .iter()
            .filter(|p| !matches!(p.mode.as_deref(), None | Some("UNSET")))
            .collect();
        // Several at one tier: Istio takes the oldest; the operator cannot order them by age
        // here, so any STRICT one counts (a refusal that names it beats a silent black hole).
        set.sort_by_key(|p| p.mode.as_deref() != Some("STRICT"));
        if let Some(p) = set.first() {
            return (p.mode.as_deref() == Some("STRICT") && !p.some_port_lenient)
                .then(|| Mesh::IstioStrict { by: p.name.clone() });
        }
    }
    None
}

fn linkerd_authenticated(seen: &MeshSeen<'_>) -> Option<Mesh> {
    const INJECT: &str = "linkerd.io/inject";
    const POLICY: &str = "config.linkerd.io/default-inbound-policy";
    let injected = match seen.pods.and_then(|p| p.annotation(INJECT)) {
        Some(v) => v == "enabled" || v == "ingress",
        None => seen.namespace.annotation(INJECT) == Some("enabled"),
    };
    if !injected {
        return None;
    }
    let (policy, on) = match seen.pods.and_then(|p| p.annotation(POLICY)) {
        Some(p) => (p, "pods"),
        None => (seen.namespace.annotation(POLICY)?, "namespace"),
    };
    matches!(
        policy,
        "all-authenticated" | "cluster-authenticated" | "deny"
    )
    .then(|| Mesh::LinkerdAuthenticated {
        policy: policy.to_string(),
        on,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn strict(name: &str, selector: Option<&[(&str, &str)]>, mode: &str) -> PeerAuthentication {
        PeerAuthentication {
            name: name.into(),
            mesh_wide: name.starts_with("istio-system/"),
            selector: selector.map(map),
            mode: Some(mode.into()),
            some_port_lenient: false,
        }
    }

    #[test]
    fn istio_ambient_on_the_namespace_or_the_pods_is_refused_unless_the_pods_opt_out() {
        let ambient = map(&[("istio.io/dataplane-mode", "ambient")]);
        let none = map(&[("istio.io/dataplane-mode", "none")]);
        let app = map(&[("app", "web")]);
        let seen = |ns: Option<&BTreeMap<String, String>>, pods: &BTreeMap<String, String>| {
            let pods = Marks {
                labels: Some(pods),
                annotations: None,
            };
            black_hole(&MeshSeen {
                namespace: Marks {
                    labels: ns,
                    annotations: None,
                },
                pods: Some(pods),
                peer_authentications: &[],
            })
        };
        assert_eq!(
            seen(Some(&ambient), &app),
            Some(Mesh::IstioAmbient { on: "namespace" })
        );
        assert_eq!(
            seen(None, &ambient),
            Some(Mesh::IstioAmbient { on: "pods" })
        );
        assert_eq!(seen(Some(&ambient), &none), None, "the pods opt out");
        assert_eq!(seen(None, &app), None);
    }

    #[test]
    fn istio_sidecars_under_strict_mtls_are_refused_as_istio_picks_the_policy() {
        let injected = map(&[("istio-injection", "enabled")]);
        let app = map(&[("app", "web")]);
        let decide = |ns: &BTreeMap<String, String>,
                      pods: &BTreeMap<String, String>,
                      pas: &[PeerAuthentication]| {
            black_hole(&MeshSeen {
                namespace: Marks {
                    labels: Some(ns),
                    annotations: None,
                },
                pods: Some(Marks {
                    labels: Some(pods),
                    annotations: None,
                }),
                peer_authentications: pas,
            })
        };
        let mesh_strict = strict("istio-system/default", None, "STRICT");
        assert_eq!(
            decide(&injected, &app, std::slice::from_ref(&mesh_strict)),
            Some(Mesh::IstioStrict {
                by: "istio-system/default".into()
            })
        );
        // The namespace's PERMISSIVE overrides the mesh's STRICT; the workload's STRICT the
        // namespace's; a workload policy UNSET gives way.
        let ns_permissive = strict("shop/default", None, "PERMISSIVE");
        assert_eq!(
            decide(
                &injected,
                &app,
                &[mesh_strict.clone(), ns_permissive.clone()]
            ),
            None
        );
        let web_strict = strict("shop/web", Some(&[("app", "web")]), "STRICT");
        assert!(
            decide(
                &injected,
                &app,
                &[ns_permissive.clone(), web_strict.clone()]
            )
            .is_some()
        );
        let web_unset = strict("shop/web", Some(&[("app", "web")]), "UNSET");
        assert_eq!(
            decide(&injected, &app, &[ns_permissive.clone(), web_unset]),
            None
        );
        // A policy for other workloads is not this one's.
        let api_strict = strict("shop/api", Some(&[("app", "api")]), "STRICT");
        assert_eq!(decide(&injected, &app, &[api_strict]), None);
        // A port let in: the proxy may be allowed there.
        let lenient = PeerAuthentication {
            some_port_lenient: true,
            ..web_strict.clone()
        };
        assert_eq!(decide(&injected, &app, &[lenient]), None);
        // No sidecar: nothing enforces it.
        let no_sidecar = map(&[("sidecar.istio.io/inject", "false"), ("app", "web")]);
        assert_eq!(
            decide(&injected, &no_sidecar, std::slice::from_ref(&mesh_strict)),
            None
        );
        let mesh = std::slice::from_ref(&mesh_strict);
        assert_eq!(decide(&map(&[]), &app, mesh), None);
        // Injected by a revision label, or by the pods' own mark.
        assert!(decide(&map(&[("istio.io/rev", "1-24")]), &app, mesh).is_some());
        let marked = map(&[("sidecar.istio.io/inject", "true"), ("app", "web")]);
        assert!(decide(&map(&[]), &marked, &[mesh_strict]).is_some());
    }

    #[test]
    fn linkerd_asking_for_authenticated_clients_is_refused() {
        let seen = |ns: &BTreeMap<String, String>, pods: &BTreeMap<String, String>| {
            black_hole(&MeshSeen {
                namespace: Marks {
                    labels: None,
                    annotations: Some(ns),
                },
                pods: Some(Marks {
                    labels: None,
                    annotations: Some(pods),
                }),
                peer_authentications: &[],
            })
        };
        let meshed = map(&[
            ("linkerd.io/inject", "enabled"),
            (
                "config.linkerd.io/default-inbound-policy",
                "all-authenticated",
            ),
        ]);
        assert_eq!(
            seen(&meshed, &map(&[])),
            Some(Mesh::LinkerdAuthenticated {
                policy: "all-authenticated".into(),
                on: "namespace"
            })
        );
        // The default policy lets the proxy in; so do pods left out of the mesh.
        let open = map(&[("linkerd.io/inject", "enabled")]);
        assert_eq!(seen(&open, &map(&[])), None);
        assert_eq!(
            seen(&meshed, &map(&[("linkerd.io/inject", "disabled")])),
            None
        );
        let pods_deny = map(&[("config.linkerd.io/default-inbound-policy", "deny")]);
        assert_eq!(
            seen(&open, &pods_deny),
            Some(Mesh::LinkerdAuthenticated {
                policy: "deny".into(),
                on: "pods"
            })
        );
    }
}
