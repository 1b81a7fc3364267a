//! What the wake proxy answers itself, when it does not forward: a held request whose `hold`
//! ran out before the workload was ready (503 with a Retry-After from the workload's measured
//! time to Ready, a page that reloads itself for a browser), a request `ignore` matches
//! (answered without waking anything), and a head it refuses to read.

use super::head::HttpHead;

/// The shortest and the longest Retry-After the proxy gives, in seconds.
const MIN_RETRY: u64 = 1;
const MAX_RETRY: u64 = 300;

/// Seconds a client should wait before trying again: what the workload was measured to need
/// to become ready (its `warmUp` samples, newest first), less what it has waited already,
/// at least 1 s; without samples, the time held again.
pub fn retry_after(samples: &[i32], waited_secs: u64, hold_secs: u64) -> u64 {
    let mut sorted: Vec<u64> = samples
        .iter()
        .filter_map(|s| u64::try_from(*s).ok())
        .collect();
    sorted.sort_unstable();
    let expected = match sorted.len() {
        0 => hold_secs,
        // The 90th percentile, as the measured lead takes it.
        n => sorted[((n * 9).div_ceil(10)).saturating_sub(1).min(n - 1)],
    };
    expected
        .saturating_sub(waited_secs)
        .clamp(MIN_RETRY, MAX_RETRY)
}

/// 503 for a request held past `hold`: the workload is waking and will answer soon. A browser
/// gets a page that reloads itself after `retry` seconds; anything else a line of text.
pub fn waking(head: &HttpHead, service: &str, retry: u64) -> Vec<u8> {
    let (ctype, body) = if head.wants_html {
        ("text/html; charset=utf-8", page(service, retry))
    } else {
        (
            "text/plain; charset=utf-8",
            format!("{service} is waking up (it was asleep by its schedule); retry in {retry} s\n"),
        )
    };
    response(
        "503 Service Unavailable",
        &[("Retry-After", &retry.to_string()), ("Content-Type", ctype)],
        &body,
    )
}

/// 503 for a request held past `hold` while the wake proxy could not reach the operator: the
/// wake-up could not be asked for, and nothing is starting (the proxy is not ready meanwhile,
/// its metric `tdset_wake_proxy_operator_reachable` is 0 and its log says why).
pub fn unasked(service: &str, retry: u64) -> Vec<u8> {
    response(
        "503 Service Unavailable",
        &[
            ("Retry-After", &retry.to_string()),
            ("Content-Type", "text/plain; charset=utf-8"),
        ],
        &format!(
            "{service} is asleep by its schedule, and its wake-up could not be asked for: the wake proxy cannot reach the operator; retry in {retry} s\n"
        ),
    )
}

/// 503 for a request `ignore` matched while the workload is asleep: nothing was woken.
pub fn ignored(service: &str) -> Vec<u8> {
    response(
        "503 Service Unavailable",
        &[("Content-Type", "text/plain; charset=utf-8")],
        &format!("{service} is asleep by its schedule; this request does not wake it\n"),
    )
}

/// 502 when no endpoint of the woken workload could be reached (a NetworkPolicy that does
/// not admit the proxy, say): the proxy's log names the addresses tried.
pub fn unreachable(service: &str) -> Vec<u8> {
    response(
        "502 Bad Gateway",
        &[("Content-Type", "text/plain; charset=utf-8")],
        &format!("{service} woke, but the wake proxy could not reach it\n"),
    )
}

/// 431 for a head too large to read.
pub fn too_large() -> Vec<u8> {
    response(
        "431 Request Header Fields Too Large",
        &[("Content-Type", "text/plain; charset=utf-8")],
        "request head too large\n",
    )
}

fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    out.into_bytes()
}

/// A small page that says what is happening and reloads itself.
fn page(service: &str, retry: u64) -> String {
    let service = escape(service);
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{retry}\"><title>Waking up {service}</title></head>\
         <body style=\"font-family:sans-serif;margin:3em\"><h1>Waking up {service}</h1>\
         <p>It was asleep by its schedule and is starting now. This page reloads in {retry} s.</p>\
         </body></html>\n"
    )
}

fn escape(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_up_that_could_not_be_asked_for_says_so_and_when_to_retry() {
        let answer = String::from_utf8(unasked("web", 7)).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(answer.contains("Retry-After: 7\r\n"), "{answer}");
        assert!(
            answer.contains("could not be asked for: the wake proxy cannot reach the operator"),
            "{answer}"
        );
    }

    #[test]
    fn retry_after_is_the_measured_time_to_ready_left_at_least_a_second() {
        assert_eq!(retry_after(&[], 0, 10), 10, "unmeasured: the hold again");
        // p90 of ten samples is the 9th smallest.
        let samples = [5, 6, 7, 8, 9, 10, 11, 12, 40, 100];
        assert_eq!(retry_after(&samples, 0, 10), 40);
        assert_eq!(retry_after(&samples, 30, 10), 10);
        assert_eq!(retry_after(&samples, 60, 10), 1, "overdue: at least 1 s");
        assert_eq!(retry_after(&[100_000], 0, 10), 300, "at most 5 min");
        assert_eq!(
            retry_after(&[-3, 4], 0, 10),
            4,
            "a negative sample is ignored"
        );
    }

    #[test]
    fn a_browser_gets_a_page_that_reloads_and_a_client_a_line() {
        let browser = HttpHead {
            wants_html: true,
            ..Default::default()
        };
        let text = String::from_utf8(waking(&browser, "web<x>", 7)).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nRetry-After: 7\r\n"));
        assert!(text.contains("http-equiv=\"refresh\" content=\"7\""));
        assert!(text.contains("web&lt;x&gt;"), "escaped");
        let body_at = text.find("\r\n\r\n").unwrap() + 4;
        let len: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(text.len() - body_at, len);
        let curl = String::from_utf8(waking(&HttpHead::default(), "web", 3)).unwrap();
        assert!(
            curl.contains("text/plain") && curl.contains("retry in 3 s"),
            "{curl}"
        );
    }
}
