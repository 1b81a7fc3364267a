//! The request-level tier: one reconcile against a scripted API server (kube's `tower-test`
//! mock, as kube-rs's controller-rs tests its reconciler), asserting the exact requests it
//! sends, in order, in milliseconds. The real control plane (`tests/`) proves the behaviour;
//! this tier pins down which requests make it, and that a reconcile with nothing to do sends
//! none.

mod requests;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::lane::{KubeSink, Lane, Priority};
use super::state::{Context, Discovery, GroupIndex, TargetIndex, Wakeups};
use crate::api::TDSet;
use crate::cache::Cached;
use crate::clock::Clock;
use crate::memo::{OwnWrites, StatusMemo};
use crate::telemetry::Metrics;
use crate::workload::AllowedIn;

/// A request the operator sent, as the server saw it.
#[derive(Clone, Debug)]
pub(super) struct Sent {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

impl Sent {
    /// "PATCH /apis/apps/v1/namespaces/ns/deployments/web/scale".
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

type Respond = Box<dyn Fn(&Value) -> (u16, Value) + Send + Sync>;

struct Rule {
    method: &'static str,
    path: String,
    /// Matches only a request whose query has this in it (decoded), if set.
    query: Option<String>,
    respond: Respond,
}

/// A scripted API server: each request is answered by the first rule for its method and path
/// (a request no rule answers gets a 500, and is recorded like any other).
pub(super) struct ApiServer {
    rules: Arc<Mutex<Vec<Rule>>>,
    log: Arc<Mutex<Vec<Sent>>>,
    pub client: Client,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let log: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let (r, l) = (rules.clone(), log.clone());
        tokio::spawn(async move {
            while let Some((request, reply)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let query = decode(request.uri().query().unwrap_or_default());
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (code, answer) = {
                    let rules = r.lock().unwrap();
                    let matches = |x: &&Rule| {
                        x.method == method
                            && x.path == path
                            && x.query.as_ref().is_none_or(|q| query.contains(q.as_str()))
                    };
                    match rules.iter().find(matches) {
                        Some(rule) => (rule.respond)(&body),
                        None => status(500, "InternalError", "no rule scripted for this request"),
                    }
                };
                l.lock().unwrap().push(Sent {
                    method,
                    path,
                    query,
                    body,
                });
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap();
                reply.send_response(response);
            }
        });
        let client = Client::new(service, "default");
        let server = ApiServer { rules, log, client };
        // Every Event is taken (tests read them with `events`).
        server.on("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", |b| {
            (201, b.clone())
        });
        // No API group but the built-in ones (a group looks for KEDA's): a test that serves
        // one answers this first.
        server.returns("GET", "/apis", api_groups(&[]));
        server
    }

    /// Answers `method path` with `respond(request body)`.
    pub fn on(
        &self,
        method: &'static str,
        path: &str,
        respond: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
    ) -> &Self {
        self.rules.lock().unwrap().push(Rule {
            method,
            path: path.into(),
            query: None,
            respond: Box::new(respond),
        });
        self
    }

    /// Answers `method path` whose query has `query` in it (a list's `labelSelector`) with
    /// `object`. Rules are tried in the order they were given.
    pub fn lists(&self, path: &str, query: &str, object: Value) -> &Self {
        self.rules.lock().unwrap().push(Rule {
            method: "GET",
            path: path.into(),
            query: Some(query.into()),
            respond: Box::new(move |_| (200, object.clone())),
        });
        self
    }

    /// Answers `method path` with `object`, before any answer given so far.
    pub fn first(&self, method: &'static str, path: &str, object: Value) -> &Self {
        self.rules.lock().unwrap().insert(
            0,
            Rule {
                method,
                path: path.into(),
                query: None,
                respond: Box::new(move |_| (200, object.clone())),
            },
        );
        self
    }

    /// Answers `method path` with `respond(request body)`, before any answer given so far.
    pub fn first_on(
        &self,
        method: &'static str,
        path: &str,
        respond: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
    ) -> &Self {
        self.rules.lock().unwrap().insert(
            0,
            Rule {
                method,
                path: path.into(),
                query: None,
                respond: Box::new(respond),
            },
        );
        self
    }

    /// Answers `method path` with `object`, whatever was sent.
    pub fn returns(&self, method: &'static str, path: &str, object: Value) -> &Self {
        self.on(method, path, move |_| (200, object.clone()))
    }

    /// Everything sent so far, in order, Events included.
    pub fn all(&self) -> Vec<Sent> {
        self.log.lock().unwrap().clone()
    }

    /// What was sent, in order, Events left out: the lane sends them beside the statuses, in
    /// no fixed order with them (see `events`).
    pub fn sent(&self) -> Vec<Sent> {
        self.all()
            .into_iter()
            .filter(|s| !s.path.starts_with("/apis/events.k8s.io/"))
            .collect()
    }

    /// `sent`, as "METHOD path" lines.
    pub fn requests(&self) -> Vec<String> {
        self.sent().iter().map(Sent::line).collect()
    }

    /// The reasons of the Events sent.
    pub fn events(&self) -> Vec<String> {
        self.all()
            .iter()
            .filter(|s| s.path.starts_with("/apis/events.k8s.io/"))
            .map(|s| s.body["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Forgets what was sent (what a first reconcile sent, before a second one).
    pub fn clear(&self) {
        self.log.lock().unwrap().clear();
    }
}

/// A query string with its `%xx` escapes decoded (`labelSelector=app%3Dweb` reads
/// `labelSelector=app=web`).
fn decode(query: &str) -> String {
    let bytes = query.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `Status` object, as the API server answers an error.
pub(super) fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// The request body, as written back by the API server at `resource_version`.
pub(super) fn echo(resource_version: &'static str) -> impl Fn(&Value) -> (u16, Value) {
    move |body| {
        let mut object = body.clone();
        object["metadata"]["resourceVersion"] = json!(resource_version);
        (200, object)
    }
}

/// What the API server answers a patch of TDSet `t` (its status, or its finalizers) with: the
/// whole object, the patched part taken from the request, at `resource_version`.
pub(super) fn patched(
    t: &TDSet,
    resource_version: &'static str,
) -> impl Fn(&Value) -> (u16, Value) + use<> {
    let object = serde_json::to_value(t).unwrap();
    move |body| {
        let mut object = object.clone();
        if let Some(status) = body.get("status") {
            object["status"] = status.clone();
        }
        if let Some(finalizers) = body["metadata"].get("finalizers") {
            object["metadata"]["finalizers"] = finalizers.clone();
        }
        object["metadata"]["resourceVersion"] = json!(resource_version);
        (200, object)
    }
}

struct FixedClock(DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// The operator's context over a scripted API server, with caches the test fills.
pub(super) struct Operator {
    pub ctx: Arc<Context>,
    deployments: Writer<Cached<k8s_openapi::api::apps::v1::Deployment>>,
    hpas: Writer<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>,
    calendars: Writer<crate::api::TDCalendar>,
    tdsets: Writer<Cached<TDSet>>,
    wake_slices: Writer<k8s_openapi::api::discovery::v1::EndpointSlice>,
}

impl Operator {
    /// The operator at `now`, every cache listed and empty (no Service is ever added: its
    /// writer goes).
    pub fn at(server: &ApiServer, now: &str) -> Operator {
        Operator::with_wake_proxy(server, now, None)
    }

    /// `at`, with the wake proxy `proxy` (the operator's `--wake-addr` on).
    pub fn with_wake_proxy(
        server: &ApiServer,
        now: &str,
        proxy: Option<super::state::WakeProxyRef>,
    ) -> Operator {
        let client = server.client.clone();
        let now = DateTime::parse_from_rfc3339(now)
            .unwrap()
            .with_timezone(&Utc);
        let (deployments, mut dw) = reflector::store();
        let (services, mut sw) = reflector::store();
        let (hpas, mut hw) = reflector::store();
        let (calendars, mut cw) = reflector::store();
        let (tdsets, mut tw) = reflector::store();
        let (wake_slices, mut ww) = reflector::store();
        listed(&mut ww, vec![]);
        listed(&mut dw, vec![]);
        listed(&mut sw, vec![]);
        listed(&mut hw, vec![]);
        listed(&mut cw, vec![]);
        listed(&mut tw, vec![]);
        let metrics = Arc::new(Metrics::new().unwrap());
        let statuses = Arc::new(StatusMemo::default());
        let wakeups = Arc::new(Wakeups::new(8));
        let priority = Arc::new(Priority::with_due(wakeups.clone()));
        let lane = Lane::start(
            Arc::new(KubeSink {
                client: client.clone(),
                instance: "test".into(),
            }),
            priority.clone(),
            statuses.clone(),
            metrics.clone(),
        );
        let ctx = Arc::new(Context {
            leading_since: now,
            wake_proxy: proxy,
            traffic: None,
            wake_slices,
            ports_handed_out: Default::default(),
            client: client.clone(),
            clock: Arc::new(FixedClock(now)),
            lane,
            priority,
            metrics,
            deployments,
            services,
            hpas,
            discovery: Discovery::new(client),
            statuses,
            own_writes: Arc::new(OwnWrites::default()),
            synced: Arc::new(AtomicBool::new(true)),
            wakeups,
            index: TargetIndex::default(),
            groups: GroupIndex::default(),
            calendars,
            ics: Default::default(),
            failures: Default::default(),
            pod_forms: AllowedIn::Anywhere,
            group_form: AllowedIn::Anywhere,
            group_max_workloads: 2000,
            contests: Default::default(),
            shard: None,
            tdsets,
        });
        Operator {
            ctx,
            deployments: dw,
            hpas: hw,
            calendars: cw,
            tdsets: tw,
            wake_slices: ww,
        }
    }

    /// The cache of the operator's EndpointSlices now holds `objects`.
    pub fn wake_slices(&mut self, objects: Vec<Value>) {
        listed(
            &mut self.wake_slices,
            objects
                .into_iter()
                .map(|o| serde_json::from_value(o).unwrap())
                .collect(),
        );
    }

    /// The Deployment cache now holds `objects`.
    pub fn deployments(&mut self, objects: Vec<Value>) {
        listed(
            &mut self.deployments,
            objects
                .into_iter()
                .map(|o| Cached::new(serde_json::from_value(o).unwrap()))
                .collect(),
        );
    }

    /// The HPA cache now holds `objects`.
    pub fn hpas(&mut self, objects: Vec<Value>) {
        listed(
            &mut self.hpas,
            objects
                .into_iter()
                .map(|o| serde_json::from_value(o).unwrap())
                .collect(),
        );
    }

    /// The TDCalendar cache now holds `objects`.
    pub fn calendars(&mut self, objects: Vec<Value>) {
        listed(
            &mut self.calendars,
            objects
                .into_iter()
                .map(|o| serde_json::from_value(o).unwrap())
                .collect(),
        );
    }

    /// One reconcile of `tdset`, then whatever it queued on the lane sent.
    pub async fn reconcile(&mut self, tdset: &TDSet) -> crate::Result<()> {
        // What the TDSet watch does before a reconcile: the indexes hold it.
        self.ctx.groups.update(tdset);
        self.ctx.index.update(tdset);
        self.reconcile_as_cached(tdset).await
    }

    /// The index of groups now holds `tdset` (another TDSet, not reconciled here).
    pub fn group(&self, tdset: &TDSet) {
        self.ctx.groups.update(tdset);
    }

    /// One reconcile of `tdset` as the cache holds it, the indexes left as they are (they may
    /// have moved past it: the watch updates them before the cache).
    pub async fn reconcile_as_cached(&mut self, tdset: &TDSet) -> crate::Result<()> {
        listed(&mut self.tdsets, vec![Cached::new(tdset.clone())]);
        let result = super::reconcile(Arc::new(Cached::new(tdset.clone())), self.ctx.clone()).await;
        // Sent, and the lane left open for the next reconcile's statuses and Events.
        self.ctx.lane.settle(Duration::from_secs(10)).await;
        result.map(|_| ())
    }
}

/// Feeds `writer` a full list of `objects`, as a watch's initial list does.
fn listed<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// What the API server answers `GET /apis` with: the groups named (besides the built-in ones,
/// which the tests do not discover this way), each at one version.
pub fn api_groups(groups: &[(&str, &str)]) -> Value {
    let groups: Vec<Value> = (groups.iter())
        .map(|(name, version)| {
            let gv = json!({"groupVersion": format!("{name}/{version}"), "version": version});
            json!({"name": name, "versions": [gv], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}
