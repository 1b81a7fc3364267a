//! Wake on request's data plane, before the form's turn: each Service `wakeOnRequest` names
//! gets the operator's EndpointSlices (the wake proxy's pods on the proxy ports it was given)
//! before the write that takes the count to 0, so the Service never has no endpoint; waking,
//! they stay until the workload's own endpoints are ready, then go, and nothing is in the
//! path while awake. A TDSet without `wakeOnRequest` reads nothing here, unless slices of its
//! own are left from before (they are removed).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use tracing::info;

use super::resolve::Resolved;
use crate::api::TDSet;
use crate::controller::io::intercept as io;
use crate::controller::state::Context;
use crate::error::Result;
use crate::schedule::wake;
use crate::workload::intercept::{
    Marks, Mesh, MeshSeen, PlanFor, ProxyConfig, Refusal, SERVICE_NAME_LABEL, ServicePlan,
    ServiceSeen, TDSET_LABEL, black_hole, contested, leaving, plan_service, retired_at,
    sidecar_injected,
};
use crate::workload::owned;

/// How soon a TDSet whose slices wait for its workload's own endpoints is looked at again
/// (an endpoint's readiness reaches its slice a moment after the pod's).
const WAITING_RECHECK: Duration = Duration::from_secs(2);
/// How soon a TDSet kept awake for want of a ready proxy is looked at again (a proxy pod
/// that becomes ready rewrites the slices that exist; this TDSet has none yet).
const UNGUARDED_RECHECK: Duration = Duration::from_secs(10);
/// How soon a TDSet refused a proxy port (the range or its namespace's share full) is looked
/// at again.
const PORTS_RECHECK: Duration = Duration::from_secs(30);
/// How soon a TDSet refused for a mesh is looked at again (each look reads its namespace and
/// Istio's policies).
const MESH_RECHECK: Duration = Duration::from_secs(300);

/// What the stage did, for the report.
#[derive(Debug, Default)]
pub(crate) struct Intercepted {
    /// Services that cannot be woken through, and why.
    pub refused: Vec<String>,
    /// Services that would sleep with no proxy ready to stand in for them: the workload is
    /// kept as it is this turn.
    pub unguarded: Vec<String>,
    /// Look again this soon.
    pub recheck: Option<Duration>,
    /// The soonest a retired slice is due to go.
    pub retiring: Option<Duration>,
}

impl Intercepted {
    /// Whether this turn must leave the workload as it is (not put it to sleep).
    pub(crate) fn holds(&self) -> bool {
        !self.unguarded.is_empty()
    }
}

/// Puts the wake proxy in front of the Services of a workload this turn puts to sleep, and
/// takes it out of the path of the rest; what it did, for the report.
pub(crate) async fn intercept(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    resolved: &Resolved<'_>,
) -> Result<Intercepted> {
    let name = tdset.name_any();
    // From the cache of the operator's slices: a stale view costs an apply that changes
    // nothing, or a delete of one already gone.
    let all = ctx.wake_slices.state();
    let present: Vec<EndpointSlice> = (all.iter())
        .filter(|s| s.namespace().as_deref() == Some(ns))
        .filter(|s| s.labels().get(TDSET_LABEL) == Some(&name))
        .map(|s| (**s).clone())
        .collect();
    let now = resolved.now;
    let (Some(spec), Some(proxy)) = (&tdset.spec.wake_on_request, &ctx.wake_proxy) else {
        // Turned off (or the operator runs without the proxy): what is left leaves the path.
        let mut done = Intercepted::default();
        write_leaving(ctx, ns, "", leaving(present.iter(), now), &mut done).await?;
        done.recheck = done.retiring;
        return Ok(done);
    };
    // Asleep only if this turn writes the 0: suspended (or refused), the workload runs on,
    // and a slice in front of it would send every request through the proxy.
    let writes = resolved.writes(tdset);
    let asleep = resolved.eval.replicas == 0 && writes;
    // Awake with nothing of the operator's in the path: nothing to read or write (most
    // reconciles of a TDSet awake by its schedule).
    if !asleep && present.is_empty() {
        return Ok(Intercepted::default());
    }
    let proxies = io::proxies(&ctx.client, &proxy.namespace, &proxy.service).await?;
    let config = proxy_config(spec, resolved);
    let uid = tdset.uid().unwrap_or_default();
    let template = workload_template(tdset, ctx, ns).await?;
    let labels: Option<Vec<&BTreeMap<String, String>>> =
        (template.as_ref()).and_then(|t| t.labels.as_ref().map(|l| vec![l]));
    // Only before it sleeps: a mesh found then keeps the proxy out of a path it could not
    // serve; waking, the slices leave as they would.
    let mesh = match asleep {
        true => mesh_around(ctx, ns, template.as_ref()).await?,
        false => None,
    };
    let of = PlanFor {
        tdset: &name,
        tdset_uid: &uid,
        namespace: ns,
        asleep,
        workload_labels: labels.as_deref(),
        proxies: &proxies,
        config: &config,
        range: proxy.ports,
        per_namespace: usize::from(proxy.per_namespace),
        mesh: mesh.as_ref(),
        now,
    };
    let Holdings {
        mut used,
        busiest,
        mut here,
    } = holdings(all.iter().map(|s| &**s), ns);
    let mut done = Intercepted::default();
    // Slices of Services no longer named leave the path.
    let named: BTreeSet<&str> = spec.services.iter().map(|s| s.name.as_str()).collect();
    let unnamed = present.iter().filter(|slice| {
        let svc = slice.labels().get(SERVICE_NAME_LABEL).map(String::as_str);
        !svc.is_some_and(|s| named.contains(s))
    });
    write_leaving(ctx, ns, "", leaving(unnamed, now), &mut done).await?;
    for wanted in &spec.services {
        let mine: Vec<EndpointSlice> = (present.iter())
            .filter(|s| s.labels().get(SERVICE_NAME_LABEL) == Some(&wanted.name))
            .cloned()
            .collect();
        let contested = contested(&mine, all.iter().map(|s| &**s));
        if !contested.is_empty() {
            info!(service = %wanted.name, ports = ?contested, "a proxy port is claimed first by another Service's slice; moving off it");
        }
        // The ports the namespace's other Services hold (this one's own left out).
        let own: BTreeSet<u16> = proxy_ports(mine.iter()).collect();
        let this = Named {
            wanted,
            mine: &mine,
            contested: &contested,
            namespace_holds: here.difference(&own).count(),
            busiest: busiest.clone(),
        };
        let given = intercept_service(ctx, &of, &this, &mut used, &mut done).await?;
        here = here.difference(&own).copied().chain(given).collect();
    }
    // Suspended while asleep, a slice left in place waits for a wake-up nothing will write:
    // looked at again at the TDSet's own interval, not every 2 s.
    if !writes {
        done.recheck = None;
    }
    done.recheck = soonest(done.recheck, done.retiring);
    Ok(done)
}

fn soonest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The writes of slices leaving the path (`leaving`): retired ones applied emptied, those
/// retired long enough deleted; the soonest of those kept is remembered.
async fn write_leaving(
    ctx: &Context,
    ns: &str,
    service: &str,
    plan: ServicePlan,
    done: &mut Intercepted,
) -> Result<()> {
    done.retiring = soonest(done.retiring, plan.retiring);
    for slice in &plan.apply {
        io::apply(&ctx.client, slice).await?;
        info!(service, slice = %slice.name_any(), "wake proxy out of the path: its slice retired, its ports kept a while");
    }
    for gone in &plan.remove {
        io::remove(&ctx.client, ns, gone).await?;
        info!(service, slice = %gone, "retired slice removed: its ports are free");
    }
    Ok(())
}

/// The pod template's metadata of the TDSet's workload, where one read at most tells it: the
/// Deployment it owns (from its spec), or the Deployment, StatefulSet or ReplicaSet it
/// targets. A Service must select those pods (else its requests would wake a workload they
/// never reach), and a mesh may be marked on them. None for a group (many workloads) or
/// another kind.
async fn workload_template(tdset: &TDSet, ctx: &Context, ns: &str) -> Result<Option<ObjectMeta>> {
    if let Some(target) = &tdset.spec.scale_target_ref {
        return io::template_meta(&ctx.client, ns, target).await;
    }
    Ok(owned::desired_deployment(tdset, 0)
        .ok()
        .flatten()
        .and_then(|d| d.spec?.template.metadata))
}

/// The mesh that would black-hole the TDSet's Services asleep (`intercept::black_hole`), from
/// the namespace's marks, the workload's pod template's, and Istio's PeerAuthentications.
async fn mesh_around(
    ctx: &Context,
    ns: &str,
    template: Option<&ObjectMeta>,
) -> Result<Option<Mesh>> {
    let namespace = io::namespace_meta(&ctx.client, ns).await?;
    fn marks(m: &ObjectMeta) -> Marks<'_> {
        Marks {
            labels: m.labels.as_ref(),
            annotations: m.annotations.as_ref(),
        }
    }
    let mut seen = MeshSeen {
        namespace: namespace.as_ref().map(marks).unwrap_or_default(),
        pods: template.map(marks),
        peer_authentications: &[],
        unreadable: None,
    };
    // Istio's policies matter only to pods with its sidecar: read only for those.
    let (peer_authentications, unreadable) = match sidecar_injected(&seen) {
        true => io::peer_authentications(&ctx.client, ns).await?,
        false => (Vec::new(), None),
    };
    seen.peer_authentications = &peer_authentications;
    seen.unreadable = unreadable.as_deref();
    Ok(black_hole(&seen))
}

/// What the proxy is told for the TDSet's Services (as annotations of its slices).
fn proxy_config(spec: &crate::api::WakeOnRequest, resolved: &Resolved<'_>) -> ProxyConfig {
    ProxyConfig {
        hold_secs: u64::try_from(wake::hold(spec).num_seconds()).unwrap_or(10),
        ignore: spec.ignore.clone(),
        samples: resolved
            .previous
            .as_ref()
            .map(|s| s.warm_up_samples().to_vec())
            .unwrap_or_default(),
    }
}

/// What the operator's slices (retired ones too: a port is free only once its slice has gone)
/// hold of the proxy's range.
struct Holdings {
    /// Every port held: a port kept is reused, a new one avoids them all.
    used: BTreeSet<u16>,
    /// The namespace holding the most, and how many (a full range names it).
    busiest: Option<(String, usize)>,
    /// What this namespace holds (its share is capped).
    here: BTreeSet<u16>,
}

fn holdings<'a>(slices: impl Iterator<Item = &'a EndpointSlice>, ns: &str) -> Holdings {
    let mut by_namespace: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for s in slices {
        let held = by_namespace
            .entry(s.namespace().unwrap_or_default())
            .or_default();
        held.extend(proxy_ports(std::iter::once(s)));
    }
    let busiest = (by_namespace.iter())
        .max_by_key(|(_, ports)| ports.len())
        .map(|(ns, ports)| (ns.clone(), ports.len()));
    let used = by_namespace.values().flatten().copied().collect();
    Holdings {
        used,
        busiest,
        here: by_namespace.remove(ns).unwrap_or_default(),
    }
}

/// The proxy ports `slices` hold.
fn proxy_ports<'a>(slices: impl Iterator<Item = &'a EndpointSlice>) -> impl Iterator<Item = u16> {
    slices
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| u16::try_from(p.port?).ok())
}

/// One Service `wakeOnRequest` names, and what the cache shows of it.
struct Named<'a> {
    wanted: &'a crate::api::WakeService,
    /// The operator's slices for it.
    mine: &'a [EndpointSlice],
    /// Ports of those that another Service's slice claims first.
    contested: &'a BTreeSet<u16>,
    namespace_holds: usize,
    busiest: Option<(String, usize)>,
}

/// One Service `wakeOnRequest` names: what is read of it, its plan (the port handed out with
/// it), and the writes, new slices before old ones go (make before break).
async fn intercept_service(
    ctx: &Context,
    of: &PlanFor<'_>,
    this: &Named<'_>,
    used: &mut BTreeSet<u16>,
    done: &mut Intercepted,
) -> Result<Vec<u16>> {
    let (ns, asleep) = (of.namespace, of.asleep);
    let (wanted, mine) = (this.wanted, this.mine);
    // Reads only what the decision needs: the Service while slices may be wanted, its own
    // endpoints only while the proxy is in the path and the workload wakes.
    let service = if asleep || !mine.is_empty() {
        io::service(&ctx.client, ns, &wanted.name).await?
    } else {
        None
    };
    let own_ready = !asleep
        && !mine.is_empty()
        && io::own_ready(
            &ctx.client,
            ns,
            &wanted.name,
            ctx.trusted_endpoint_managers(),
        )
        .await?;
    let seen = ServiceSeen {
        name: &wanted.name,
        service: service.as_ref(),
        ports: &wanted.ports,
        present: mine,
        own_ready,
        contested: this.contested,
        namespace_holds: this.namespace_holds,
        busiest: this.busiest.clone(),
    };
    let key = format!("{ns}/{}", wanted.name);
    let plan = ctx.ports_handed_out.plan(&key, |others| {
        used.extend(others);
        let plan = plan_service(of, &seen, used);
        let ports = proxy_ports(plan.apply.iter()).collect();
        (plan, ports)
    });
    // New slices before old ones go (make before break).
    let (retiring, entering): (Vec<_>, Vec<_>) =
        (plan.apply.iter()).partition(|s| retired_at(s).is_some());
    for slice in entering {
        io::apply(&ctx.client, slice).await?;
        info!(service = %wanted.name, slice = %slice.name_any(), endpoints = slice.endpoints.len(), "wake proxy in the path");
    }
    let leaving = ServicePlan {
        apply: retiring.into_iter().cloned().collect(),
        remove: plan.remove.clone(),
        retiring: plan.retiring,
        ..ServicePlan::default()
    };
    write_leaving(ctx, ns, &wanted.name, leaving, done).await?;
    if let Some(refused) = plan.refused {
        // Ports free as other Services' retired slices go: looked at again soon, not at the
        // TDSet's next change.
        // A Service whose own ports alone are past the share waits for a change of its own.
        let may_clear = match refused {
            Refusal::RangeFull(_) => true,
            Refusal::NamespaceShare { holds, share } => holds - this.namespace_holds <= share,
            _ => false,
        };
        if may_clear {
            done.recheck = soonest(done.recheck, Some(PORTS_RECHECK));
        }
        // A mesh's labels and policies are watched by nobody: looked at again now and then (a
        // change of the TDSet's own is seen at once).
        if matches!(refused, Refusal::Mesh(_)) {
            done.recheck = soonest(done.recheck, Some(MESH_RECHECK));
        }
        done.refused
            .push(format!("Service {} {refused}", wanted.name));
    }
    if plan.waiting {
        done.recheck = Some(WAITING_RECHECK);
    }
    if plan.unguarded {
        info!(service = %wanted.name, "no wake proxy pod ready: the workload is left as it is, not put to sleep");
        done.unguarded.push(format!("Service {}", wanted.name));
        done.recheck = Some(
            done.recheck
                .map_or(UNGUARDED_RECHECK, |r| r.min(UNGUARDED_RECHECK)),
        );
    }
    // The proxy ports the Service holds now: what was applied, else what is kept.
    let kept = mine.iter().filter(|s| {
        !plan
            .remove
            .iter()
            .any(|r| Some(r) == s.metadata.name.as_ref())
    });
    Ok(if plan.apply.is_empty() {
        proxy_ports(kept).collect()
    } else {
        proxy_ports(plan.apply.iter()).collect()
    })
}
