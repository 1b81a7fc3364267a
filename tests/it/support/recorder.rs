//! A record of what one watch saw of a namespace's Deployments, in the order the API server
//! sent it: tests compare the order of changes (one resource's events are ordered), never a
//! wall clock.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::{WatchStreamExt, watcher};

use super::*;

/// What one watch saw of a Deployment: its name, `spec.replicas` and ready replicas.
pub type Seen = (String, i32, i32);

/// Records, in the order the API server sent them, every change of the namespace's
/// Deployments, until dropped.
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    pub fn start(client: &kube::Client, ns: &str) -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(d)) = stream.next().await {
                let name = d.metadata.name.clone().unwrap_or_default();
                let spec = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let ready = d
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0);
                let mut log = log.lock().unwrap();
                if log.iter().rev().find(|(n, _, _)| *n == name)
                    != Some(&(name.clone(), spec, ready))
                {
                    log.push((name, spec, ready));
                }
            }
        });
        Recorder { seen, task }
    }

    pub fn log(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Where in the log `name` was first seen as `found` accepts, after position `after`.
    pub fn first(
        &self,
        after: usize,
        name: &str,
        found: impl Fn(i32, i32) -> bool,
    ) -> Option<usize> {
        let log = self.log();
        (after..log.len()).find(|i| log[*i].0 == name && found(log[*i].1, log[*i].2))
    }

    /// Waits until `name` has been seen as `found` accepts (after `after`), and says where.
    pub async fn until(
        &self,
        after: usize,
        name: &str,
        what: &str,
        found: impl Fn(i32, i32) -> bool + Copy,
    ) -> usize {
        eventually(GUARD * 2, &format!("{name}: {what}"), || async move {
            self.first(after, name, found)
        })
        .await
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
