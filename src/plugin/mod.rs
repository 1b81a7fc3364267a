//! `kubectl tdset`: the same binary, installed as `kubectl-tdset` on the PATH (kubectl's plugin
//! convention). Previews a manifest or a live TDSet, adds overrides, suspends and resumes.
//!
//! Writes are server-side applies under the field manager `kubectl-tdset`, never a
//! read-modify-write: an override is one item of `spec.overrides` (a list keyed by start and
//! end), so applying the items this manager owns plus the new one leaves everyone else's
//! items alone, and a concurrent change by another writer is merged, not overwritten.

use chrono::{DateTime, Duration, Utc};
use clap::{Parser, Subcommand};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::api::{Override, TDCalendar, TDSet};
use crate::cli::{PreviewArgs, run_preview_of};
use crate::error::{Error, Result};
use crate::preview::rfc3339;
use crate::schedule::parse_duration;

pub mod doctor;
mod group;

/// The field manager of everything the plugin writes.
pub const PLUGIN_MANAGER: &str = "kubectl-tdset";

#[derive(Parser, Debug)]
#[command(
    name = "kubectl tdset",
    bin_name = "kubectl tdset",
    version,
    about = "Preview, override, suspend and resume TDSets (schedule.rs/v1)"
)]
pub struct PluginCli {
    /// The namespace; default: the kubeconfig context's, else "default".
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Path to the kubeconfig file; default: $KUBECONFIG, then ~/.kube/config.
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// What a TDSet will do: a live one by NAME, or a manifest with -f.
    Preview {
        /// A TDSet in the cluster.
        name: Option<String>,
        #[command(flatten)]
        args: PreviewArgs,
    },
    /// Hold a count for a while: from --from (default now) until --until, or for --for.
    Override {
        name: String,
        #[arg(long)]
        replicas: i32,
        /// HPA form: the HPA's maxReplicas meanwhile (at least --replicas); without it the
        /// ceiling the schedule has then stays in force.
        #[arg(long)]
        max_replicas: Option<i32>,
        #[command(flatten)]
        span: Span,
        /// Shown in status, Events and preview.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Wake a group up by hand: each workload runs its own count from --from (default now)
    /// until --until, or for --for (an override to the level own; group form only).
    Wake {
        name: String,
        #[command(flatten)]
        span: Span,
        /// Shown in status, Events and preview; default "woken by hand".
        #[arg(long)]
        reason: Option<String>,
    },
    /// Stop the operator from writing to this TDSet's workload.
    Suspend { name: String },
    /// Let the operator apply the schedule again, at once.
    Resume { name: String },
    /// The TDCalendars, how many days each holds, and the TDSets that name each.
    Calendars,
    /// The last changes of a TDSet's workload (status.history), with how late each landed.
    History { name: String },
    /// Who else writes the fields this TDSet sets; for Argo CD or Flux, the exact rule that
    /// makes it leave them (read-only).
    Doctor { name: String },
    /// What the schedules save now, per TDSet and in total (status.savings).
    Savings {
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
}

/// When an override (or a wake-up) holds.
#[derive(clap::Args, Debug)]
pub struct Span {
    /// Start (RFC 3339); default: now.
    #[arg(long, value_parser = crate::cli::parse_time)]
    from: Option<DateTime<Utc>>,
    /// End (RFC 3339, exclusive).
    #[arg(long, value_parser = crate::cli::parse_time, conflicts_with = "for_")]
    until: Option<DateTime<Utc>>,
    /// Length, e.g. 2h or 90m (instead of --until).
    #[arg(long = "for", id = "for_")]
    for_: Option<String>,
}

/// The override's span: from `from` (default now) until `until`, or for `for_`.
fn span(now: DateTime<Utc>, s: Span) -> Result<(DateTime<Utc>, DateTime<Utc>)> {
    let Span { from, until, for_ } = s;
    let start = from.unwrap_or(now);
    let end = match (until, for_) {
        (Some(u), _) => u,
        (None, Some(f)) => {
            let d = parse_duration(&f)
                .filter(|d| *d > Duration::zero())
                .ok_or_else(|| {
                    Error::Config(format!("--for {f:?} is not a duration such as 2h or 90m"))
                })?;
            start + d
        }
        (None, None) => {
            return Err(Error::Config("give --until TIME or --for DURATION".into()));
        }
    };
    if end <= start {
        return Err(Error::Config(format!(
            "the override would end ({}) before it starts ({})",
            rfc3339(end),
            rfc3339(start)
        )));
    }
    if end <= now {
        return Err(Error::Config(format!(
            "the override would end in the past ({}); nothing to do",
            rfc3339(end)
        )));
    }
    Ok((start, end))
}

/// Runs the plugin; returns what to print on stdout.
pub async fn run(cli: PluginCli, now: DateTime<Utc>) -> Result<String> {
    // A manifest needs no cluster.
    if let PluginCommand::Preview { name: None, args } = &cli.command {
        return crate::cli::run_preview(args, now);
    }
    let (client, default_ns) = connect(&cli).await?;
    let ns = cli.namespace.clone().unwrap_or(default_ns);
    let api: Api<TDSet> = Api::namespaced(client, &ns);
    match cli.command {
        PluginCommand::Preview {
            name: Some(name),
            args,
        } => {
            if args.file.is_some() {
                return Err(Error::Config(
                    "give either a NAME or -f FILE, not both".into(),
                ));
            }
            let tdset = get(&api, &ns, &name).await?;
            // The live calendars it names, as the operator reads them.
            let calendars: Api<TDCalendar> = Api::all(api.clone().into_client());
            let mut live = Vec::new();
            for c in &tdset.spec.calendars {
                let context = format!("reading TDCalendar {}", c.0);
                if let Some(found) = calendars
                    .get_opt(&c.0)
                    .await
                    .map_err(Error::kube(context))?
                {
                    live.push(found);
                }
            }
            // Their iCalendar documents, read as the operator reads them.
            let mut documents = std::collections::HashMap::new();
            for c in &live {
                if let Some(r) = &c.spec.ics {
                    let client = api.clone().into_client();
                    documents.insert(
                        c.metadata.name.clone().unwrap_or_default(),
                        document(client, r, now).await,
                    );
                }
            }
            let (schedule, missing) = crate::preview::compile(&name, &tdset, &live, &documents)?;
            // A request wake-up in force shows as the controller applies it.
            let schedule = crate::schedule::wake::woken(
                schedule,
                &tdset.spec,
                tdset.status.as_ref().and_then(|s| s.request_wake.as_ref()),
                now,
            );
            // So does the quiet the operator last read (`spec.idle`).
            let idle = tdset.status.as_ref().and_then(|s| s.idle.as_ref());
            let idleness = idle.and_then(crate::status::idle::idleness);
            let schedule = schedule.with_idle(&tdset.spec, idleness);
            let mut out = run_preview_of(&args, now, &schedule, &tdset)?;
            if args.output != crate::cli::Output::Json {
                out.extend(request_wake_note(&tdset, now));
                out.extend(idle_note(&tdset, &schedule, now));
            }
            if tdset.spec.scale_target_selector.is_some() {
                // A group: its workloads, and what each gets at the next transition.
                let at = args.at.unwrap_or(now);
                let client = api.clone().into_client();
                let members = group::members(&client, &ns, &tdset, &schedule, at).await?;
                out = match args.output {
                    crate::cli::Output::Json => {
                        let mut v: Value =
                            serde_json::from_str(&out).map_err(|source| Error::Serialize {
                                what: "the preview",
                                source,
                            })?;
                        v["workloads"] =
                            serde_json::to_value(&members).map_err(|source| Error::Serialize {
                                what: "the workloads",
                                source,
                            })?;
                        serde_json::to_string_pretty(&v).map_err(|source| Error::Serialize {
                            what: "the preview",
                            source,
                        })? + "\n"
                    }
                    _ => {
                        let next = schedule.next_transition(at).map(|n| rfc3339(n.at));
                        out + &group::table(&members, next.as_deref())
                    }
                };
            }
            Ok(
                match crate::preview::missing_calendars_note(&missing, "found in the cluster") {
                    Some(note) if args.output != crate::cli::Output::Json => format!("{out}{note}"),
                    _ => out,
                },
            )
        }
        PluginCommand::Preview { name: None, args } => crate::cli::run_preview(&args, now),
        PluginCommand::Override {
            name,
            replicas,
            max_replicas,
            span: s,
            reason,
        } => {
            let (start, end) = span(now, s)?;
            let tdset = get(&api, &ns, &name).await?;
            let new = Override {
                start: rfc3339(start),
                end: rfc3339(end),
                replica: Some(replicas),
                max_replica: max_replicas,
                reason,
            };
            let mine = with_override(owned_overrides(&tdset), new.clone(), now);
            apply(&api, &ns, &name, json!({"overrides": mine})).await?;
            Ok(format!(
                "tdset.schedule.rs/{name} override {} replicas{} from {} until {}{}\n",
                replicas,
                max_replicas
                    .map(|m| format!(" (maxReplicas {m})"))
                    .unwrap_or_default(),
                new.start,
                new.end,
                new.reason.map(|r| format!(" ({r})")).unwrap_or_default()
            ))
        }
        PluginCommand::Wake {
            name,
            span: s,
            reason,
        } => {
            let (start, end) = span(now, s)?;
            let tdset = get(&api, &ns, &name).await?;
            if tdset.spec.scale_target_selector.is_none() {
                return Err(Error::Config(format!(
                    "tdset.schedule.rs/{name} has no group (spec.scaleTargetSelector), so its \
                     workload has no own count to wake to; use `kubectl tdset override {name} \
                     --replicas N --for ...`"
                )));
            }
            let new = Override {
                start: rfc3339(start),
                end: rfc3339(end),
                replica: None,
                max_replica: None,
                reason: Some(reason.unwrap_or_else(|| "woken by hand".into())),
            };
            let mine = with_override(owned_overrides(&tdset), new.clone(), now);
            apply(&api, &ns, &name, json!({"overrides": mine})).await?;
            Ok(format!(
                "tdset.schedule.rs/{name} awake (each workload at its own count) from {} until {}\n",
                new.start, new.end
            ))
        }
        PluginCommand::Suspend { name } => {
            get(&api, &ns, &name).await?;
            apply(&api, &ns, &name, json!({"suspend": true})).await?;
            Ok(format!("tdset.schedule.rs/{name} suspended\n"))
        }
        PluginCommand::Resume { name } => {
            get(&api, &ns, &name).await?;
            apply(&api, &ns, &name, json!({"suspend": false})).await?;
            Ok(format!("tdset.schedule.rs/{name} resumed\n"))
        }
        PluginCommand::Calendars => calendars(api.into_client(), &ns).await,
        PluginCommand::Savings { all_namespaces } => {
            let client = api.into_client();
            let list = if all_namespaces {
                Api::<TDSet>::all(client).list(&ListParams::default()).await
            } else {
                Api::<TDSet>::namespaced(client, &ns)
                    .list(&ListParams::default())
                    .await
            }
            .map_err(Error::kube("listing TDSets"))?;
            Ok(savings_table(&list.items))
        }
        PluginCommand::Doctor { name } => {
            let tdset = get(&api, &ns, &name).await?;
            doctor::doctor(&api.into_client(), &ns, &tdset).await
        }
        PluginCommand::History { name } => {
            let tdset = get(&api, &ns, &name).await?;
            Ok(history_table(
                tdset.status.as_ref().map_or(&[][..], |s| &s.history[..]),
            ))
        }
    }
}

/// The dates of a calendar's iCalendar document, read from its ConfigMap for the years the
/// operator reads, or why there are none.
async fn document(
    client: kube::Client,
    r: &crate::api::IcsSource,
    now: DateTime<Utc>,
) -> crate::preview::Document {
    let c = &r.config_map_ref;
    let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, &c.namespace)
        .get_opt(&c.name)
        .await
        .map_err(|e| format!("ConfigMap {}/{} cannot be read: {e}", c.namespace, c.name))?
        .ok_or_else(|| format!("ConfigMap {}/{} does not exist", c.namespace, c.name))?;
    crate::schedule::ics::document_holidays(
        &cm.data.unwrap_or_default(),
        r,
        chrono::Datelike::year(&now),
    )
}

/// `kubectl tdset calendars`: the users are the TDSets of every namespace, or of the current
/// one when the caller may not list them cluster-wide (the table says which).
async fn calendars(client: kube::Client, ns: &str) -> Result<String> {
    let calendars = Api::<TDCalendar>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing TDCalendars"))?;
    let (tdsets, scope) = match Api::<TDSet>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => (list.items, "all namespaces".to_string()),
        Err(kube::Error::Api(status)) if status.is_forbidden() => {
            let list = Api::<TDSet>::namespaced(client, ns)
                .list(&ListParams::default())
                .await
                .map_err(Error::kube(format!("listing TDSets in {ns}")))?;
            (
                list.items,
                format!("namespace {ns} only: TDSets elsewhere are not listed"),
            )
        }
        Err(e) => return Err(Error::kube("listing TDSets")(e)),
    };
    let rows: Vec<[String; 3]> = calendars
        .items
        .iter()
        .map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            let users: Vec<String> = tdsets
                .iter()
                .filter(|t| t.spec.calendars.iter().any(|n| n.0 == name))
                .map(|t| {
                    format!(
                        "{}/{}",
                        t.metadata.namespace.as_deref().unwrap_or_default(),
                        t.metadata.name.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            let users = if users.is_empty() {
                "<none>".to_string()
            } else {
                users.join(",")
            };
            [
                name,
                crate::schedule::holiday_days(&c.spec.holidays).to_string(),
                users,
            ]
        })
        .collect();
    let mut out = table(&[["NAME".into(), "DAYS".into(), "USED-BY".into()]], &rows);
    out.push_str(&format!("(users from {scope})\n"));
    Ok(out)
}

/// `kubectl tdset history`: newest first, how late each change landed after its instant.
pub fn history_table(history: &[crate::api::HistoryEntry]) -> String {
    if history.is_empty() {
        return "no changes recorded yet\n".into();
    }
    let header = ["AT", "APPLIED", "LATE", "READY", "FROM", "TO", "REASON"].map(String::from);
    let rows: Vec<[String; 7]> = (history.iter().enumerate())
        .map(|(i, h)| {
            let at = crate::preview::parse_rfc3339(&h.at);
            let applied = h
                .applied_at
                .as_deref()
                .and_then(crate::preview::parse_rfc3339);
            let late = match (at, applied) {
                // Written ahead (`warmUp`): how far.
                (Some(a), Some(b)) if b < a => {
                    format!("{:.1}s ahead", (a - b).num_milliseconds() as f64 / 1000.0)
                }
                (Some(a), Some(b)) => {
                    format!("{:.1}s", (b - a).num_milliseconds() as f64 / 1000.0)
                }
                (_, None) => "failed".into(),
                _ => "?".into(),
            };
            // A scale-up: when its count was ready against its transition (`warmUp`'s aim).
            let ready = match (
                at,
                h.ready_at
                    .as_deref()
                    .and_then(crate::preview::parse_rfc3339),
            ) {
                (Some(a), Some(r)) if r > a => {
                    format!("{:.1}s late", (r - a).num_milliseconds() as f64 / 1000.0)
                }
                (Some(a), Some(r)) => {
                    format!("{:.1}s early", (a - r).num_milliseconds() as f64 / 1000.0)
                }
                (_, None) if h.rises() && applied.is_some() => "not yet".into(),
                _ => "-".into(),
            };
            let reason = match &h.message {
                Some(m) => format!("{} ({m})", h.reason),
                None => h.reason.clone(),
            };
            let from = h.from.map_or_else(|| "-".into(), |f| f.to_string());
            let to = h.to.map_or_else(|| "own".to_string(), |n| n.to_string());
            // A group: the level, and the sum of its workloads' counts beside it (the level
            // before is the one the entry before set).
            let (from, to) = match &h.level {
                Some(level) => {
                    let before = history.get(i + 1).and_then(|e| e.level.as_deref());
                    let from = match before {
                        Some(b) => format!("{b} ({from} in all)"),
                        None => format!("{from} in all"),
                    };
                    (from, format!("{level} ({to} in all)"))
                }
                None => (from, to),
            };
            [
                h.at.clone(),
                h.applied_at.clone().unwrap_or_else(|| "-".into()),
                late,
                ready,
                from,
                to,
                reason,
            ]
        })
        .collect();
    table(&[header], &rows)
}

/// Each TDSet's `status.savings`, and the total: replicas, CPU cores and memory removed now.
pub fn savings_table(tdsets: &[TDSet]) -> String {
    use crate::workload::savings::quantity_value;
    let header = ["NAMESPACE", "NAME", "FORM", "REPLICAS", "CPU", "MEMORY"].map(String::from);
    let mut total = (0i64, 0f64, 0f64);
    let mut rows: Vec<[String; 6]> = tdsets
        .iter()
        .map(|t| {
            let form = crate::workload::Source::of(&t.spec).map_or("?", |s| s.form_name());
            let s = t.status.as_ref().and_then(|s| s.savings.as_ref());
            if let Some(s) = s {
                total.0 += s.replicas;
                total.1 += quantity_value(&s.cpu).unwrap_or(0.0);
                total.2 += quantity_value(&s.memory).unwrap_or(0.0);
            }
            [
                t.metadata.namespace.clone().unwrap_or_default(),
                t.metadata.name.clone().unwrap_or_default(),
                form.to_string(),
                s.map_or_else(|| "-".into(), |s| s.replicas.to_string()),
                s.map_or_else(|| "-".into(), |s| s.cpu.clone()),
                s.map_or_else(|| "-".into(), |s| s.memory.clone()),
            ]
        })
        .collect();
    rows.sort();
    rows.push([
        "TOTAL".into(),
        String::new(),
        String::new(),
        total.0.to_string(),
        format!("{}", (total.1 * 1000.0).round() / 1000.0),
        human_bytes(total.2),
    ]);
    table(&[header], &rows)
}

/// Bytes in binary units, one decimal: "1.5Gi".
fn human_bytes(b: f64) -> String {
    let mut v = b;
    for unit in ["", "Ki", "Mi", "Gi", "Ti"] {
        if v < 1024.0 || unit == "Ti" {
            return if unit.is_empty() {
                format!("{v:.0}")
            } else {
                format!("{v:.1}{unit}")
            };
        }
        v /= 1024.0;
    }
    format!("{b}")
}

/// Left-aligned columns, two spaces apart, as kubectl prints them (the last one unpadded).
fn table<const N: usize>(header: &[[String; N]], rows: &[[String; N]]) -> String {
    let all: Vec<&[String; N]> = header.iter().chain(rows).collect();
    let widths: Vec<usize> = (0..N)
        .map(|i| all.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    all.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, cell) in r.iter().enumerate() {
                if i + 1 == N {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                }
            }
            line.push('\n');
            line
        })
        .collect()
}

/// A client from the kubeconfig (with --kubeconfig and --context), and the context's namespace.
async fn connect(cli: &PluginCli) -> Result<(kube::Client, String)> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                Error::Config(format!("reading kubeconfig {}: {e}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| Error::Config(format!("kubeconfig: {e}")))?;
    let ns = config.default_namespace.clone();
    let client = kube::Client::try_from(config)
        .map_err(|e| Error::Config(format!("building the API client: {e}")))?;
    Ok((client, ns))
}

/// The TDSet, or an error a person can act on.
async fn get(api: &Api<TDSet>, ns: &str, name: &str) -> Result<TDSet> {
    api.get(name).await.map_err(|e| match e {
        kube::Error::Api(s) if s.is_not_found() => {
            Error::Config(format!("TDSet {name} not found in namespace {ns}"))
        }
        kube::Error::Api(s) if s.is_forbidden() => Error::Config(format!(
            "no permission to read TDSet {name} in namespace {ns}: {}",
            s.message
        )),
        e => Error::kube(format!("reading TDSet {ns}/{name}"))(e),
    })
}

/// Server-side apply of `spec` fields under the plugin's field manager.
async fn apply(api: &Api<TDSet>, ns: &str, name: &str, spec: Value) -> Result<()> {
    let body = json!({"apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": name}, "spec": spec});
    api.patch(
        name,
        &PatchParams::apply(PLUGIN_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
    .map_err(|e| match e {
        kube::Error::Api(s) if s.is_forbidden() => Error::Config(format!(
            "no permission to patch TDSet {name} in namespace {ns}: {}",
            s.message
        )),
        kube::Error::Api(s) if s.is_invalid() => {
            Error::Config(format!("the API server refused the change: {}", s.message))
        }
        e => Error::kube(format!("applying TDSet {ns}/{name}"))(e),
    })
}

/// What the plugin applies: the overrides it applied earlier that have not ended (ended ones
/// change nothing, and the list has a maximum), without one of the same start and end, and
/// the new one.
fn with_override(mine: Vec<Override>, new: Override, now: DateTime<Utc>) -> Vec<Override> {
    let ended = |o: &Override| {
        DateTime::parse_from_rfc3339(&o.end).is_ok_and(|end| end.with_timezone(&Utc) <= now)
    };
    let mut out: Vec<Override> = mine
        .into_iter()
        .filter(|o| {
            !ended(o)
                && (o.start.as_str(), o.end.as_str()) != (new.start.as_str(), new.end.as_str())
        })
        .collect();
    out.push(new);
    out
}

/// The overrides this plugin's field manager applied earlier (so applying them again with a
/// new one keeps them), read from the TDSet's managedFields.
fn owned_overrides(tdset: &TDSet) -> Vec<Override> {
    let keys: Vec<(String, String)> = tdset
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m: &&ManagedFieldsEntry| {
            m.manager.as_deref() == Some(PLUGIN_MANAGER) && m.operation.as_deref() == Some("Apply")
        })
        .filter_map(|m| {
            m.fields_v1
                .as_ref()?
                .0
                .pointer("/f:spec/f:overrides")?
                .as_object()
                .cloned()
        })
        .flat_map(|items| items.into_iter().map(|(k, _)| k))
        .filter_map(|k| {
            let key: Value = serde_json::from_str(k.strip_prefix("k:")?).ok()?;
            Some((
                key.get("start")?.as_str()?.to_string(),
                key.get("end")?.as_str()?.to_string(),
            ))
        })
        .collect();
    tdset
        .spec
        .overrides
        .iter()
        .filter(|o| keys.iter().any(|(s, e)| *s == o.start && *e == o.end))
        .cloned()
        .collect()
}

impl PluginCli {
    /// Whether this process was started as a kubectl plugin (`kubectl-tdset`).
    pub fn invoked_as_plugin() -> bool {
        std::env::args_os()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().starts_with("kubectl-tdset"))
            })
            .unwrap_or(false)
    }
}

/// A line on idleness (`spec.idle`) as the operator last read it, and when it would put the
/// workloads to sleep if nothing comes, for `preview NAME`.
fn idle_note(
    tdset: &TDSet,
    schedule: &crate::schedule::Schedule,
    now: DateTime<Utc>,
) -> Option<String> {
    tdset.spec.idle.as_ref()?;
    let Some(idle) = tdset.status.as_ref().and_then(|s| s.idle.as_ref()) else {
        return Some("note: idle: not read yet\n".into());
    };
    if idle.phase == crate::api::IdlePhase::Unknown {
        return Some(format!(
            "note: idle: Unknown ({}): a signal cannot answer, idleness puts nothing to sleep\n",
            idle.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    if idle.phase == crate::api::IdlePhase::Active {
        return Some("note: idle: Active: traffic came within idle.after\n".into());
    }
    let since = idle
        .quiet_since
        .as_deref()
        .map(|s| format!(" since {s}"))
        .unwrap_or_default();
    let sleep = match schedule.idle_sleeps_at(now) {
        Some(at) if at <= now => format!("asleep by idleness since {}", rfc3339(at)),
        Some(at) => format!("asleep by idleness from {} if nothing comes", rfc3339(at)),
        None => "idleness puts nothing to sleep before the schedule's look-ahead ends".into(),
    };
    Some(format!("note: idle: {:?}{since}; {sleep}\n", idle.phase))
}

/// A line on the request wake-up in force, for `preview NAME`.
fn request_wake_note(tdset: &TDSet, now: DateTime<Utc>) -> Option<String> {
    let recorded = tdset.status.as_ref()?.request_wake.as_ref()?;
    let (since, until) = crate::schedule::wake::span(&tdset.spec, Some(recorded), now)?;
    let request = recorded
        .request
        .as_ref()
        .map(|r| format!(" by {}", r.describe()))
        .unwrap_or_default();
    Some(format!(
        "note: woken{request} at {}, until {} ({} requests so far, phase {})\n",
        rfc3339(since),
        rfc3339(until),
        recorded.requests.unwrap_or(0),
        recorded
            .phase
            .map_or_else(|| "not yet reconciled".to_string(), |p| p.to_string()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group's change says the level it set, and the sum of its workloads' counts beside it.
    #[test]
    fn a_groups_history_says_the_level_and_the_sum_beside_it() {
        let entry = |level: &str, from: i32, to: Option<i32>| crate::api::HistoryEntry {
            at: "2026-05-04T20:00:00Z".into(),
            applied_at: Some("2026-05-04T20:00:00.300Z".into()),
            from: Some(from),
            to,
            level: Some(level.into()),
            reason: "window night is active".into(),
            ..Default::default()
        };
        // Newest first: asleep (own -> 0), after a morning that woke it (0 -> own).
        let table = history_table(&[entry("0", 6, Some(0)), entry("own", 0, Some(6))]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].contains("own (6 in all)"), "{table}");
        assert!(lines[1].contains("0 (0 in all)"), "{table}");
        // The oldest: the level before it is not known, the sum is.
        assert!(lines[2].contains("0 in all"), "{table}");
        assert!(lines[2].contains("own (6 in all)"), "{table}");
    }

    /// A change written ahead (`warmUp`) says how far ahead; a late one how late.
    #[test]
    fn history_says_how_late_or_how_far_ahead_each_change_was_written() {
        let entry = |applied: &str| crate::api::HistoryEntry {
            at: "2026-05-04T09:00:00Z".into(),
            applied_at: Some(applied.into()),
            ready_at: None,
            from: Some(2),
            to: Some(10),
            level: None,
            reason: "window office is active".into(),
            message: None,
        };
        let table = history_table(&[
            entry("2026-05-04T08:57:00.250Z"),
            entry("2026-05-04T09:00:01.500Z"),
        ]);
        assert!(table.contains("179.8s ahead"), "{table}");
        assert!(table.contains(" 1.5s "), "{table}");
        // And when the new count was ready: early, late, or not yet.
        let ready = |at: Option<&str>| crate::api::HistoryEntry {
            ready_at: at.map(Into::into),
            ..entry("2026-05-04T08:59:00Z")
        };
        let table = history_table(&[
            ready(Some("2026-05-04T08:59:57Z")),
            ready(Some("2026-05-04T09:00:42.5Z")),
            ready(None),
        ]);
        assert!(table.contains("3.0s early"), "{table}");
        assert!(table.contains("42.5s late"), "{table}");
        assert!(table.contains("not yet"), "{table}");
    }

    fn o(start: &str, end: &str) -> Override {
        Override {
            start: start.into(),
            end: end.into(),
            replica: Some(1),
            max_replica: None,
            reason: None,
        }
    }

    #[test]
    fn overrides_that_have_ended_are_not_applied_again() {
        let now = DateTime::parse_from_rfc3339("2026-11-24T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        // Daily use for months: only what has not ended stays, so the list never fills up.
        let mut mine = vec![];
        for day in 0..60 {
            let at = now - chrono::Duration::days(60 - day);
            mine = with_override(
                mine,
                o(&rfc3339(at), &rfc3339(at + chrono::Duration::hours(1))),
                now,
            );
        }
        assert_eq!(mine.len(), 1, "{mine:?}");
        let kept = with_override(
            vec![
                o("2026-11-24T11:00:00Z", "2026-11-24T13:00:00Z"),
                o("2026-11-24T00:00:00Z", "2026-11-24T12:00:00Z"),
            ],
            o("2026-11-25T00:00:00Z", "2026-11-25T01:00:00Z"),
            now,
        );
        assert_eq!(
            kept,
            vec![
                o("2026-11-24T11:00:00Z", "2026-11-24T13:00:00Z"),
                o("2026-11-25T00:00:00Z", "2026-11-25T01:00:00Z")
            ]
        );
    }
}
