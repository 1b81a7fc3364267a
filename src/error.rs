//! The one error type. Each variant carries enough context for a log line to be actionable.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API call failed: {context}: {}", api_message(.source))]
    Kube {
        context: String,
        #[source]
        source: kube::Error,
    },

    #[error("invalid TDSet spec: {}", join(.0))]
    InvalidSpec(Vec<SpecError>),

    #[error("{kind} {namespace}/{name} exists and is not controlled by this TDSet")]
    ForeignObject {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("TDSet has no {0}; it cannot be reconciled")]
    MissingField(&'static str),

    /// A workload kept changing between reading it and writing it (409 on every try).
    #[error("{0}; tried again")]
    Contended(String),

    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: {message}")]
    Manifest { path: String, message: String },

    #[error("serialising {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },

    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),

    #[error("{0}")]
    Config(String),

    #[error("the reconcile did not finish within {0:?} (a request hung?); it is retried")]
    Deadline(std::time::Duration),
}

/// The API server's own message (HTTP code and reason) rather than kube's debug dump of the
/// whole Status: it reaches status conditions, Events and history, where people read it.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

impl Error {
    pub fn kube(context: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let context = context.into();
        move |source| Error::Kube { context, source }
    }

    /// Whether the API server answered 404 (the object is gone).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.is_not_found())
    }

    /// Whether the API server answered 409: a precondition (uid, resourceVersion) failed,
    /// e.g. the object was deleted and created again under the same name.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.is_conflict())
    }

    /// Whether the API server refused the request as invalid (400, 422): an admission policy
    /// or the object's own rules, not something a retry at once changes.
    pub fn is_refused(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 400 || s.code == 422)
    }

    /// A short, stable label for the `reconcile_errors_total{kind}` metric.
    /// Every `metric_label`, so the error counter's series exist (at 0) before the first error:
    /// a dashboard's "errors by kind" then shows zeros rather than nothing.
    pub const METRIC_LABELS: [&'static str; 10] = [
        "kube",
        "invalid_spec",
        "foreign_object",
        "missing_field",
        "contended",
        "input",
        "serialize",
        "metrics",
        "config",
        "deadline",
    ];

    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::InvalidSpec(_) => "invalid_spec",
            Error::ForeignObject { .. } => "foreign_object",
            Error::MissingField(_) => "missing_field",
            Error::Contended(_) => "contended",
            Error::Io { .. } | Error::Manifest { .. } => "input",
            Error::Serialize { .. } => "serialize",
            Error::Metrics(_) => "metrics",
            Error::Config(_) => "config",
            Error::Deadline(_) => "deadline",
        }
    }
}

fn join(errors: &[SpecError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A spec the API server accepted but the engine cannot evaluate, or a field that breaks the
/// schema (for manifests that never went through an API server, as with `preview`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// JSON path of the field, e.g. `spec.timeZone`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
