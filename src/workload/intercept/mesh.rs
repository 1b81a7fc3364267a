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
    /// Some port of `spec.portLevelMtls` is PERMISSIVE or DISABLE: the proxy's connection may be
    /// let in there (the operator does not tell which port a Service's targetPort is on).
    /// Istio applies port-level settings only on a policy that selects workloads.
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
    /// Why those of Istio's root namespace could not be read (not granted), if so.
    pub unreadable: Option<&'a str>,
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
    /// Istio's sidecar, and the policies that would decide could not be read (why).
    IstioUnknown { why: String },
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mesh::IstioAmbient { on } => write!(
                f,
                "is in Istio's ambient mesh (istio.io/dataplane-mode=ambient on the {on}): \
                 ztunnel sends an ambient client to the Service's pods, never to the wake \
                 proxy's addresses in its EndpointSlices, so its clients would reach nothing \
                 while it sleeps. Wake on request cannot serve ambient clients: leave the \
                 Service out of wakeOnRequest, or the namespace out of the ambient mesh"
            ),
            Mesh::IstioUnknown { why } => write!(
                f,
                "has Istio's sidecar, and {why}, so whether STRICT mTLS would refuse the wake \
                 proxy's plain connection is not known: refused rather than risk a Service that \
                 answers nobody while asleep"
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

/// Ambient is the clients' affair: ztunnel sends an ambient client to the Service's pods, never
/// to another address of its EndpointSlices. The namespace in the ambient mesh (its other pods,
/// the Service's likeliest clients, are ambient whatever the workload's pods say) or the
/// workload's pods in it: refused. Ambient clients in other namespaces are not seen here.
fn istio_ambient(seen: &MeshSeen<'_>) -> Option<Mesh> {
    const MODE: &str = "istio.io/dataplane-mode";
    if seen.namespace.label(MODE) == Some("ambient") {
        return Some(Mesh::IstioAmbient { on: "namespace" });
    }
    (seen.pods.and_then(|p| p.label(MODE)) == Some("ambient"))
        .then_some(Mesh::IstioAmbient { on: "pods" })
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

/// The mTLS mode in force for the workload, as Istio decides it: a policy selecting the
/// workload, else its namespace's, else the mesh's (istio-system's); UNSET gives way to the
/// next, and none at all is PERMISSIVE. STRICT refuses the proxy, unless the selecting policy
/// lets some port in (`portLevelMtls`: that may be the Service's). Several at one tier: Istio
/// takes the oldest; the operator does not order them, so a STRICT one counts.
fn istio_strict(seen: &MeshSeen<'_>) -> Option<Mesh> {
    if !sidecar_injected(seen) {
        return None;
    }
    let all = seen.peer_authentications;
    let set = |p: &&PeerAuthentication| !matches!(p.mode.as_deref(), None | Some("UNSET"));
    let strict = |p: &&PeerAuthentication| p.mode.as_deref() == Some("STRICT");
    let selecting: Vec<&PeerAuthentication> = match seen.pods.and_then(|p| p.labels) {
        Some(have) => (all.iter())
            .filter(|p| !p.mesh_wide)
            .filter(|p| {
                (p.selector.as_ref())
                    .is_some_and(|want| want.iter().all(|(k, v)| have.get(k) == Some(v)))
            })
            .collect(),
        // The pods' labels unknown (a group's many workloads): a selecting policy may be
        // theirs. A STRICT one refuses; a lenient one decides nothing (it may be another
        // workload's, and must not hide the namespace's STRICT).
        None => {
            if let Some(p) = all
                .iter()
                .find(|p| !p.mesh_wide && p.selector.is_some() && strict(p))
            {
                return Some(Mesh::IstioStrict { by: p.name.clone() });
            }
            Vec::new()
        }
    };
    let ports_let_in = selecting.iter().any(|p| p.some_port_lenient);
    let namespace = (all.iter()).filter(|p| !p.mesh_wide && p.selector.is_none());
    let mesh = (all.iter()).filter(|p| p.mesh_wide && p.selector.is_none());
    let tiers: [Vec<&PeerAuthentication>; 3] = [
        selecting.into_iter().filter(set).collect(),
        namespace.filter(set).collect(),
        mesh.filter(set).collect(),
    ];
    for (at, tier) in tiers.iter().enumerate() {
        let Some(first) = tier.first() else {
            // The mesh's tier not read: unknown, unless a port is let in.
            if at == 2
                && let Some(why) = seen.unreadable
                && !ports_let_in
            {
                return Some(Mesh::IstioUnknown {
                    why: why.to_string(),
                });
            }
            continue;
        };
        let decides = tier.iter().find(|p| strict(p)).unwrap_or(first);
        return (strict(decides) && !ports_let_in).then(|| Mesh::IstioStrict {
            by: decides.name.clone(),
        });
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
                unreadable: None,
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
        // The namespace's other pods, the likeliest clients, are ambient whatever these say.
        assert_eq!(
            seen(Some(&ambient), &none),
            Some(Mesh::IstioAmbient { on: "namespace" })
        );
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
                unreadable: None,
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
                unreadable: None,
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

    #[test]
    fn port_level_mtls_and_unknown_labels_and_unread_policies_as_the_review_found_them() {
        let injected = map(&[("istio-injection", "enabled")]);
        let app = map(&[("app", "web")]);
        let decide = |pods: Option<&BTreeMap<String, String>>,
                      pas: &[PeerAuthentication],
                      unreadable: Option<&str>| {
            black_hole(&MeshSeen {
                namespace: Marks {
                    labels: Some(&injected),
                    annotations: None,
                },
                pods: Some(Marks {
                    labels: pods,
                    annotations: None,
                }),
                peer_authentications: pas,
                unreadable,
            })
        };
        let mesh_strict = strict("istio-system/default", None, "STRICT");
        // What the refusal tells users to write: a policy selecting the workload, its mode
        // UNSET, one port PERMISSIVE. Let in.
        let web_port = PeerAuthentication {
            some_port_lenient: true,
            ..strict("shop/web", Some(&[("app", "web")]), "UNSET")
        };
        assert_eq!(
            decide(Some(&app), &[mesh_strict.clone(), web_port.clone()], None),
            None
        );
        // Port-level settings on a policy that selects nothing: Istio ignores them.
        let ns_ports = PeerAuthentication {
            some_port_lenient: true,
            ..strict("shop/default", None, "STRICT")
        };
        assert!(decide(Some(&app), &[ns_ports], None).is_some());
        // The pods' labels unknown: another workload's PERMISSIVE does not hide the
        // namespace's STRICT; a selecting STRICT may be theirs.
        let ns_strict = strict("shop/default", None, "STRICT");
        let api_permissive = strict("shop/api", Some(&[("app", "api")]), "PERMISSIVE");
        assert_eq!(
            decide(None, &[ns_strict, api_permissive.clone()], None),
            Some(Mesh::IstioStrict {
                by: "shop/default".into()
            })
        );
        let api_strict = strict("shop/api", Some(&[("app", "api")]), "STRICT");
        assert!(decide(None, &[api_strict], None).is_some());
        assert_eq!(decide(None, &[api_permissive], None), None);
        // istio-system's not read: unknown, refused, unless the namespace decides.
        let unread = Some("istio-system's PeerAuthentications cannot be read");
        assert!(matches!(
            decide(Some(&app), &[], unread),
            Some(Mesh::IstioUnknown { .. })
        ));
        let ns_permissive = strict("shop/default", None, "PERMISSIVE");
        assert_eq!(decide(Some(&app), &[ns_permissive], unread), None);
    }
}
