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
use tracing::{debug, warn};

use crate::api::{WakeAnswer, WakeReport, WakeRequest};

/// The least time between two reports for one TDSet.
const SPACING: Duration = Duration::from_secs(2);
/// How long one report may take.
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most TDSets with a report due at once; past it a request is not reported (it is still
/// held, and the next one for its TDSet is).
const MAX_DUE: usize = 4096;

/// Where reports go and how they are signed.
#[derive(Clone, Debug)]
pub struct ReportTo {
    /// The operator's wake endpoint, e.g. `http://tdset-operator-wake.tdset-system:8082`.
    pub url: String,
    /// The proxy's token for the wake audience (a projected ServiceAccount token).
    pub token_file: PathBuf,
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
    http: HttpClient<HttpConnector, Full<Bytes>>,
    due: Arc<Mutex<HashMap<(String, String), Due>>>,
}

impl Reporter {
    pub fn new(to: ReportTo) -> Reporter {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(3)));
        Reporter {
            to: Arc::new(to),
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
            due: Arc::default(),
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

    /// Sends what is due for `key`, then again every `SPACING` while more comes in.
    async fn send_while_due(&self, key: (String, String)) {
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
            match tokio::time::timeout(REPORT_TIMEOUT, self.send(&report)).await {
                Ok(Ok(answer)) => debug!(
                    namespace = %report.namespace, tdset = %report.tdset,
                    requests = report.requests, until = ?answer.until, written = answer.written,
                    "wake reported"
                ),
                Ok(Err(e)) => warn!(
                    namespace = %report.namespace, tdset = %report.tdset, error = %e,
                    "wake report refused or failed; the next request reports again"
                ),
                Err(_) => warn!(
                    namespace = %report.namespace, tdset = %report.tdset,
                    "wake report timed out; the next request reports again"
                ),
            }
            tokio::time::sleep(SPACING).await;
        }
    }

    async fn send(&self, report: &WakeReport) -> Result<WakeAnswer, String> {
        // A small file on a tmpfs the kubelet writes: read in place.
        let token = std::fs::read_to_string(&self.to.token_file)
            .map_err(|e| format!("reading the token {}: {e}", self.to.token_file.display()))?;
        let body = serde_json::to_vec(report).map_err(|e| e.to_string())?;
        let req = hyper::Request::post(format!("{}/v1/wake", self.to.url.trim_end_matches('/')))
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", token.trim()),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = (resp.into_body().collect().await)
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            return Err(format!("{status}: {}", text.trim()));
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}
