//! The data plane of wake on request, on the wire: the Services `wakeOnRequest` names, the
//! wake proxy's ready pods (its own Service's slices), a Service's own endpoints, and the
//! operator's EndpointSlices, applied under the operator's field manager and deleted by name.
//! Read live, and only while a TDSet's slices are wanted (the operator's own slices are
//! watched: `state`'s `wake_slices`).

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::error::{Error, Result};
use crate::workload::intercept::{
    MANAGED_BY, MANAGED_BY_LABEL, ProxyAddress, SERVICE_NAME_LABEL, serves,
};

use crate::workload::owned::FIELD_MANAGER;

/// The most slices one list reads (the operator's slices cluster-wide, a Service's own).
const PAGE: u32 = 500;

pub(crate) async fn service(client: &Client, ns: &str, name: &str) -> Result<Option<Service>> {
    Api::<Service>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading Service {ns}/{name}")))
}

async fn slices(client: &Client, ns: Option<&str>, labels: &str) -> Result<Vec<EndpointSlice>> {
    let api: Api<EndpointSlice> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut out = Vec::new();
    let mut params = ListParams::default().labels(labels).limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(Error::kube(format!("listing EndpointSlices ({labels})")))?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// Whether Service `name`'s own slices (not the operator's) have a ready endpoint.
pub(crate) async fn own_ready(client: &Client, ns: &str, name: &str) -> Result<bool> {
    let all = slices(client, Some(ns), &format!("{SERVICE_NAME_LABEL}={name}")).await?;
    Ok(all
        .iter()
        .filter(|s| s.labels().get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY))
        .flat_map(|s| &s.endpoints)
        .any(serves))
}

/// The wake proxy's pods, from its own Service's slices.
pub(crate) async fn proxies(client: &Client, ns: &str, service: &str) -> Result<Vec<ProxyAddress>> {
    let all = slices(client, Some(ns), &format!("{SERVICE_NAME_LABEL}={service}")).await?;
    Ok(all
        .iter()
        .flat_map(|s| &s.endpoints)
        .flat_map(|e| {
            let ready = serves(e);
            e.addresses.iter().map(move |ip| ProxyAddress {
                ip: ip.clone(),
                ready,
            })
        })
        .collect())
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
