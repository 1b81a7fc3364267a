//! Proxy ports this operator handed out lately (wake on request), and to which Service, whether
//! or not their slice is in the watch cache yet: two reconciles at once (TDSets going to sleep
//! at the same boundary) would otherwise both find a port free and give it to two Services,
//! and the proxy would send one Service's requests to the other's pods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longer than the watch cache takes to catch up with an apply.
const HANDED_OUT_FOR: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct PortsHandedOut(Mutex<BTreeMap<u16, (String, Instant)>>);

impl PortsHandedOut {
    /// Runs `plan` with the ports handed out lately to Services other than `service`
    /// (`namespace/name`), and records the ports it returns as `service`'s, in one step no
    /// other reconcile comes between.
    pub fn plan<P>(&self, service: &str, plan: impl FnOnce(&BTreeSet<u16>) -> (P, Vec<u16>)) -> P {
        let mut handed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        handed.retain(|_, (_, at)| at.elapsed() < HANDED_OUT_FOR);
        let others: BTreeSet<u16> = (handed.iter())
            .filter(|(_, (to, _))| to != service)
            .map(|(port, _)| *port)
            .collect();
        let (planned, ports) = plan(&others);
        for port in ports {
            handed.insert(port, (service.to_string(), Instant::now()));
        }
        planned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_handed_out_is_taken_for_every_other_service_not_its_own() {
        let ports = PortsHandedOut::default();
        ports.plan("ns/a", |others| {
            assert!(others.is_empty());
            ((), vec![20000])
        });
        ports.plan("ns/a", |others| {
            assert!(others.is_empty(), "its own port is not another's");
            ((), vec![20000])
        });
        ports.plan("ns/b", |others| {
            assert_eq!(others, &BTreeSet::from([20000]));
            ((), vec![])
        });
    }
}
