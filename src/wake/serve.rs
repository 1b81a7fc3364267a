//! The proxy's connections: one listener per port of its range, bound before it reports
//! ready, so a slice that names a port never sends a connection to a closed one. A connection
//! is accepted at once; its first bytes are read (an HTTP/1.x head, never a body), its port
//! names its Service, `ignore` is applied, the TDSet is reported, and the connection is held
//! until the Service's own endpoints are ready, then relayed to one of them, the bytes read
//! first, exactly as the client sent them, save an `X-Forwarded-For` added to an HTTP head.
//! After `hold`: 503 with Retry-After (HTTP), or the connection closed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use super::caps::{Caps, Counts, Slot};
use super::head::{self, Head, HttpHead, MAX_HEAD};
use super::metrics::{ProxyMetrics, outcome};
use super::reply;
use super::report::Reporter;
use super::routes::{Route, ServiceKey};
use super::watch::Seen;
use crate::api::WakeRequest;
use crate::error::{Error, Result};

/// How long a connection that has sent nothing is waited on before it is taken for a
/// protocol where the server speaks first (MySQL, SMTP): woken for and relayed as it is.
const FIRST_BYTES: Duration = Duration::from_secs(1);
/// How long a connection on a port no slice names yet waits for one (the operator's slice
/// and the proxy's watch of it race the first connections).
const ROUTE_WAIT: Duration = Duration::from_secs(5);
/// How long connecting to the workload may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a client may take to send its request head (a slow one holds a connection
/// slot for at most this long, whatever the hold).
const HEAD_READ: Duration = Duration::from_secs(10);
/// After the proxy's own answer, how long (and how much) of what the client still sends is
/// read and dropped, so that closing does not reset the connection before the client has
/// read the answer.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

struct Proxy {
    /// When the last connection was accepted (a stopping proxy waits for a quiet spell).
    last_accepted: Mutex<Instant>,
    seen: Arc<Seen>,
    reporter: Reporter,
    metrics: Arc<ProxyMetrics>,
    caps: Caps,
    connections: Arc<Semaphore>,
    /// What is open per client address, per Service, and held per Service.
    namespaces: Counts<String>,
    services: Counts<ServiceKey>,
    sources: Counts<(IpAddr, ServiceKey)>,
    held: Counts<ServiceKey>,
}

/// The proxy ports, bound and served until this is dropped.
pub struct Listening {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    proxy: Arc<Proxy>,
}

impl Listening {
    /// Connections open now: being read, held or relayed.
    pub fn open(&self) -> usize {
        self.proxy.caps.connections - self.proxy.connections.available_permits()
    }

    /// How long since a connection was last accepted.
    pub fn quiet_for(&self) -> Duration {
        (self.proxy.last_accepted.lock())
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Binds every port of `ports` on `ip` and serves them until the result is dropped.
pub async fn listen(
    ip: IpAddr,
    ports: (u16, u16),
    seen: Arc<Seen>,
    reporter: Reporter,
    metrics: Arc<ProxyMetrics>,
    caps: Caps,
) -> Result<Listening> {
    let proxy = Arc::new(Proxy {
        last_accepted: Mutex::new(Instant::now()),
        seen,
        reporter,
        metrics,
        caps,
        connections: Arc::new(Semaphore::new(caps.connections)),
        namespaces: Counts::default(),
        services: Counts::default(),
        sources: Counts::default(),
        held: Counts::default(),
    });
    let mut tasks = Vec::new();
    let mut ip = ip;
    for port in ports.0..=ports.1 {
        let bound = match TcpListener::bind(SocketAddr::new(ip, port)).await {
            // `::` takes IPv4 too; where IPv6 is off, 0.0.0.0 takes its place.
            Err(_) if port == ports.0 && ip == IpAddr::V6(Ipv6Addr::UNSPECIFIED) => {
                ip = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
                TcpListener::bind(SocketAddr::new(ip, port)).await
            }
            other => other,
        };
        let listener = bound.map_err(|e| {
            Error::Config(format!("the wake proxy cannot listen on port {port}: {e}"))
        })?;
        let proxy = proxy.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let (conn, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors, say: a moment's pause, not a spin.
                        warn!(port, error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if let Ok(mut t) = proxy.last_accepted.lock() {
                    *t = Instant::now();
                }
                // The whole proxy's cap at accept, before anything is read; the shares of a
                // namespace, a Service and a client once the port names the Service.
                let Ok(permit) = proxy.connections.clone().try_acquire_owned() else {
                    debug!(port, "connection cap reached; closed");
                    proxy.metrics.count(outcome::REFUSED);
                    continue;
                };
                let proxy = proxy.clone();
                tokio::spawn(async move {
                    proxy.handle(conn, peer, port).await;
                    drop(permit);
                });
            }
        }));
    }
    info!(from = ports.0, to = ports.1, "the wake proxy listens");
    Ok(Listening { tasks, proxy })
}

/// What the connection turned out to be, as read.
struct Read {
    head: Head,
    bytes: Vec<u8>,
}

impl Proxy {
    async fn handle(&self, mut conn: TcpStream, peer: SocketAddr, port: u16) {
        let started = Instant::now();
        let route = match self.route(port).await {
            Some(r) => r,
            None => {
                debug!(port, "no Service is routed to this port; closed");
                self.metrics.count(outcome::NO_ROUTE);
                return;
            }
        };
        // Everything open through one namespace, one Service, and from one client to it,
        // read, held or relayed, within its share.
        let Some(_shares) = self.shares(&route.service, peer.ip().to_canonical()) else {
            debug!(port, service = %route.service.name, client = %peer.ip(), "a connection cap of this Service reached; closed");
            self.metrics.count(outcome::OVER_CAP);
            return;
        };
        let _open = Held::new(&self.metrics.open);
        let hold = Duration::from_secs(route.config.hold_secs);
        let read = match read_head(&mut conn, hold, route.client_first).await {
            Ok(r) => r,
            Err(answer) => {
                self.metrics.count(outcome::BAD_HEAD);
                if let Some(answer) = answer {
                    answer_and_close(conn, &answer).await;
                }
                return;
            }
        };
        let http = match &read.head {
            Head::Http(h) => Some(h.clone()),
            _ => None,
        };
        // A connection that sent nothing to a port whose clients speak first is no client of
        // it (a scanner's or a probe's bare connect): relayed if awake, never a wake-up.
        let silent = read.bytes.is_empty() && route.client_first;
        // Nor are bytes that are no HTTP request on a port that speaks HTTP in the clear (a
        // scanner's probe): relayed if awake, never a wake-up.
        let not_http = route.cleartext_http && read.head == Head::Opaque;
        let ignored = silent
            || not_http
            || http
                .as_ref()
                .is_some_and(|h| route.ignore.ignores(Some(&h.path), h.user_agent.as_deref()));
        let svc = &route.service;
        if !ignored {
            self.reporter.report(
                &svc.namespace,
                &route.tdset,
                &svc.name,
                request_of(&route, http.as_ref()),
            );
        }
        // Already awake (the slice not yet gone): straight through.
        let targets = self.seen.targets(svc, &route.port_name);
        if !targets.is_empty() {
            let reached = relay(conn, read, peer, &targets, &svc.name, self.caps.relay_idle).await;
            self.metrics.count(if reached {
                outcome::RELAYED
            } else {
                outcome::UNREACHABLE
            });
            return;
        }
        if ignored {
            self.metrics.count(outcome::IGNORED);
            if http.is_some() {
                answer_and_close(conn, &reply::ignored(&svc.name)).await;
            }
            return;
        }
        let Some(_slot) = self.hold_slot(svc) else {
            debug!(service = %svc.name, "held-connection cap reached");
            self.metrics.count(outcome::OVER_CAP);
            self.give_up(conn, &route, read, started).await;
            return;
        };
        let _held = Held::new(&self.metrics.held);
        let mut changes = self.seen.service_changes(svc);
        let deadline = tokio::time::Instant::from_std(started + hold);
        loop {
            let targets = self.seen.targets(svc, &route.port_name);
            if !targets.is_empty() {
                let waited = started.elapsed();
                debug!(service = %svc.name, held_ms = waited.as_millis() as u64, "forwarding a held connection");
                self.metrics.held_seconds.observe(waited.as_secs_f64());
                let reached =
                    relay(conn, read, peer, &targets, &svc.name, self.caps.relay_idle).await;
                self.metrics.count(if reached {
                    outcome::WOKEN
                } else {
                    outcome::UNREACHABLE
                });
                return;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        self.metrics.count(outcome::TIMED_OUT);
        self.give_up(conn, &route, read, started).await;
    }

    /// The route of `port`, waiting a little for one not seen yet.
    async fn route(&self, port: u16) -> Option<Route> {
        let mut changes = self.seen.changes();
        let deadline = tokio::time::Instant::now() + ROUTE_WAIT;
        loop {
            if let Some(r) = self.seen.route(port) {
                return Some(r);
            }
            tokio::select! {
                changed = changes.changed() => changed.ok()?,
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }

    /// The namespace's, the Service's and the client's slots, or none if any is full.
    #[allow(clippy::type_complexity)]
    fn shares(
        &self,
        svc: &ServiceKey,
        client: IpAddr,
    ) -> Option<(Slot<String>, Slot<ServiceKey>, Slot<(IpAddr, ServiceKey)>)> {
        let caps = self.caps;
        let namespace = self.namespaces.take(&svc.namespace, caps.per_namespace)?;
        let service = self.services.take(svc, caps.per_service)?;
        let source = self.sources.take(&(client, svc.clone()), caps.per_source)?;
        Some((namespace, service, source))
    }

    fn hold_slot(&self, svc: &ServiceKey) -> Option<Slot<ServiceKey>> {
        self.held.take(svc, self.caps.held_per_service)
    }

    /// `hold` passed (or the cap was reached) before the workload was ready.
    /// HTTP/1.x gets a 503 (a page for a browser), HTTP/2 gRPC's UNAVAILABLE (or a 503),
    /// both with Retry-After; any other protocol is closed.
    async fn give_up(&self, conn: TcpStream, route: &Route, read: Read, started: Instant) {
        let retry = reply::retry_after(
            &route.config.samples,
            started.elapsed().as_secs(),
            route.config.hold_secs,
        );
        let service = &route.service.name;
        match read.head {
            Head::Http(_) if !self.reporter.reachable() => {
                answer_and_close(conn, &reply::unasked(service, retry)).await
            }
            Head::Http(h) => answer_and_close(conn, &reply::waking(&h, service, retry)).await,
            Head::H2 => super::h2::answer_waking(conn, read.bytes, service.clone(), retry).await,
            Head::Opaque => {}
        }
    }
}

/// Writes the proxy's own answer, then reads and drops what the client still sends (a body
/// it sent without waiting) for a moment, so that the close does not reset the connection
/// before the client has read the answer.
async fn answer_and_close(mut conn: TcpStream, answer: &[u8]) {
    if conn.write_all(answer).await.is_err() || conn.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER, async {
        while left > 0 {
            match conn.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Reads until the head is known. `Err(Some(answer))`: refused with that answer;
/// `Err(None)`: the client went away or sent nothing HTTP-like in `hold`.
async fn read_head(
    conn: &mut TcpStream,
    hold: Duration,
    client_first: bool,
) -> std::result::Result<Read, Option<Vec<u8>>> {
    let mut bytes = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + hold.min(HEAD_READ);
    // Nothing in the first second: a protocol where the server speaks first, unless the
    // port's clients speak first (then it is waited on as any head is).
    let first = match client_first {
        true => deadline,
        false => tokio::time::Instant::now() + FIRST_BYTES,
    };
    match tokio::time::timeout_at(first, conn.read(&mut chunk)).await {
        Err(_) => {
            return Ok(Read {
                head: Head::Opaque,
                bytes,
            });
        }
        Ok(Ok(0)) | Ok(Err(_)) => return Err(None),
        Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
    }
    loop {
        match head::parse(&bytes) {
            Ok(Some(head)) => return Ok(Read { head, bytes }),
            Err(head::Refused::TooLarge) => return Err(Some(reply::too_large())),
            Ok(None) => {}
        }
        let room = (MAX_HEAD + 1).saturating_sub(bytes.len()).min(chunk.len());
        match tokio::time::timeout_at(deadline, conn.read(&mut chunk[..room.max(1)])).await {
            Err(_) | Ok(Ok(0)) | Ok(Err(_)) => return Err(None),
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

fn request_of(route: &Route, http: Option<&HttpHead>) -> WakeRequest {
    WakeRequest {
        service: route.service.name.clone(),
        method: http.map(|h| h.method.clone()),
        host: http.and_then(|h| h.host.clone()),
        path: http.map(|h| h.path.clone()),
        user_agent: http.and_then(|h| h.user_agent.clone()),
    }
}

/// Connects to one of `targets` (the next, if one refuses; where to start turns, so held
/// connections spread over the endpoints), sends what was read (an HTTP head as `relayed`
/// makes it), then copies both ways until either side closes or neither has sent a byte for
/// `idle`. None reachable: 502 for HTTP, and `false`.
async fn relay(
    conn: TcpStream,
    read: Read,
    peer: SocketAddr,
    targets: &[SocketAddr],
    service: &str,
    idle: Duration,
) -> bool {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let start = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut upstream = None;
    for i in 0..targets.len() {
        let target = targets[(start + i) % targets.len()];
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
            Ok(Ok(u)) => {
                upstream = Some(u);
                break;
            }
            Ok(Err(e)) => warn!(%target, service, error = %e, "connecting to the woken workload"),
            Err(_) => warn!(%target, service, "connecting to the woken workload timed out"),
        }
    }
    let Some(mut upstream) = upstream else {
        if matches!(read.head, Head::Http(_)) {
            answer_and_close(conn, &reply::unreachable(service)).await;
        }
        return false;
    };
    let mut conn = conn;
    let first = match &read.head {
        Head::Http(h) => head::relayed(&read.bytes, h, peer.ip()),
        _ => read.bytes,
    };
    if upstream.write_all(&first).await.is_err() {
        return true;
    }
    copy_until_idle(&mut conn, &mut upstream, idle).await;
    true
}

/// Copies both ways until either side closes, or until no byte has moved either way for
/// `idle`: a relayed connection left open and silent does not keep its slot for ever.
async fn copy_until_idle(a: &mut TcpStream, b: &mut TcpStream, idle: Duration) {
    let activity = Activity::default();
    let mut a = Watched {
        io: a,
        activity: &activity,
    };
    let mut b = Watched {
        io: b,
        activity: &activity,
    };
    let copy = tokio::io::copy_bidirectional(&mut a, &mut b);
    let watchdog = async {
        loop {
            let quiet = activity.quiet_for();
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    };
    tokio::select! {
        _ = copy => {}
        _ = watchdog => debug!(idle_secs = idle.as_secs(), "a relayed connection idle; closed"),
    }
}

/// When a byte last moved on a relayed connection.
struct Activity {
    start: Instant,
    last_ms: std::sync::atomic::AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Activity {
    fn moved(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// A stream whose reads and writes mark `activity`.
struct Watched<'a> {
    io: &'a mut TcpStream,
    activity: &'a Activity,
}

impl tokio::io::AsyncRead for Watched<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut *self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.moved();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Watched<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut *self.io).poll_write(cx, data);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved();
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.io).poll_shutdown(cx)
    }
}

/// One connection in a gauge (`tdset_wake_proxy_held`, `_open`), for as long as it lives.
struct Held<'a>(&'a prometheus::IntGauge);

impl<'a> Held<'a> {
    fn new(gauge: &'a prometheus::IntGauge) -> Held<'a> {
        gauge.inc();
        Held(gauge)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
