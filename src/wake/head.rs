//! What the wake proxy reads of a connection before it decides: the first bytes, and if they
//! are an HTTP/1.x request, its head (method, path, host, user agent, an upgrade), never the
//! body. The bytes read are kept and sent first when the connection is forwarded, so the
//! workload sees the request exactly as the client sent it.

/// The longest request head the proxy reads (as nginx's default large header buffers); a
/// longer one is answered 431 and wakes nothing.
pub const MAX_HEAD: usize = 16 * 1024;
/// The most header fields a head may carry.
const MAX_HEADERS: usize = 100;

/// The HTTP/2 connection preface (h2c with prior knowledge: gRPC's usual cleartext form).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the first bytes of a connection are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Head {
    /// An HTTP/1.x request head, `len` bytes long.
    Http(HttpHead),
    /// HTTP/2 with prior knowledge (h2c, gRPC).
    H2,
    /// Anything else: relayed as plain TCP.
    Opaque,
}

/// An HTTP/1.x request head as far as the proxy needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpHead {
    pub method: String,
    pub path: String,
    pub host: Option<String>,
    pub user_agent: Option<String>,
    /// `Upgrade` (e.g. `websocket`, `h2c`), when `Connection` asks for it.
    pub upgrade: Option<String>,
    /// Whether the client takes HTML (a browser): it gets a page that reloads itself.
    pub wants_html: bool,
    /// The head's length in bytes (the body, if any, follows).
    pub len: usize,
}

/// Why a head is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Longer than `MAX_HEAD`, or more than `MAX_HEADERS` fields.
    TooLarge,
}

/// Reads `buf` (the bytes received so far). `Ok(None)`: not decided yet, read more.
pub fn parse(buf: &[u8]) -> Result<Option<Head>, Refused> {
    if buf.is_empty() {
        return Ok(None);
    }
    let preface = &H2_PREFACE[..buf.len().min(H2_PREFACE.len())];
    if buf.starts_with(preface) {
        return Ok((buf.len() >= H2_PREFACE.len()).then_some(Head::H2));
    }
    // A request line starts with a method: an upper-case token. Anything else is opaque.
    let token_end = buf.iter().position(|b| !b.is_ascii_uppercase());
    match token_end {
        Some(0) => return Ok(Some(Head::Opaque)),
        Some(i) if buf[i] != b' ' => return Ok(Some(Head::Opaque)),
        None if buf.len() > 16 => return Ok(Some(Head::Opaque)),
        None => return Ok(None),
        Some(_) => {}
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => Ok(Some(Head::Http(head_of(&req, len)))),
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => Err(Refused::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(Refused::TooLarge),
        // Not HTTP after all (a protocol whose first word is upper case): relayed as it is.
        Err(_) => Ok(Some(Head::Opaque)),
    }
}

fn head_of(req: &httparse::Request<'_, '_>, len: usize) -> HttpHead {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::to_string)
    };
    let upgrade = header("connection")
        .filter(|c| {
            c.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
        .and_then(|_| header("upgrade"));
    HttpHead {
        method: req.method.unwrap_or_default().to_string(),
        path: req.path.unwrap_or("/").to_string(),
        host: header("host"),
        user_agent: header("user-agent"),
        upgrade,
        wants_html: header("accept").is_some_and(|a| a.contains("text/html")),
        len,
    }
}

/// The head read, as it is relayed: the client's address appended to `X-Forwarded-For`
/// (to the client's own field, if it sent one, so a reader of the first field sees it too),
/// and, unless the request upgrades the connection (WebSocket, h2c), `Connection: close`:
/// the next request on the connection then goes through the Service again, not through the
/// proxy, so nothing stays in the path and each request gets its address. The rest (any
/// body already read) follows unchanged.
pub fn relayed(bytes: &[u8], head: &HttpHead, client: std::net::IpAddr) -> Vec<u8> {
    let len = head.len.min(bytes.len());
    let mut lines: Vec<&[u8]> = bytes[..len].split_inclusive(|b| *b == b'\n').collect();
    // The blank line that ends the head, and its line ending.
    let Some(end) = lines.pop().filter(|l| l.trim_ascii().is_empty()) else {
        return bytes.to_vec();
    };
    let eol: &[u8] = if end.starts_with(b"\r") {
        b"\r\n"
    } else {
        b"\n"
    };
    let client = client.to_canonical();
    let closes = head.upgrade.is_none();
    let mut out = Vec::with_capacity(bytes.len() + 64);
    let mut forwarded = false;
    for (i, line) in lines.iter().enumerate() {
        let name = line
            .split(|b| *b == b':')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let is = |n: &str| i > 0 && name.eq_ignore_ascii_case(n.as_bytes());
        if closes && (is("connection") || is("keep-alive")) {
            continue;
        }
        if is("x-forwarded-for") && !forwarded {
            let body = line.trim_ascii_end();
            out.extend_from_slice(body);
            out.extend_from_slice(format!(", {client}").as_bytes());
            out.extend_from_slice(eol);
            forwarded = true;
            continue;
        }
        out.extend_from_slice(line);
    }
    if !forwarded {
        out.extend_from_slice(format!("X-Forwarded-For: {client}").as_bytes());
        out.extend_from_slice(eol);
    }
    if closes {
        out.extend_from_slice(b"Connection: close");
        out.extend_from_slice(eol);
    }
    out.extend_from_slice(end);
    out.extend_from_slice(&bytes[len..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(buf: &[u8]) -> HttpHead {
        match parse(buf) {
            Ok(Some(Head::Http(h))) => h,
            other => panic!("not an HTTP head: {other:?}"),
        }
    }

    #[test]
    fn a_request_head_is_read_and_its_body_left_alone() {
        let req = b"POST /upload?x=1 HTTP/1.1\r\nHost: web.example\r\nUser-Agent: curl/8.5\r\n\
                    Content-Length: 5000000\r\nAccept: */*\r\n\r\nBODYBYTES";
        let h = http(req);
        assert_eq!(
            (h.method.as_str(), h.path.as_str()),
            ("POST", "/upload?x=1")
        );
        assert_eq!(h.host.as_deref(), Some("web.example"));
        assert_eq!(h.user_agent.as_deref(), Some("curl/8.5"));
        assert_eq!(
            &req[h.len..],
            b"BODYBYTES",
            "the head ends where the body starts"
        );
        assert!(!h.wants_html);
    }

    #[test]
    fn a_head_in_pieces_waits_for_the_rest() {
        assert_eq!(parse(b""), Ok(None));
        assert_eq!(parse(b"GE"), Ok(None));
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: a"), Ok(None));
        assert_eq!(parse(b"PRI * HTTP/2"), Ok(None));
    }

    #[test]
    fn websocket_upgrades_browsers_h2c_and_plain_tcp_are_told_apart() {
        let ws = http(
            b"GET /chat HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n\
              Upgrade: websocket\r\n\r\n",
        );
        assert_eq!(ws.upgrade.as_deref(), Some("websocket"));
        let browser = http(b"GET / HTTP/1.1\r\nAccept: text/html,application/xhtml+xml\r\n\r\n");
        assert!(browser.wants_html);
        assert_eq!(parse(H2_PREFACE), Ok(Some(Head::H2)));
        assert_eq!(
            parse(b"\x16\x03\x01\x02\x00"),
            Ok(Some(Head::Opaque)),
            "TLS"
        );
        assert_eq!(
            parse(b"*1\r\n$4\r\nPING\r\n"),
            Ok(Some(Head::Opaque)),
            "Redis"
        );
        assert_eq!(parse(b"HELLO there\r\n\r\n"), Ok(Some(Head::Opaque)));
    }

    #[test]
    fn an_oversized_head_is_refused_not_buffered() {
        let mut big = b"GET / HTTP/1.1\r\n".to_vec();
        while big.len() < MAX_HEAD {
            big.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert_eq!(parse(&big), Err(Refused::TooLarge));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: a\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many), Err(Refused::TooLarge));
    }

    #[test]
    fn a_relayed_head_carries_the_clients_address_and_closes_after_one_request() {
        let relay = |raw: &[u8], client: &str| {
            let Ok(Some(Head::Http(h))) = parse(raw) else {
                panic!("a head")
            };
            String::from_utf8(relayed(raw, &h, client.parse().unwrap())).unwrap()
        };
        // Appended to the client's own field; keep-alive replaced; the body untouched.
        assert_eq!(
            relay(
                b"POST /a HTTP/1.1\r\nHost: web\r\nX-Forwarded-For: 1.2.3.4\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nhi",
                "10.0.0.9"
            ),
            "POST /a HTTP/1.1\r\nHost: web\r\nX-Forwarded-For: 1.2.3.4, 10.0.0.9\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
        );
        // Bare line feeds kept as they came; an IPv4-mapped client as IPv4.
        assert_eq!(
            relay(b"GET / HTTP/1.1\nHost: web\n\n", "::ffff:10.0.0.9"),
            "GET / HTTP/1.1\nHost: web\nX-Forwarded-For: 10.0.0.9\nConnection: close\n\n"
        );
        // An upgrade keeps its Connection field: the relay carries the WebSocket.
        assert_eq!(
            relay(
                b"GET /ws HTTP/1.1\r\nHost: web\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
                "fd00::1"
            ),
            "GET /ws HTTP/1.1\r\nHost: web\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Forwarded-For: fd00::1\r\n\r\n"
        );
    }
}
