//! Proxy ports this operator handed out lately (wake on request), and to which Service, whether
//! or not their slice is in the watch cache yet: two reconciles at once (TDSets going to sleep
//! at the same boundary) would otherwise both find a port free and give it to two Services,
//! and the proxy would send one Service's requests to the other's pods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longer than the watch cache takes to catch up with an apply.
const HANDED_OUT_FOR: Duration = Duration::from_secs(60);

/// Each port: the Service it is taken for, and until when.
#[derive(Debug, Default)]
pub struct PortsHandedOut(Mutex<BTreeMap<u16, (String, Instant)>>);

impl PortsHandedOut {
    /// Runs `plan` with the ports handed out lately to Services other than `service`
    /// (`namespace/name`), and records the ports it returns as `service`'s, in one step no
    /// other reconcile comes between.
    pub fn plan<P>(&self, service: &str, plan: impl FnOnce(&BTreeSet<u16>) -> (P, Vec<u16>)) -> P {
        let mut handed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        handed.retain(|_, (_, until)| *until > now);
        let others: BTreeSet<u16> = (handed.iter())
            .filter(|(_, (to, _))| to != service)
            .map(|(port, _)| *port)
            .collect();
        let (planned, ports) = plan(&others);
        for port in ports {
            let until = now + HANDED_OUT_FOR;
            let entry = handed.entry(port).or_insert((service.to_string(), until));
            if entry.0 == service {
                entry.1 = entry.1.max(until);
            } else {
                *entry = (service.to_string(), until);
            }
        }
        planned
    }

    /// `ports` went from `service`'s slices while the proxy may still route them
    /// (`workload::intercept::ports_left`): taken for it `for_` more, for no other Service.
    pub fn left(&self, service: &str, ports: &[u16], for_: Duration) {
        let mut handed = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let until = now + for_;
        for port in ports {
            let entry = (handed.entry(*port)).or_insert((service.to_string(), until));
            if entry.0 == service {
                entry.1 = entry.1.max(until);
            } else if entry.1 <= now {
                // Another Service's, past its time (not yet swept): this one's now.
                *entry = (service.to_string(), until);
            }
            // Else handed to another Service since: that one's (it holds it longer anyway).
        }
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

    #[test]
    fn a_port_a_deleted_slice_held_is_taken_for_its_service_for_as_long_as_asked() {
        let ports = PortsHandedOut::default();
        ports.left("ns/a", &[20001], Duration::from_secs(90));
        ports.plan("ns/b", |others| {
            assert_eq!(others, &BTreeSet::from([20001]), "not for another Service");
            ((), vec![])
        });
        ports.plan("ns/a", |others| {
            assert!(others.is_empty(), "its own Service may take it again");
            ((), vec![])
        });
        // Past its time: free.
        ports.left("ns/c", &[20002], Duration::ZERO);
        ports.plan("ns/b", |others| {
            assert!(!others.contains(&20002));
            ((), vec![])
        });
    }
}
