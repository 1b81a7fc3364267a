//! A label selector as the group form matches it: checked once (the operators and values the
//! API server's own selectors allow), then matched without allocation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A label selector, checked once (the operators and values the API server's own selectors
/// allow) and then matched without allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    labels: BTreeMap<String, String>,
    exprs: Vec<Expr>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Expr {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// The selector, or what is wrong with it (in the words `kubectl` users know).
    pub fn compile(s: &LabelSelector) -> Result<Selector, String> {
        // The operator writes `schedule.rs/` labels itself: selecting on them would make
        // holding a workload change whether it is selected, and the two flap forever.
        let reserved = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, _)| k)
            .chain(s.match_expressions.iter().flatten().map(|e| &e.key))
            .find(|k| k.starts_with("schedule.rs/"));
        if let Some(k) = reserved {
            return Err(format!(
                "the key {k:?} is the operator's own (schedule.rs/ labels are written by it); select on the workloads' labels"
            ));
        }
        let mut exprs = Vec::new();
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            let values = e.values.clone().unwrap_or_default();
            let at = format!("matchExpressions[{i}]");
            if e.key.is_empty() {
                return Err(format!("{at}.key must not be empty"));
            }
            exprs.push(match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!("{at}.values must not be empty for {}", e.operator));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!("{at}.values must be empty for {}", e.operator));
                }
                "In" => Expr::In(e.key.clone(), values),
                "NotIn" => Expr::NotIn(e.key.clone(), values),
                "Exists" => Expr::Exists(e.key.clone()),
                "DoesNotExist" => Expr::DoesNotExist(e.key.clone()),
                other => {
                    return Err(format!(
                        "{at}.operator {other:?} is not one of In, NotIn, Exists, DoesNotExist"
                    ));
                }
            });
        }
        Ok(Selector {
            labels: s.match_labels.clone().unwrap_or_default(),
            exprs,
        })
    }

    /// The selector in the API server's `labelSelector` syntax, so a list asks only for what
    /// it selects.
    pub fn to_query(&self) -> String {
        let set = |vs: &[String]| vs.join(",");
        self.labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .chain(self.exprs.iter().map(|e| match e {
                Expr::In(k, vs) => format!("{k} in ({})", set(vs)),
                Expr::NotIn(k, vs) => format!("{k} notin ({})", set(vs)),
                Expr::Exists(k) => k.clone(),
                Expr::DoesNotExist(k) => format!("!{k}"),
            }))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The label keys it reads: of a workload's labels, only these decide whether it matches.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.labels
            .keys()
            .map(String::as_str)
            .chain(self.exprs.iter().map(|e| match e {
                Expr::In(k, _) | Expr::NotIn(k, _) | Expr::Exists(k) | Expr::DoesNotExist(k) => {
                    k.as_str()
                }
            }))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.exprs.iter().all(|e| match e {
                Expr::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
                Expr::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
                Expr::Exists(k) => labels.contains_key(k),
                Expr::DoesNotExist(k) => !labels.contains_key(k),
            })
    }
}
