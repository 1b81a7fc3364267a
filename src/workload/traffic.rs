//! Traffic as Prometheus answers it (`spec.idle`'s `prometheus` signals): one instant query per
//! distinct text for every TDSet, its answer read within a bound, each Service's requests a
//! second found in it. Pure: the request and the answer's bytes are the caller's.

use std::collections::HashMap;

use serde::Deserialize;

/// The most series one answer may hold, and its most bytes: past them the answer is refused
/// (every signal on it Unknown), never held whole.
pub const MAX_SERIES: usize = 50_000;
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Requests a second by (namespace, Service), from one answer.
pub type Rates = HashMap<(String, String), f64>;

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    #[serde(default)]
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: Labels,
    /// `[unix time, "value"]`.
    value: (f64, String),
}

/// The labels a query must give (the others are not kept).
#[derive(Deserialize)]
struct Labels {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    service: Option<String>,
}

/// The rates in an instant query's answer (`/api/v1/query`), summed by namespace and Service;
/// `Err`: why it gives none (an error Prometheus said, not a vector, too large, a value that is
/// no number). A series without both labels is left out.
pub fn rates(body: &[u8]) -> Result<Rates, String> {
    if body.len() > MAX_ANSWER_BYTES {
        return Err(format!(
            "the answer is larger than {} MiB",
            MAX_ANSWER_BYTES >> 20
        ));
    }
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if answer.status != "success" {
        return Err(format!(
            "Prometheus refused the query: {}",
            answer.error.unwrap_or_else(|| answer.status.clone())
        ));
    }
    let data = answer.data.ok_or("the answer has no data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "the query gives a {}, not an instant vector",
            data.result_type
        ));
    }
    if data.result.len() > MAX_SERIES {
        return Err(format!(
            "the query gives {} series, more than {MAX_SERIES}",
            data.result.len()
        ));
    }
    let mut rates = Rates::new();
    for s in data.result {
        let (Some(ns), Some(service)) = (s.metric.namespace, s.metric.service) else {
            continue;
        };
        let value: f64 = (s.value.1.parse())
            .map_err(|_| format!("a value that is no number: {:?}", s.value.1))?;
        // NaN (a rate over no samples) says nothing: no series for it.
        if value.is_finite() {
            *rates.entry((ns, service)).or_default() += value.max(0.0);
        }
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(result: serde_json::Value) -> Vec<u8> {
        serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn rates_are_summed_by_namespace_and_service() {
        let body = answer(serde_json::json!([
            {"metric": {"namespace": "dev", "service": "web", "code": "200"}, "value": [1.0, "0.5"]},
            {"metric": {"namespace": "dev", "service": "web", "code": "500"}, "value": [1.0, "0.25"]},
            {"metric": {"namespace": "dev", "service": "api"}, "value": [1.0, "0"]},
            {"metric": {"service": "nowhere"}, "value": [1.0, "9"]},
            {"metric": {"namespace": "dev", "service": "empty"}, "value": [1.0, "NaN"]}
        ]));
        let r = rates(&body).unwrap();
        assert_eq!(r.get(&("dev".into(), "web".into())), Some(&0.75));
        assert_eq!(r.get(&("dev".into(), "api".into())), Some(&0.0));
        assert_eq!(r.len(), 2, "no namespace, or NaN: no series");
    }

    #[test]
    fn what_is_not_a_usable_answer_says_why() {
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
        assert!(
            rates(refused)
                .unwrap_err()
                .contains("parse error at char 5")
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(rates(matrix).unwrap_err().contains("matrix"));
        assert!(
            rates(b"<html>")
                .unwrap_err()
                .contains("not a Prometheus answer")
        );
        let big = vec![b' '; MAX_ANSWER_BYTES + 1];
        assert!(rates(&big).unwrap_err().contains("larger than"));
        let many: Vec<serde_json::Value> = (0..=MAX_SERIES)
            .map(|i| serde_json::json!({"metric": {"namespace": "n", "service": format!("s{i}")}, "value": [1.0, "1"]}))
            .collect();
        assert!(rates(&answer(many.into())).unwrap_err().contains("series"));
    }
}
