//! The wake intents the proxy sends the operator (`POST /v1/wake`): one at a time per TDSet,
//! at most one every `SPACING`, the requests seen meanwhile counted into the next; so a flood
//! of requests to a sleeping Service makes one wake-up, not thousands. Authenticated with the
//! proxy's own token for the wake audience, read from its file at every send (the kubelet
//! rotates it).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tracing::{debug, info, warn};

use super::metrics::ProxyMetrics;
use super::operator::Operator;
use crate::api::{WakeAnswer, WakeReport, WakeRequest};

/// The least time between two reports for one TDSet.
const SPACING: Duration = Duration::from_secs(2);
/// A report that failed is sent again (with what came in meanwhile), waiting twice as long
/// each time up to `MAX_BACKOFF`, at most `MAX_TRIES` times.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const MAX_TRIES: u32 = 6;
/// How long one report may take.
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most TDSets with a report due at once; past it a request is not reported (it is still
/// held, and the next one for its TDSet is).
const MAX_DUE: usize = 4096;

/// How long a probe of the operator's `/healthz` may take, and how often one is sent.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// Where reports go and how they are signed.
#[derive(Clone, Debug)]
pub struct ReportTo {
    /// The operator's wake endpoint (a URL, or its Service's ClusterIP).
    pub operator: Arc<Operator>,
    /// The proxy's token for the wake audience (a projected ServiceAccount token).
    pub token_file: PathBuf,
}

/// Why a report did not land, and whether to send it again.
struct Failure {
    again: bool,
    message: String,
}

#[derive(Default)]
struct Due {
    /// Requests seen and not yet reported.
    requests: i64,
    /// The newest of them.
    request: Option<WakeRequest>,
    service: String,
    /// A sender runs for this TDSet.
    sending: bool,
}

/// Sends reports; cheap to clone.
#[derive(Clone)]
pub struct Reporter {
    to: Arc<ReportTo>,
    metrics: Arc<ProxyMetrics>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    due: Arc<Mutex<HashMap<(String, String), Due>>>,
}

impl Reporter {
    pub fn new(to: ReportTo, metrics: Arc<ProxyMetrics>) -> Reporter {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(3)));
        Reporter {
            to: Arc::new(to),
            metrics,
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
            due: Arc::default(),
        }
    }

    /// Whether the operator's endpoint answered lately.
    pub fn reachable(&self) -> bool {
        self.to.operator.reachable()
    }

    /// Asks the operator's `/healthz`, and says whether it answered (any answer: the endpoint
    /// is there).
    pub async fn probe(&self) -> bool {
        let reached = match self.to.operator.url().await {
            Ok(base) => {
                let req =
                    hyper::Request::get(format!("{base}/healthz")).body(Full::new(Bytes::new()));
                match req {
                    Ok(req) => matches!(
                        tokio::time::timeout(PROBE_TIMEOUT, self.http.request(req)).await,
                        Ok(Ok(_))
                    ),
                    Err(_) => false,
                }
            }
            Err(e) => {
                debug!(error = %e, "finding the operator's wake endpoint");
                false
            }
        };
        self.seen_operator(reached);
        reached
    }

    /// What a probe or a report found; a change is logged, and an address that could not be
    /// reached is read again next time.
    fn seen_operator(&self, reached: bool) {
        let was = self.to.operator.set_reachable(reached);
        self.metrics.operator_reachable.set(i64::from(reached));
        if !reached {
            self.to.operator.forget_address();
        }
        match (was, reached) {
            (None | Some(false), true) => {
                info!(operator = %self.to.operator.describe(), "the operator's wake endpoint answers")
            }
            (None | Some(true), false) => warn!(operator = %self.to.operator.describe(),
                "the operator's wake endpoint cannot be reached: not ready, and held requests are told the wake-up could not be asked for"),
            _ => {}
        }
    }

    /// Counts a request to `service` of TDSet `namespace/tdset`, and makes sure a report of it
    /// goes out (now, or after the one in flight).
    pub fn report(&self, namespace: &str, tdset: &str, service: &str, request: WakeRequest) {
        let key = (namespace.to_string(), tdset.to_string());
        let start = {
            let Ok(mut due) = self.due.lock() else { return };
            if !due.contains_key(&key) && due.len() >= MAX_DUE {
                warn!(
                    namespace,
                    tdset, "too many TDSets with a wake report due; not reported"
                );
                return;
            }
            let entry = due.entry(key.clone()).or_default();
            entry.requests += 1;
            entry.request = Some(request);
            entry.service = service.to_string();
            !std::mem::replace(&mut entry.sending, true)
        };
        if start {
            let me = self.clone();
            tokio::spawn(async move { me.send_while_due(key).await });
        }
    }

    /// Sends what is due for `key`, then again every `SPACING` while more comes in; a failed
    /// report's requests are put back and sent again, backing off.
    async fn send_while_due(&self, key: (String, String)) {
        let mut wait = SPACING;
        let mut tries = 0;
        loop {
            let taken = {
                let Ok(mut due) = self.due.lock() else { return };
                match due.get_mut(&key) {
                    Some(d) if d.requests > 0 => {
                        let request = d.request.take().unwrap_or_default();
                        Some(WakeReport {
                            namespace: key.0.clone(),
                            tdset: key.1.clone(),
                            service: d.service.clone(),
                            requests: std::mem::take(&mut d.requests),
                            request,
                        })
                    }
                    _ => {
                        due.remove(&key);
                        None
                    }
                }
            };
            let Some(report) = taken else { return };
            let (ns, tdset) = (&report.namespace, &report.tdset);
            let failed = match tokio::time::timeout(REPORT_TIMEOUT, self.send(&report)).await {
                Ok(Ok(answer)) => {
                    debug!(namespace = %ns, tdset = %tdset, requests = report.requests,
                           until = ?answer.until, written = answer.written, "wake reported");
                    None
                }
                Ok(Err(failure)) => Some(failure),
                Err(_) => Some(Failure {
                    again: true,
                    message: "timed out".into(),
                }),
            };
            let count = |result: &str| self.metrics.reports.with_label_values(&[result]).inc();
            match failed {
                None => {
                    count("sent");
                    (wait, tries) = (SPACING, 0);
                }
                Some(f) if f.again && tries < MAX_TRIES => {
                    count("retried");
                    tries += 1;
                    warn!(namespace = %ns, tdset = %tdset, error = %f.message, retry_in = ?wait,
                          "wake report failed; sent again");
                    self.put_back(&key, report);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_BACKOFF);
                    continue;
                }
                Some(f) => {
                    count("dropped");
                    warn!(namespace = %ns, tdset = %tdset, error = %f.message, requests = report.requests,
                          "wake report refused; its requests are not reported");
                    (wait, tries) = (SPACING, 0);
                }
            }
            tokio::time::sleep(SPACING).await;
        }
    }

    /// A failed report's requests, due again (with any that came in since).
    fn put_back(&self, key: &(String, String), report: WakeReport) {
        if let Ok(mut due) = self.due.lock()
            && let Some(d) = due.get_mut(key)
        {
            d.requests += report.requests;
            d.request.get_or_insert(report.request);
        }
    }

    async fn send(&self, report: &WakeReport) -> Result<WakeAnswer, Failure> {
        let again = |message: String| Failure {
            again: true,
            message,
        };
        // A small file on a tmpfs the kubelet writes: read in place.
        let token = std::fs::read_to_string(&self.to.token_file).map_err(|e| {
            again(format!(
                "reading the token {}: {e}",
                self.to.token_file.display()
            ))
        })?;
        let body = serde_json::to_vec(report).map_err(|e| again(e.to_string()))?;
        let base = self.to.operator.url().await.map_err(again)?;
        let req = hyper::Request::post(format!("{base}/v1/wake"))
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", token.trim()),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| again(e.to_string()))?;
        let resp = match self.http.request(req).await {
            Ok(resp) => resp,
            Err(e) => {
                self.seen_operator(false);
                return Err(again(e.to_string()));
            }
        };
        self.seen_operator(true);
        let status = resp.status();
        let body = (resp.into_body().collect().await)
            .map_err(|e| again(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            // What the operator refuses for what the report says (no such TDSet, a Service it
            // does not name, too large) is not sent again; busy, unauthenticated (a token
            // not yet valid) or failing is.
            let last = matches!(status.as_u16(), 400 | 404 | 413);
            return Err(Failure {
                again: !last,
                message: format!("{status}: {}", text.trim()),
            });
        }
        serde_json::from_slice(&body).map_err(|e| again(e.to_string()))
    }
}
