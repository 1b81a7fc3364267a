//! What the proxy answers an HTTP/2 connection (h2c with prior knowledge: gRPC's usual
//! cleartext form) itself, when `hold` ran out before the workload was ready: gRPC calls get
//! status 14 (`UNAVAILABLE`, the code gRPC clients retry), anything else a 503 with
//! Retry-After. The bytes already read (the preface, perhaps more) are replayed to the HTTP/2
//! server first, so the client's connection is answered as it was sent.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long the proxy answers the streams of one such connection before it closes it.
const ANSWERING: Duration = Duration::from_secs(5);

/// Answers every stream of `conn` (of which `read` was read already) as waking, for at most
/// `ANSWERING`.
pub async fn answer_waking(conn: TcpStream, read: Vec<u8>, service: String, retry: u64) {
    let io = TokioIo::new(Rewind { read, at: 0, conn });
    let answer = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let response = waking(&req, &service, retry);
        async move { Ok::<_, Infallible>(response) }
    });
    let serving =
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(io, answer);
    let _ = tokio::time::timeout(ANSWERING, serving).await;
}

/// gRPC's UNAVAILABLE for a gRPC call (trailers-only: the status in the headers, no body),
/// else 503; either way with Retry-After.
fn waking<B>(req: &Request<B>, service: &str, retry: u64) -> Response<Full<Bytes>> {
    let grpc = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let message =
        format!("{service} is waking up (it was asleep by its schedule); retry in {retry} s");
    let builder = Response::builder().header(hyper::header::RETRY_AFTER, retry.to_string());
    let response = if grpc {
        builder
            .status(200)
            .header(hyper::header::CONTENT_TYPE, "application/grpc")
            .header("grpc-status", "14")
            .header("grpc-message", message.replace(' ', "%20"))
            .body(Full::new(Bytes::new()))
    } else {
        builder
            .status(503)
            .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from(format!("{message}\n"))))
    };
    // Only fixed, valid header values above: building cannot fail.
    response.unwrap_or_default()
}

/// A connection whose first bytes were read already: they are read again first.
struct Rewind {
    read: Vec<u8>,
    at: usize,
    conn: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.read.len() {
            let n = (self.read.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.read[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.conn).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.conn).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.conn).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A real HTTP/2 client (hyper's, prior knowledge) against `answer_waking` on a real
    /// socket: a gRPC call gets UNAVAILABLE, a plain request 503, both with Retry-After.
    #[tokio::test]
    async fn an_h2c_client_gets_unavailable_for_grpc_and_503_otherwise() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            // As the proxy does: the preface read first, to tell HTTP/2 from the rest.
            let mut preface = vec![0u8; 24];
            tokio::io::AsyncReadExt::read_exact(&mut conn, &mut preface)
                .await
                .unwrap();
            answer_waking(conn, preface, "api".into(), 7).await;
        });
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut client, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        let grpc = Request::post("http://api/pkg.Service/Call")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = client.send_request(grpc).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["grpc-status"], "14");
        assert_eq!(resp.headers()["retry-after"], "7");
        let plain = Request::get("http://api/")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = client.send_request(plain).await.unwrap();
        assert_eq!(resp.status(), 503);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("api is waking up"));
    }
}
