//! What a schedule saves, as pure functions: replicas removed now against a baseline (the
//! workload's own count, or for an owned Deployment the highest count its schedule sets in a
//! week), and what those replicas' pods would have requested.

use serde_json::Value;

use super::quantity;

/// What one replica's pod requests: the sum over its containers (init containers are not
/// counted: they do not run beside the others).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// In units of 10^-9 cores.
    pub cpu_nanos: i128,
    pub memory_bytes: i128,
}

impl Requests {
    /// From a pod template as JSON (`spec.template` of a workload, or the TDSet's template).
    /// A quantity that does not parse counts as nothing: the API server has accepted it, so
    /// this is only ever a form this parser does not know.
    pub fn of_template(template: &Value) -> Requests {
        let containers = template
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let sum = |resource: &str| -> i128 {
            containers
                .iter()
                .filter_map(|c| {
                    c.pointer(&format!("/resources/requests/{resource}"))?
                        .as_str()
                })
                .filter_map(quantity::parse)
                .map(|q| q.max(0))
                .fold(0i128, i128::saturating_add)
        };
        Requests {
            cpu_nanos: sum("cpu"),
            memory_bytes: sum("memory") / 1_000_000_000,
        }
    }
}

/// The baseline of an owned Deployment: the highest count its spec sets (windows, overrides,
/// default), whatever the days: what it would run all week without a schedule.
pub fn highest_count(spec: &crate::api::TDSetSpec) -> i32 {
    spec.scheduling_config
        .iter()
        .map(|w| w.replica)
        .chain(spec.overrides.iter().filter_map(|o| o.replica))
        .chain(spec.default_replica)
        .max()
        .unwrap_or(0)
}

/// What one replica of an owned Deployment requests (the `container` form sets none).
pub fn owned_requests(spec: &crate::api::TDSetSpec) -> Requests {
    spec.template
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .map(|t| Requests::of_template(&t))
        .unwrap_or_default()
}

/// What is saved now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub replicas: i64,
    pub cpu_nanos: i128,
    pub memory_bytes: i128,
}

impl Saved {
    /// `baseline - now` replicas removed (never negative: running more than the baseline
    /// saves nothing), each requesting `per`.
    pub fn removed(baseline: i32, now: i32, per: Requests) -> Saved {
        let replicas = i64::from(baseline.saturating_sub(now).max(0));
        Saved {
            replicas,
            cpu_nanos: per.cpu_nanos.saturating_mul(i128::from(replicas)),
            memory_bytes: per.memory_bytes.saturating_mul(i128::from(replicas)),
        }
    }

    pub fn plus(self, o: Saved) -> Saved {
        Saved {
            replicas: self.replicas.saturating_add(o.replicas),
            cpu_nanos: self.cpu_nanos.saturating_add(o.cpu_nanos),
            memory_bytes: self.memory_bytes.saturating_add(o.memory_bytes),
        }
    }

    /// CPU cores, for metrics and tables.
    pub fn cpu_cores(self) -> f64 {
        self.cpu_nanos as f64 / 1e9
    }

    /// As `status.savings` shows it: cores as a decimal quantity ("1.5"), memory in bytes.
    pub fn status(self) -> crate::api::SavingsStatus {
        crate::api::SavingsStatus {
            replicas: self.replicas,
            cpu: format_cores(self.cpu_nanos),
            memory: format_bytes(self.memory_bytes),
        }
    }
}

/// A quantity as a number ("1.5" -> 1.5, "512Mi" -> 536870912), for metrics.
pub fn quantity_value(s: &str) -> Option<f64> {
    quantity::parse(s).map(|q| q as f64 / 1e9)
}

/// Cores as the shortest exact decimal: "0", "0.25", "12".
fn format_cores(nanos: i128) -> String {
    let whole = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Bytes as a binary quantity when exact ("512Mi"), else in bytes.
fn format_bytes(bytes: i128) -> String {
    for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let unit = 1i128 << shift;
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_sum_the_containers_and_leave_init_containers_out() {
        let t = json!({"spec": {
        "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "4Gi"}}}],
        "containers": [
            {"resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
            {"resources": {"requests": {"cpu": "0.5"}, "limits": {"cpu": "2"}}},
            {"name": "no-requests"}
        ]}});
        let r = Requests::of_template(&t);
        assert_eq!(r.cpu_nanos, 750_000_000);
        assert_eq!(r.memory_bytes, 128 << 20);
        assert_eq!(Requests::of_template(&json!({})), Requests::default());
    }

    #[test]
    fn removed_replicas_are_priced_and_more_than_the_baseline_saves_nothing() {
        let per = Requests {
            cpu_nanos: 250_000_000,
            memory_bytes: 128 << 20,
        };
        let s = Saved::removed(5, 1, per);
        assert_eq!(s.replicas, 4);
        assert_eq!(s.status().cpu, "1");
        assert_eq!(s.status().memory, "512Mi");
        assert_eq!(Saved::removed(2, 3, per), Saved::default());
        let total = s.plus(Saved::removed(3, 0, per));
        assert_eq!((total.replicas, total.status().cpu.as_str()), (7, "1.75"));
        assert_eq!(format_bytes(1000), "1000");
    }
}
