//! The data plane of wake on request, on the wire: the Services `wakeOnRequest` names, the
//! wake proxy's ready pods (its own Service's slices), a Service's own endpoints, and the
//! operator's EndpointSlices, applied under the operator's field manager and deleted by name.
//! Read live, and only while a TDSet's slices are wanted (the operator's own slices are
//! watched: `state`'s `wake_slices`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use tracing::{debug, warn};

use crate::api::ScaleTargetRef;
use crate::error::{Error, Result};
use crate::workload::intercept::{
    MANAGED_BY, MANAGED_BY_LABEL, PeerAuthentication, ProxyAddress, SERVICE_NAME_LABEL, serves,
};

use crate::workload::owned::FIELD_MANAGER;

/// Slices read per page. A slice is at most what etcd stores in one object (~1.5 MB, a tenant
/// may write its own for its Service), so a page is at most ~15 MB, whatever the namespace holds.
const PAGE: u32 = 10;
/// Pages read for one Service before its own endpoints are taken as not ready (the proxy stays
/// in the path, which is safe): the EndpointSlice controller writes 100 endpoints per slice,
/// so this is 100 000 endpoints, and a tenant's pile of empty slices costs a bounded read.
const MAX_PAGES: usize = 1000 / PAGE as usize;

pub(crate) async fn service(client: &Client, ns: &str, name: &str) -> Result<Option<Service>> {
    Api::<Service>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading Service {ns}/{name}")))
}

/// Reads the slices `labels` picks in `ns` one page at a time, handing each page to `visit`
/// until it returns `true` (found: stop) or the pages end. No page outlives its visit.
async fn visit_slices(
    client: &Client,
    ns: &str,
    labels: &str,
    mut visit: impl FnMut(&[EndpointSlice]) -> bool,
) -> Result<Visited> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let mut params = ListParams::default().labels(labels).limit(PAGE);
    for _ in 0..MAX_PAGES {
        let page = api
            .list(&params)
            .await
            .map_err(Error::kube(format!("listing EndpointSlices ({labels})")))?;
        if visit(&page.items) {
            return Ok(Visited::Found);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(Visited::All),
        }
    }
    Ok(Visited::Capped)
}

#[derive(Debug, PartialEq)]
enum Visited {
    Found,
    All,
    Capped,
}

/// Whether Service `name`'s own slices have a ready endpoint: those of the managers the proxy
/// trusts (`trusted`), asked for by label, so a slice anyone else writes for the Service is
/// never read (it could neither take the proxy out of the path nor fill the operator).
pub(crate) async fn own_ready(
    client: &Client,
    ns: &str,
    name: &str,
    trusted: &[String],
) -> Result<bool> {
    // The operator's own slices are never the Service's, whatever the flag says.
    let trusted: Vec<&str> = (trusted.iter().map(String::as_str))
        .filter(|m| *m != MANAGED_BY && !m.is_empty())
        .collect();
    if trusted.is_empty() {
        return Ok(false);
    }
    let labels = format!(
        "{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL} in ({})",
        trusted.join(",")
    );
    let visited = visit_slices(client, ns, &labels, |page| {
        page.iter().flat_map(|s| &s.endpoints).any(serves)
    })
    .await?;
    if visited == Visited::Capped {
        warn!(
            namespace = ns,
            service = name,
            pages = MAX_PAGES,
            "the Service has more slices than are read for it; its own endpoints are taken as not ready and the proxy stays in its path"
        );
    }
    Ok(visited == Visited::Found)
}

/// The pod template's metadata (labels and annotations) of the Deployment, StatefulSet or
/// ReplicaSet `target` names; None for another kind, or one not found.
pub(crate) async fn template_meta(
    client: &Client,
    ns: &str,
    target: &ScaleTargetRef,
) -> Result<Option<ObjectMeta>> {
    async fn template<K>(client: &Client, ns: &str, name: &str) -> Result<Option<K>>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(Error::kube(format!("reading {} {ns}/{name}", K::kind(&()))))
    }
    if target.api_version != "apps/v1" {
        return Ok(None);
    }
    let name = target.name.as_str();
    let meta = match target.kind.as_str() {
        "Deployment" => template::<Deployment>(client, ns, name)
            .await?
            .and_then(|d| d.spec?.template.metadata),
        "StatefulSet" => template::<StatefulSet>(client, ns, name)
            .await?
            .and_then(|d| d.spec?.template.metadata),
        "ReplicaSet" => template::<ReplicaSet>(client, ns, name)
            .await?
            .and_then(|d| d.spec?.template?.metadata),
        _ => None,
    };
    Ok(meta)
}

/// The namespace's metadata, as a mesh reads it (labels, annotations). None when it cannot be
/// read (not granted: a mesh marked on the namespace is then not seen, and said in the log).
pub(crate) async fn namespace_meta(client: &Client, ns: &str) -> Result<Option<ObjectMeta>> {
    match Api::<Namespace>::all(client.clone()).get_opt(ns).await {
        Ok(found) => Ok(found.map(|n| n.metadata)),
        Err(e) if is_forbidden(&e) => {
            debug!(
                namespace = ns,
                "the namespace cannot be read (get namespaces not granted): its mesh labels are not seen"
            );
            Ok(None)
        }
        Err(e) => Err(Error::kube(format!("reading Namespace {ns}"))(e)),
    }
}

/// Istio's root namespace, where a mesh-wide PeerAuthentication lives (Istio's default).
pub(crate) const ISTIO_ROOT_NAMESPACE: &str = "istio-system";

/// How many pages of one namespace's PeerAuthentications are read (100 a page): past them the
/// rest is taken as not read.
const PEER_AUTHENTICATION_PAGES: usize = 10;

/// The Istio PeerAuthentications of `ns` and of Istio's root namespace (`security.istio.io/v1`,
/// or `v1beta1` where an older Istio serves only that; none where Istio's CRD is not served),
/// and why some could not be read (not granted, more than `PEER_AUTHENTICATION_PAGES` pages):
/// the decision takes those as unknown, never as absent.
pub(crate) async fn peer_authentications(
    client: &Client,
    ns: &str,
) -> Result<(Vec<PeerAuthentication>, Option<String>)> {
    let mut out = Vec::new();
    let mut unreadable = None;
    let mut places = vec![ns];
    if ns != ISTIO_ROOT_NAMESPACE {
        places.push(ISTIO_ROOT_NAMESPACE);
    }
    'versions: for version in ["v1", "v1beta1"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("security.istio.io", version, "PeerAuthentication"),
            "peerauthentications",
        );
        for place in &places {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), place, &resource);
            let mut params = ListParams::default().limit(100);
            for page in 0.. {
                if page == PEER_AUTHENTICATION_PAGES {
                    unreadable = Some(format!(
                        "{place} holds more PeerAuthentications than are read"
                    ));
                    break;
                }
                let listed = match api.list(&params).await {
                    Ok(l) => l,
                    // This version is not served: the next, or none at all.
                    Err(e) if is_not_served(&e) => continue 'versions,
                    Err(e) if is_forbidden(&e) => {
                        debug!(
                            namespace = place,
                            "Istio's PeerAuthentications may not be read"
                        );
                        unreadable = Some(format!(
                            "its PeerAuthentications in {place} may not be read (grant the \
                             operator list on peerauthentications.security.istio.io there)"
                        ));
                        break;
                    }
                    Err(e) => {
                        return Err(Error::kube(format!(
                            "listing PeerAuthentications in {place}"
                        ))(e));
                    }
                };
                out.extend(listed.items.iter().map(|p| peer_authentication(p, place)));
                match listed.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(next) => params = params.continue_token(&next),
                    None => break,
                }
            }
        }
        return Ok((out, unreadable));
    }
    Ok((Vec::new(), None))
}

fn peer_authentication(p: &DynamicObject, place: &str) -> PeerAuthentication {
    let spec = &p.data["spec"];
    let selector: Option<BTreeMap<String, String>> =
        spec["selector"]["matchLabels"].as_object().map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        });
    let some_port_lenient = (spec["portLevelMtls"].as_object()).is_some_and(|ports| {
        (ports.values()).any(|m| matches!(m["mode"].as_str(), Some("PERMISSIVE" | "DISABLE")))
    });
    PeerAuthentication {
        name: format!("{place}/{}", p.name_any()),
        mesh_wide: place == ISTIO_ROOT_NAMESPACE,
        selector,
        mode: spec["mtls"]["mode"].as_str().map(String::from),
        some_port_lenient,
    }
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_forbidden())
}

/// The kind is not served (no such CRD): a 404 on the list.
fn is_not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// The wake proxy's pods, from its own Service's slices.
pub(crate) async fn proxies(client: &Client, ns: &str, service: &str) -> Result<Vec<ProxyAddress>> {
    let mut out = Vec::new();
    let labels = format!("{SERVICE_NAME_LABEL}={service}");
    visit_slices(client, ns, &labels, |page| {
        for e in page.iter().flat_map(|s| &s.endpoints) {
            let ready = serves(e);
            out.extend(e.addresses.iter().map(|ip| ProxyAddress {
                ip: ip.clone(),
                ready,
                node: e.node_name.clone(),
                zone: e.zone.clone(),
            }));
        }
        false
    })
    .await?;
    Ok(out)
}

pub(crate) async fn apply(client: &Client, slice: &EndpointSlice) -> Result<()> {
    let ns = slice.namespace().unwrap_or_default();
    let name = slice.name_any();
    let mut body = serde_json::to_value(slice).map_err(|e| Error::Serialize {
        what: "an EndpointSlice",
        source: e,
    })?;
    body["apiVersion"] = "discovery.k8s.io/v1".into();
    body["kind"] = "EndpointSlice".into();
    Api::<EndpointSlice>::namespaced(client.clone(), &ns)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(Error::kube(format!("applying EndpointSlice {ns}/{name}")))?;
    Ok(())
}

/// Deletes the operator's slice `name`; one already gone is fine.
pub(crate) async fn remove(client: &Client, ns: &str, name: &str) -> Result<()> {
    match Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(format!("deleting EndpointSlice {ns}/{name}"))(
            e,
        )),
    }
}
