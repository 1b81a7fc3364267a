//! Which kinds a group looks at, and what each listed workload runs and carries.

use std::borrow::Cow;
use std::collections::BTreeMap;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::api::KedaPause;
use crate::api::{GroupKind, NamedKind, ScaleTargetSelector, TDSet};
use crate::controller::state::{Answer, Claim, Context, GroupEntry};
use crate::error::{Error, Result};
use crate::status::Problem;
use crate::workload::group::{self, Member, Place, Record, Value};
use crate::workload::keda;
use crate::workload::savings::Requests;

/// Objects a page of a list asks for. A page is decoded as it arrives, one object at a time,
/// each reduced to what the plan keeps before the next is read (`fetch`): what a page costs
/// does not depend on how large a tenant makes its objects, nor on their order.
const PAGE: u32 = 250;

/// A kind a group selects, resolved to its resource.
pub(super) struct Kind {
    pub(super) kind: GroupKind,
    pub(super) resource: ApiResource,
    /// Built into the API server (Deployment, StatefulSet, CronJob): written with one apply
    /// of the object. Other kinds: the record by apply, the count through `/scale`.
    pub(super) built_in: bool,
    /// Whether the spec selects it. The built-in kinds are always looked at, for records this
    /// TDSet left under an older spec (a kind taken out of `kinds` gives its workloads back).
    pub(super) selected: bool,
}

fn built_in(k: NamedKind) -> ApiResource {
    let (group, version, kind, plural) = match k {
        NamedKind::Deployment => ("apps", "v1", "Deployment", "deployments"),
        NamedKind::StatefulSet => ("apps", "v1", "StatefulSet", "statefulsets"),
        NamedKind::CronJob => ("batch", "v1", "CronJob", "cronjobs"),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Resolves the selected kinds, and the built-in kinds not selected; a kind that cannot be used
/// is a problem to report, and the others are still scheduled.
pub(super) async fn kinds(
    ctx: &Context,
    sel: &ScaleTargetSelector,
    recorded: &[String],
    problems: &mut Vec<Problem>,
) -> Result<Vec<Kind>> {
    let mut out: Vec<Kind> = Vec::new();
    let selected = sel.kinds();
    // Custom kinds this TDSet may have left records on, selected no more: listed for its
    // records only.
    let was_held = recorded
        .iter()
        .map(|k| (GroupKind::parse(k), false))
        .filter(|(k, _)| !selected.iter().any(|s| s.same_kind(k)));
    let wanted: Vec<(GroupKind, bool)> = selected
        .iter()
        .cloned()
        .map(|k| (k, true))
        .chain(was_held)
        .collect();
    for (kind, selected) in wanted {
        match &kind {
            GroupKind::Named(n) => out.push(Kind {
                resource: built_in(*n),
                kind,
                built_in: true,
                selected,
            }),
            GroupKind::Scalable { kind: k, group } => {
                match ctx.discovery.resolve_kind(group, k).await? {
                    Ok(res) if res.has_scale => out.push(Kind {
                        resource: res.resource,
                        kind,
                        built_in: false,
                        selected,
                    }),
                    Ok(_) => problems.push(Problem::ScaleNotSupported(format!(
                        "{k}.{group} has no /scale subresource; its workloads are left alone"
                    ))),
                    Err(p) => problems.push(p),
                }
            }
        }
    }
    for n in [
        NamedKind::Deployment,
        NamedKind::StatefulSet,
        NamedKind::CronJob,
    ] {
        let kind = GroupKind::Named(n);
        if !out.iter().any(|k| k.kind.same_kind(&kind)) {
            out.push(Kind {
                resource: built_in(n),
                kind,
                built_in: true,
                selected: false,
            });
        }
    }
    // The HPAs: an autoscaled workload's count other than 0 is its HPA's floor.
    out.push(Kind {
        kind: GroupKind::Scalable {
            kind: "HorizontalPodAutoscaler".into(),
            group: "autoscaling".into(),
        },
        resource: ApiResource {
            group: "autoscaling".into(),
            version: "v2".into(),
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            plural: "horizontalpodautoscalers".into(),
        },
        built_in: true,
        selected: false,
    });
    // KEDA's ScaledObjects, where KEDA is installed: a workload one scales sleeps through its
    // pause, and any other count is its floor.
    if let Ok(found) = ctx.discovery.resolve_kind(keda::GROUP, keda::KIND).await? {
        out.push(Kind {
            kind: GroupKind::Scalable {
                kind: keda::KIND.into(),
                group: keda::GROUP.into(),
            },
            resource: found.resource,
            built_in: true,
            selected: false,
        });
    }
    Ok(out)
}

/// The custom kinds the TDSet's last status says it may have left records on.
pub(super) fn recorded_kinds(tdset: &TDSet, ctx: &Context) -> Vec<String> {
    ctx.statuses
        .current(tdset)
        .and_then(|s| s.group)
        .map(|g| g.held_kinds)
        .unwrap_or_default()
}

/// Whether a kind is the HPAs (listed for the floors of autoscaled workloads).
pub(super) fn is_hpa(kind: &Kind) -> bool {
    kind.resource.group == "autoscaling" && kind.resource.kind == "HorizontalPodAutoscaler"
}

/// Whether a kind is KEDA's ScaledObjects (listed for the pauses and floors of the workloads
/// KEDA scales).
pub(super) fn is_scaled_object(kind: &Kind) -> bool {
    kind.resource.group == keda::GROUP && kind.resource.kind == keda::KIND
}

/// Whether a kind is listed whole for the floors of autoscaled workloads (never selected).
pub(super) fn is_floor_kind(kind: &Kind) -> bool {
    is_hpa(kind) || is_scaled_object(kind)
}

pub(super) fn forbidden(verb: &str, res: &ApiResource, sub: &str, ns: &str, msg: &str) -> Problem {
    let group = if res.group.is_empty() {
        "\"\"".to_string()
    } else {
        res.group.clone()
    };
    Problem::Forbidden(format!(
        "the operator may not {verb} {}{sub} (apiGroup {group}) in namespace {ns}: {msg}. Grant it \
         with a ClusterRole labelled schedule.rs/aggregate-to-tdset-operator: \"true\" (verbs \
         [get, list, watch, patch]); see docs/trust-and-rbac.md",
        res.plural
    ))
}

/// What placing reads of a listed workload's labels, decided as each object is decoded so that
/// no label is kept: whether this TDSet's selector picks it, and the oldest other group of the
/// namespace that selects it without excluding it. Labels, unlike annotations, have no bound
/// in all (a workload may carry 1 MB of them), and a namespace may hold many groups, each
/// naming other keys.
pub(super) struct Keep {
    placer: std::sync::Arc<Placer>,
    /// Objects still to be read of what the TDSet selects (`--group-max-workloads`), and of
    /// what carries its label (which anyone who can read the TDSet's uid can put on anything:
    /// `group::held_reads`).
    pub(super) budget: std::sync::atomic::AtomicUsize,
    pub(super) held_budget: std::sync::atomic::AtomicUsize,
    /// The namespace's HPAs, read beside what it selects (not out of its budget:
    /// `group::held_reads`).
    hpa_budget: std::sync::atomic::AtomicUsize,
    /// The namespace's ScaledObjects, likewise.
    scaled_object_budget: std::sync::atomic::AtomicUsize,
}

/// What placing reads of the group, shared with the thread that decodes a page.
struct Placer {
    /// This TDSet's name and selector (none when only its records are listed).
    me: String,
    mine: Option<group::Selector>,
    /// `order`'s tiers.
    tiers: Vec<group::Selector>,
    /// The namespace's groups, oldest claim first (from the index).
    groups: Vec<(Claim, std::sync::Arc<GroupEntry>)>,
}

impl Keep {
    /// `mine`: this TDSet's selector (none when only its records are listed); `tiers`: those
    /// of `order`, read from each workload's labels.
    pub(super) fn new(
        ctx: &Context,
        ns: &str,
        me: &str,
        mine: Option<&group::Selector>,
        tiers: Vec<group::Selector>,
    ) -> Keep {
        Keep {
            placer: std::sync::Arc::new(Placer {
                me: me.to_string(),
                mine: mine.cloned(),
                tiers,
                groups: ctx.groups.in_namespace(ns),
            }),
            budget: ctx.group_max_workloads.into(),
            held_budget: group::held_reads(ctx.group_max_workloads).into(),
            hpa_budget: group::held_reads(ctx.group_max_workloads).into(),
            scaled_object_budget: group::held_reads(ctx.group_max_workloads).into(),
        }
    }
}

impl Placer {
    /// What placing needs of `labels` (of workload `name` of `kind`).
    fn placing(&self, kind: &GroupKind, name: &str, labels: &BTreeMap<String, String>) -> Placed {
        let (g, k) = (kind.group(), kind.kind());
        Placed {
            selected: self.mine.as_ref().is_some_and(|s| s.matches(labels)),
            oldest_other: (self.groups.iter())
                .find(|((_, n), e)| *n != self.me && e.would_hold((g, k, name), labels))
                .map(|(c, _)| c.clone()),
            tier: (self.tiers.iter())
                .position(|t| t.matches(labels))
                .unwrap_or(self.tiers.len()),
        }
    }
}

/// What placing reads of a listed workload, instead of its labels.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Placed {
    /// This TDSet's selector picks it.
    pub(super) selected: bool,
    /// The oldest other group that selects it and does not exclude it.
    pub(super) oldest_other: Option<Claim>,
    /// Its tier of `order` (those in none: the last).
    #[serde(default)]
    pub(super) tier: usize,
}

/// Where a listed object keeps `Placed`.
const PLACED: &str = "placedByLabels";

/// What placing reads of a listed object (see `Keep`).
pub(super) fn placed(o: &DynamicObject) -> Placed {
    (o.data.get(PLACED).cloned())
        .and_then(|p| serde_json::from_value(p).ok())
        .unwrap_or_default()
}

/// The longest value of the operator's own annotations kept: a holder's name (at most 253
/// characters) or a count. A longer one is no record of this operator's.
const MAX_RECORD_VALUE: usize = 253;

/// Lists one kind in the namespace, page by page, keeping only what the plan reads, and at
/// most what is left of `budget`.
async fn list(
    ctx: &Context,
    ns: &str,
    kind: &Kind,
    labels: &str,
    keep: &Keep,
    budget: &std::sync::atomic::AtomicUsize,
) -> Answer<Listing> {
    use std::sync::atomic::Ordering::Relaxed;
    let request =
        kube::core::Request::new(<Lean as kube::Resource>::url_path(&kind.resource, Some(ns)));
    let mut out = Vec::new();
    let mut params = ListParams::default().labels(labels);
    loop {
        let left = budget.load(Relaxed);
        // With no budget left, one object says whether there was more.
        params = params.limit(u32::try_from(left).unwrap_or(PAGE).clamp(1, PAGE));
        let page = match fetch(ctx, &request, &params, kind, &keep.placer, left).await {
            Ok(page) => page,
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                return Ok(Err(forbidden("list", &kind.resource, "", ns, &s.message)));
            }
            // The kind is no longer served (its CRD was deleted since discovery ran).
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                return Ok(Err(Problem::TargetNotFound(format!(
                    "{} in {ns} cannot be listed: the API server no longer serves them ({})",
                    kind.resource.plural, s.message
                ))));
            }
            // A selector the API server cannot parse (a key no label may have).
            Err(kube::Error::Api(s)) if s.code == 400 => {
                return Ok(Err(Problem::InvalidSpec(format!(
                    "spec.scaleTargetSelector.selector: the API server refuses it as a label selector ({labels}): {}",
                    s.message
                ))));
            }
            Err(e) => {
                return Err(Error::kube(format!(
                    "listing {} in {ns}",
                    kind.resource.plural
                ))(e));
            }
        };
        budget.store(left - page.objects.len(), Relaxed);
        out.extend(page.objects);
        // Past the budget: objects this page left out, or more pages with nothing left to read.
        let truncated = page.beyond || (page.next.is_some() && budget.load(Relaxed) == 0);
        match page.next {
            Some(token) if !truncated => params = params.continue_token(&token),
            _ => {
                return Ok(Ok(Listing {
                    objects: out,
                    truncated,
                }));
            }
        }
    }
}

/// What a list kept, and whether it stopped at the budget.
struct Listing {
    objects: Vec<DynamicObject>,
    truncated: bool,
}

/// One page of a list as kept: at most `room` objects, whether it had more, and the token of
/// the next page.
#[derive(Default)]
struct Page {
    objects: Vec<DynamicObject>,
    beyond: bool,
    next: Option<String>,
}

/// Reads one page, decoding it as it arrives (on a blocking thread: serde_json reads a
/// stream synchronously). Each object is reduced to what the plan keeps
/// (`Lean::into_dynamic`) before the next is read, so a page costs its largest object and
/// what is kept of the rest, whatever its objects weigh in all.
async fn fetch(
    ctx: &Context,
    request: &kube::core::Request,
    params: &ListParams,
    kind: &Kind,
    placer: &std::sync::Arc<Placer>,
    room: usize,
) -> kube::Result<Page> {
    use tokio_util::compat::FuturesAsyncReadCompatExt;
    let http = request.list(params).map_err(kube::Error::BuildRequest)?;
    let body = ctx.client.request_stream(http).await?;
    let body = tokio_util::io::SyncIoBridge::new(body.compat());
    let (group_kind, resource) = (kind.kind.clone(), kind.resource.clone());
    let placer = placer.clone();
    tokio::task::spawn_blocking(move || {
        let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(body));
        let page = PageSeed {
            kind: (&group_kind, &resource),
            placer: &placer,
            room,
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok(page)
    })
    .await
    .map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e)))?
    .map_err(kube::Error::SerdeError)
}

/// Decodes a list's body into a `Page` (its `metadata.continue` and its `items`, one at a
/// time); everything else of the body is skipped.
struct PageSeed<'a> {
    kind: (&'a GroupKind, &'a ApiResource),
    placer: &'a Placer,
    room: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for PageSeed<'_> {
    type Value = Page;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Page, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PageSeed<'_> {
    type Value = Page;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Page, A::Error> {
        #[derive(Deserialize)]
        struct ListMeta {
            #[serde(rename = "continue")]
            next: Option<String>,
        }
        let mut page = Page::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => {
                    page.next = (map.next_value::<ListMeta>()?.next).filter(|c| !c.is_empty())
                }
                "items" => map.next_value_seed(Items {
                    seed: &self,
                    page: &mut page,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(page)
    }
}

/// A list's `items`, each kept as `Lean::into_dynamic` makes it, while there is room.
struct Items<'a, 'b> {
    seed: &'a PageSeed<'b>,
    page: &'a mut Page,
}

impl<'de> serde::de::DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list's items")
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<(), A::Error> {
        let (kind, resource) = self.seed.kind;
        while let Some(o) = seq.next_element::<Lean>()? {
            if self.page.objects.len() < self.seed.room {
                (self.page.objects).push(o.into_dynamic(kind, resource, self.seed.placer));
            } else {
                self.page.beyond = true;
            }
        }
        Ok(())
    }
}

/// Where a listed object keeps what one replica requests (its pod template is not kept).
const REQUESTS: &str = "requestsOfOneReplica";

/// What one replica of a listed workload requests.
pub(super) fn requests_of(o: &DynamicObject) -> Requests {
    let at = |k: &str| o.data.get(REQUESTS).and_then(|r| r.get(k)?.as_i64());
    Requests {
        cpu_nanos: at("cpuNanos").unwrap_or(0).into(),
        memory_bytes: at("memoryBytes").unwrap_or(0).into(),
    }
}

pub(super) fn int_at(o: &DynamicObject, path: &str) -> Option<i32> {
    o.data
        .pointer(path)
        .and_then(serde_json::Value::as_i64)
        .map(|v| v as i32)
}

/// `value_of`'s answer for a count that is not set (no count is negative).
const COUNT_UNSET: i32 = -1;
/// Where a listed object says its count is not set.
const UNSET: &str = "countUnset";

/// Whether a listed object's count is not set: its `/scale` cannot be read (the API server's
/// 500: "the spec replicas field ... does not exist"); it runs its controller's default.
pub(super) fn count_unset(o: &DynamicObject) -> bool {
    o.data.get(UNSET).and_then(serde_json::Value::as_bool) == Some(true)
}

/// What a listed object runs now.
async fn value_of(ctx: &Context, ns: &str, kind: &Kind, o: &DynamicObject) -> Answer<Value> {
    if matches!(kind.kind, GroupKind::Named(NamedKind::CronJob)) {
        let suspended = o
            .data
            .pointer("/spec/suspend")
            .and_then(serde_json::Value::as_bool);
        return Ok(Ok(Value::Suspended(suspended.unwrap_or(false))));
    }
    if is_hpa(kind) {
        // The API server defaults an absent minReplicas to 1.
        return Ok(Ok(Value::Floor(
            int_at(o, "/spec/minReplicas").unwrap_or(1),
        )));
    }
    if is_scaled_object(kind) {
        return Ok(Ok(Value::Keda {
            floor: int_at(o, "/spec/minReplicaCount").unwrap_or(keda::DEFAULT_MIN),
            paused: pause_of(o).is_night(),
        }));
    }
    if kind.built_in {
        // The API server defaults an absent spec.replicas to 1.
        return Ok(Ok(Value::Replicas(
            int_at(o, "/spec/replicas").unwrap_or(1),
        )));
    }
    // A custom kind's count lives where its CRD says: `/scale` reads it from there.
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &kind.resource);
    match api.get_scale(&o.name_any()).await {
        Ok(s) => Ok(Ok(Value::Replicas(
            s.spec.and_then(|s| s.replicas).unwrap_or(0),
        ))),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Err(forbidden(
            "get",
            &kind.resource,
            "/scale",
            ns,
            &s.message,
        ))),
        // Its count is not set (the API server says so with a 500): it runs its controller's
        // default. Marked, and read as 0, which placing leaves alone (see
        // `place::count_unset`); one such object must not fail the whole group's reconcile.
        Err(kube::Error::Api(s)) if crate::controller::io::target::count_unset(&s) => {
            Ok(Ok(Value::Replicas(COUNT_UNSET)))
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Err(Problem::TargetNotFound(format!(
            "{} {} was deleted meanwhile",
            kind.kind,
            o.name_any()
        )))),
        Err(e) => Err(Error::kube(format!(
            "reading the scale of {} {} in {ns}",
            kind.kind,
            o.name_any()
        ))(e)),
    }
}

/// `/scale` reads of a custom kind in flight at once: a group of a few thousand is read well
/// inside the reconcile's deadline, without one TDSet taking every connection.
const READS_IN_FLIGHT: usize = 16;

/// Lists every kind with each of its label selectors (`queries`; what the API server filters
/// never crosses the wire), once per object, and reads what each runs: (index of its kind,
/// the object, its value), and for each kind whether all of it was listed. The first query of
/// every kind (what the TDSet holds) is read whole, before any other: what it holds is always
/// given back. The others stop at `keep`'s budget, which is then a problem to report, as is a
/// kind that cannot be listed or read.
pub(super) async fn observe(
    ctx: &Context,
    ns: &str,
    kinds: &[Kind],
    queries: impl Fn(&Kind) -> Vec<String>,
    keep: &Keep,
    problems: &mut Vec<Problem>,
) -> Result<(Vec<(usize, DynamicObject, Value)>, Vec<bool>)> {
    let mut listed = vec![true; kinds.len()];
    let mut objects: Vec<BTreeMap<String, DynamicObject>> =
        kinds.iter().map(|_| BTreeMap::new()).collect();
    let queries: Vec<Vec<String>> = kinds.iter().map(queries).collect();
    let rounds = queries.iter().map(Vec::len).max().unwrap_or(0);
    let mut truncated = false;
    // What it holds first, for every kind: read before anything else may use up the budget.
    for round in 0..rounds {
        for (k, kind) in kinds.iter().enumerate() {
            let Some(labels) = queries[k].get(round) else {
                continue;
            };
            // What it holds (round 0), what it selects and the namespace's HPAs each have a
            // budget (which workloads an HPA scales is known from the operator's HPA cache;
            // one whose HPA was not read is left alone, see `place::all`).
            let budget = match round {
                0 => &keep.held_budget,
                _ if is_hpa(kind) => &keep.hpa_budget,
                _ if is_scaled_object(kind) => &keep.scaled_object_budget,
                _ => &keep.budget,
            };
            match list(ctx, ns, kind, labels, keep, budget).await? {
                Ok(found) => {
                    truncated |= found.truncated;
                    listed[k] &= !found.truncated;
                    let by_uid = found
                        .objects
                        .into_iter()
                        .map(|o| (o.uid().unwrap_or_default(), o));
                    objects[k].extend(by_uid);
                }
                Err(p) => {
                    listed[k] = false;
                    problems.push(p)
                }
            }
        }
    }
    if truncated {
        problems.push(Problem::TooManyWorkloads(format!(
            "spec.scaleTargetSelector selects more than the {} workloads one reconcile reads \
             (--group-max-workloads, HPAs included): what it holds, what other groups yield to \
             it, then the first (by kind, then name) are scheduled, the rest are left as they \
             are. Narrow the selector or split the group",
            ctx.group_max_workloads
        )));
    }
    let mut out = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        let reads: Vec<BoxFuture<'_, (DynamicObject, Answer<Value>)>> =
            std::mem::take(&mut objects[k])
                .into_values()
                .map(|o| {
                    async move {
                        let mut o = o;
                        let v = value_of(ctx, ns, kind, &o).await;
                        // The mark of a count the API server could not read (see `value_of`).
                        let v = v.map(|v| {
                            v.map(|v| match v {
                                Value::Replicas(COUNT_UNSET) => {
                                    o.data[UNSET] = serde_json::Value::Bool(true);
                                    Value::Replicas(0)
                                }
                                v => v,
                            })
                        });
                        (o, v)
                    }
                    .boxed()
                })
                .collect();
        let values: Vec<_> = futures::stream::iter(reads)
            .buffered(READS_IN_FLIGHT)
            .collect()
            .await;
        for (o, v) in values {
            match v? {
                Ok(v) => out.push((k, o, v)),
                Err(p) => {
                    listed[k] = false;
                    problems.push(p)
                }
            }
        }
    }
    Ok((out, listed))
}

/// A listed ScaledObject's pause annotations (a value kept shortened past
/// `MAX_RECORD_VALUE`: still a pause, and never the operator's).
pub(super) fn pause_of(o: &DynamicObject) -> KedaPause {
    let a = o.annotations();
    KedaPause {
        paused_replicas: a.get(keda::PAUSED_REPLICAS).cloned(),
        paused: a.get(keda::PAUSED).cloned(),
    }
}

/// The plan's view of a listed object.
pub(super) fn member_of(kind: &Kind, o: &DynamicObject, value: Value, place: Place) -> Member {
    Member {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
        name: o.name_any(),
        uid: o.uid().unwrap_or_default(),
        resource_version: o.resource_version(),
        value,
        record: Record::read(o.annotations(), value),
        place,
        autoscaled_by: None,
        keda: false,
        floor_of: None,
        two_step: !kind.built_in,
        handed_to: None,
    }
}

/// A listed workload as the plan reads it. Decoding skips the rest (a pod template's `env`, a
/// tenant's annotations, managed fields) without keeping it, so a tenant's large objects cost
/// what the plan keeps, not what they store.
#[derive(Clone, Debug, Deserialize)]
struct Lean {
    #[serde(deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: LeanSpec,
    #[serde(default)]
    status: LeanStatus,
}

/// What the plan reads of a spec: the count (or a CronJob's `suspend`, an HPA's bounds and
/// target), and each container's requests, for the savings.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct LeanSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suspend: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_replica_count: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_replica_count: Option<i64>,
    /// A ScaledObject's: KEDA keeps the workload at it (0) while no trigger is active.
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_replica_count: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_target_ref: Option<LeanRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<LeanTemplate>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct LeanRef {
    #[serde(default)]
    name: String,
    /// A ScaledObject's target (an HPA's is read from the operator's HPA cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct LeanTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<LeanPodSpec>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct LeanPodSpec {
    #[serde(default)]
    containers: Vec<LeanContainer>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct LeanContainer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resources: Option<LeanResources>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct LeanResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requests: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct LeanStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ready_replicas: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    available_replicas: Option<i64>,
    /// Whether the status has `observedGeneration`, of whatever type (Argo Rollouts' is a
    /// string): its controller reports on the object, so a count it leaves out is 0 (Go's
    /// `omitempty`), not unknown.
    #[serde(
        default,
        rename = "observedGeneration",
        deserialize_with = "present",
        skip_serializing_if = "std::ops::Not::not"
    )]
    observed: bool,
    /// Read only for whether KEDA says a ScaledObject is paused (`kedaPaused`), then dropped.
    #[serde(default, skip_serializing)]
    conditions: Vec<LeanCondition>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    keda_paused: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct LeanCondition {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    status: String,
}

/// Whether KEDA says the listed ScaledObject is paused (its `Paused` condition): a pause given
/// back that KEDA did not take (keda#6982).
pub(super) fn keda_paused(o: &DynamicObject) -> bool {
    o.data
        .pointer("/status/kedaPaused")
        .and_then(serde_json::Value::as_bool)
        == Some(true)
}

/// A listed ScaledObject's `idleReplicaCount` is set: KEDA may keep its workload at 0.
pub(super) fn keda_idle(o: &DynamicObject) -> bool {
    o.data.pointer("/spec/idleReplicaCount").is_some()
}

fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

/// The metadata the placing and the record read; of the annotations only the operator's own
/// (`schedule.rs/`), each other one dropped as it is read.
fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        #[serde(default, deserialize_with = "own_annotations")]
        annotations: Option<BTreeMap<String, String>>,
        owner_references: Option<Vec<OwnerReference>>,
    }
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references,
        ..ObjectMeta::default()
    })
}

fn own_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Own;
    impl<'de> Visitor<'de> for Own {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("annotations")
        }
        fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut own = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if key.starts_with("schedule.rs/") {
                    let value = map.next_value::<String>()?;
                    if value.len() <= MAX_RECORD_VALUE {
                        own.insert(key, value);
                    }
                } else if key == keda::PAUSED_REPLICAS || key == keda::PAUSED {
                    // Whether it is there matters, whatever its length.
                    let mut value = map.next_value::<String>()?;
                    if value.len() > MAX_RECORD_VALUE {
                        value = "(long)".into();
                    }
                    own.insert(key, value);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Some(own))
        }
    }
    d.deserialize_option(Own)
}

impl Lean {
    /// The object as the rest of the group form reads it (the paths of the full object), with
    /// only what the plan reads: of its labels what placing reads (`placed`), the controller's
    /// ownerReference, and of the pod template the requests of one replica, summed
    /// (`requests_of`).
    fn into_dynamic(
        mut self,
        kind: &GroupKind,
        resource: &ApiResource,
        placer: &Placer,
    ) -> DynamicObject {
        let labels = self.metadata.labels.take().unwrap_or_default();
        let name = self.metadata.name.as_deref().unwrap_or_default();
        let placed = placer.placing(kind, name, &labels);
        drop(labels);
        if let Some(refs) = self.metadata.owner_references.as_mut() {
            refs.retain(|r| r.controller == Some(true));
        }
        let requests = (self.spec.template.take())
            .and_then(|t| serde_json::to_value(t).ok())
            .map(|t| Requests::of_template(&t))
            .unwrap_or_default();
        let conditions = std::mem::take(&mut self.status.conditions);
        self.status.keda_paused =
            (conditions.iter()).any(|c| c.kind == "Paused" && c.status == "True");
        let clamp = |n: i128| i64::try_from(n).unwrap_or(i64::MAX);
        let data = serde_json::json!({
            "spec": self.spec,
            "status": self.status,
            REQUESTS: {"cpuNanos": clamp(requests.cpu_nanos), "memoryBytes": clamp(requests.memory_bytes)},
            PLACED: placed,
        });
        DynamicObject {
            types: Some(kube::core::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            }),
            metadata: self.metadata,
            data,
        }
    }
}

impl kube::Resource for Lean {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The field a member's value is (as people name it, and as a JSON pointer).
pub(super) fn field_of(value: &Value) -> (&'static str, &'static str) {
    match value {
        Value::Replicas(_) => ("spec.replicas", "/spec/replicas"),
        Value::Suspended(_) => ("spec.suspend", "/spec/suspend"),
        Value::Floor(_) => ("spec.minReplicas", "/spec/minReplicas"),
        Value::Keda { .. } => ("spec.minReplicaCount", "/spec/minReplicaCount"),
    }
}

/// The GitOps tool that last set `m`'s value (its `managedFields` and labels are not kept by
/// the list, so the object is read).
pub(super) async fn gitops_writer(
    ctx: &Context,
    ns: &str,
    kinds: &[Kind],
    m: &Member,
) -> Option<(
    crate::workload::gitops::Writer,
    crate::workload::gitops::Object,
)> {
    let group = m.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = kinds
        .iter()
        .find(|k| k.resource.kind == m.kind && k.resource.group == group)?;
    let (_, pointer) = field_of(&m.value);
    crate::controller::io::target::gitops_writer(ctx, ns, &kind.resource, &m.name, pointer).await
}
