//! The network between the operator and the API server: its sockets' timers, and a proxy
//! that black-holes the traffic.

use super::*;

/// A process's established TCP connections to `port`, each as the kernel's timer on it
/// (`/proc/net/tcp`'s `tr`: 0 none, 1 retransmit, 2 keepalive, 4 zero-window probe) and
/// when that timer fires (seconds from now).
pub fn tcp_timers_to(pid: u32, port: u16) -> Vec<(u8, f64)> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().to_string();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(rem), Some(st), Some(timer), Some(inode)) =
                (f.get(2), f.get(3), f.get(5), f.get(9))
            else {
                continue;
            };
            let rem_port = rem
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *st != "01" || rem_port != Some(port) || !inodes.contains(*inode) {
                continue;
            }
            let (tr, when) = timer.split_once(':').unwrap_or(("0", "0"));
            let ticks = u64::from_str_radix(when, 16).unwrap_or(0);
            out.push((
                u8::from_str_radix(tr, 16).unwrap_or(0),
                ticks as f64 / 100.0,
            ));
        }
    }
    out
}

/// A TCP proxy in front of the API server that can black-hole its traffic: while cut, every
/// byte either way is read and dropped, connections stay open and nothing is refused, as when
/// a network drops packets. For one replica's view of the API server.
pub struct BlackHole {
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// One flag per connection opened so far, for cutting only those.
    open: std::sync::Arc<std::sync::Mutex<Vec<std::sync::Arc<std::sync::atomic::AtomicBool>>>>,
    pub kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    /// A proxy to the server of `kubeconfig`, and a kubeconfig (in `dir`) that goes through it.
    pub async fn start(kubeconfig: &Path, dir: &Path) -> BlackHole {
        use std::sync::atomic::Ordering;
        let text = std::fs::read_to_string(kubeconfig).expect("reading the kubeconfig");
        let server = api_server_addr(kubeconfig);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let proxied = dir.join(format!("blackhole-{}.kubeconfig", unique_suffix()));
        std::fs::write(
            &proxied,
            text.replace(&format!("https://{server}"), &format!("https://{local}")),
        )
        .unwrap();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (cut, open) = (cut.clone(), open.clone());
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let (cut, server) = (cut.clone(), server.clone());
                    let this = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                    open.lock().unwrap().push(this.clone());
                    tokio::spawn(async move {
                        let Ok(outbound) = tokio::net::TcpStream::connect(&server).await else {
                            return;
                        };
                        let (ri, wi) = inbound.into_split();
                        let (ro, wo) = outbound.into_split();
                        // Each direction copies while the line is up and swallows while cut.
                        let pipe = |mut from: tokio::net::tcp::OwnedReadHalf,
                                    mut to: tokio::net::tcp::OwnedWriteHalf,
                                    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
                                    this: std::sync::Arc<std::sync::atomic::AtomicBool>| async move {
                            use tokio::io::{AsyncReadExt, AsyncWriteExt};
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                let dead =
                                    || cut.load(Ordering::SeqCst) || this.load(Ordering::SeqCst);
                                let n = match from.read(&mut buf).await {
                                    // A dead line does not carry the close either.
                                    Ok(0) | Err(_) if dead() => std::future::pending().await,
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => n,
                                };
                                if !dead()
                                    && to.write_all(&buf[..n]).await.is_err()
                                {
                                    return;
                                }
                            }
                        };
                        tokio::join!(
                            pipe(ri, wo, cut.clone(), this.clone()),
                            pipe(ro, wi, cut, this)
                        );
                    });
                }
            }
        });
        BlackHole {
            cut,
            open,
            kubeconfig: proxied,
            task,
        }
    }

    /// Every connection, open or new, goes dead (or comes back).
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }

    /// The connections open now go dead for good; new ones work, as when a load balancer's
    /// backend vanishes without a reset and the next connection reaches another.
    pub fn cut_open_connections(&self) {
        for c in self.open.lock().unwrap().iter() {
            c.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}
