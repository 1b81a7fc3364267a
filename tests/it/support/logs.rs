//! Each test's own log: what the in-process operator logged while that test ran, and the
//! output of the processes it started (`OperatorProcess`), in `TDSET_TEST_LOG_DIR` (which
//! `scripts/run-tests.sh` sets per suite, keeps for the tests that failed and deletes for the
//! rest). Without the variable (a plain `cargo test`) nothing is logged, as before.
//!
//! libtest runs each test on a thread named after it, and `#[tokio::test]`'s runtime polls
//! every task the test spawns (the operator's among them) on that thread: the log line's
//! thread names its test. A multi-threaded runtime's workers are not named after a test; what
//! they log goes to the suite's `_shared.log`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use super::*;

/// The directory for this suite's test logs, if the run keeps them.
pub fn log_dir() -> Option<PathBuf> {
    std::env::var_os("TDSET_TEST_LOG_DIR").map(PathBuf::from)
}

/// The file name stem of the current test: its path with `::` as `.`, or `_shared`.
pub fn test_stem() -> String {
    let thread = std::thread::current();
    match thread.name() {
        Some(name) if name.contains("::") => name.replace("::", "."),
        _ => "_shared".to_string(),
    }
}

/// Where a process started by the current test logs: `<test>.<what>.log` in the log
/// directory (kept with the test's own log), or the temp dir when the run keeps none.
pub fn process_log(what: &str) -> PathBuf {
    match log_dir() {
        Some(dir) => {
            let _ = std::fs::create_dir_all(&dir);
            dir.join(format!("{}.{what}-{}.log", test_stem(), unique_suffix()))
        }
        None => std::env::temp_dir().join(format!("{}-{what}", unique_suffix())),
    }
}

/// Installs the per-test log once for this test binary (a no-op without a log directory).
/// The level is `TDSET_TEST_OPERATOR_LOG`, by default the operator at debug and the rest at
/// info: enough to follow one reconcile's decisions after the fact.
pub fn install_test_log() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let Some(dir) = log_dir() else { return };
        if std::fs::create_dir_all(&dir).is_err() {
            return;
        }
        let level = std::env::var("TDSET_TEST_OPERATOR_LOG")
            .unwrap_or_else(|_| "info,tdset_operator=debug".to_string());
        let filter = tracing_subscriber::EnvFilter::try_new(level)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_thread_names(true)
            .with_writer(PerTest {
                dir,
                files: Arc::default(),
            })
            .try_init();
    });
}

/// A `MakeWriter` that appends to the current test's file.
#[derive(Clone)]
struct PerTest {
    dir: PathBuf,
    files: Arc<Mutex<HashMap<String, File>>>,
}

struct Line {
    to: PerTest,
    stem: String,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for PerTest {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line {
            to: self.clone(),
            stem: test_stem(),
        }
    }
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut files = self
            .to
            .files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !files.contains_key(&self.stem) {
            let path = self.to.dir.join(format!("{}.log", self.stem));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            files.insert(self.stem.clone(), file);
        }
        match files.get_mut(&self.stem) {
            Some(file) => file.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
