//! `vvm-host status`: who holds a lock, read only.
//!
//! ```text
//! vvm-host status [--storage URL] [--cluster-size N] [--json] NAME
//! ```
//!
//! For each key, the leader's address, the latest fencing token issued and,
//! where the driver can tell, the time left on the lease, then each waiting
//! candidate with its priority and how long it has stood. Never takes or
//! extends a lease, and never creates a store (the driver's read-only
//! open): a store that does not exist is its own exit status.

use std::{process::ExitCode, time::Duration};

use ttl_storage::TimeLeft;

use crate::store::{NoStore, StoreArgs, open_existing};

/// Exit status when no key has a leader.
const NO_LEADER: u8 = 3;
/// Exit status when the store does not exist (nothing was created).
const NO_STORE: u8 = 4;

/// `vvm-host status --help`'s closing text.
pub(crate) const AFTER_HELP: &str = "\
Exit status: 0 some key has a leader; 3 no key has a leader; 4 the store does
not exist (no file, table or keyspace: status creates nothing); 2 bad
options; 125 the store cannot be read. With --watch: 0 when interrupted
(SIGINT, SIGTERM); a store that fails while watched is a line
(`store error: ...`), not an exit.

Storage URLs: as for `vvm-host run` (see `vvm-host run --help`).";

/// `vvm-host status`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,

    /// One JSON object instead of a table (with --watch: one per line).
    #[arg(long)]
    json: bool,

    /// Keep watching: print one line per change (a new leader, no leader,
    /// the store failing or recovering) until interrupted. It only reads.
    #[arg(long)]
    watch: bool,
}

/// One key's status, as shown.
#[derive(Debug, serde::Serialize)]
struct Row {
    key: String,
    leader: Option<String>,
    fencing_token: Option<u64>,
    /// Milliseconds until the leader's record expires unless renewed;
    /// `None` without a leader, when it never expires, or when the store
    /// cannot tell.
    time_left_ms: Option<u64>,
    /// `"expires"`, `"never"`, `"unknown"` or `null` (no leader).
    expiry: Option<&'static str>,
    /// The candidates waiting for the key (announced by
    /// `elections::Elections::campaign`), highest priority first, then
    /// longest-waiting first.
    candidates: Vec<String>,
    /// The same candidates, with their priority and how long they have
    /// stood.
    waiting: Vec<Waiting>,
}

/// One waiting candidate, as shown.
#[derive(Debug, serde::Serialize)]
struct Waiting {
    address: String,
    priority: i32,
    /// Milliseconds since it started waiting, by its own clock against
    /// ours (informative only); `None` when its clock is ahead of ours.
    standing_ms: Option<u64>,
}

/// Runs `vvm-host status`.
pub(crate) fn main(args: &StatusArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("vvm-host status: cannot start the async runtime: {err}");
            return ExitCode::from(crate::exit::DEFAULT_ERROR);
        }
    };
    if args.watch {
        return match runtime.block_on(watch(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => failed(&err),
        };
    }
    match runtime.block_on(run(args)) {
        Ok(rows) => {
            let leaders = rows.iter().filter(|row| row.leader.is_some()).count();
            print(&rows, args.json, leaders);
            if leaders > 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(NO_LEADER)
            }
        }
        Err(err) => failed(&err),
    }
}

/// Says why status failed, once, and picks its exit status.
fn failed(err: &anyhow::Error) -> ExitCode {
    eprintln!("vvm-host status: {}", crate::error_text::chain(err));
    if err.is::<NoStore>() {
        ExitCode::from(NO_STORE)
    } else {
        ExitCode::from(crate::exit::DEFAULT_ERROR)
    }
}

/// `--watch`: one line per observation of each key, until SIGINT/SIGTERM.
async fn watch(args: &StatusArgs) -> anyhow::Result<()> {
    use futures::StreamExt;
    let storage = open_existing(&args.store).await?;
    let config = args.store.config("status".to_owned());
    config.validate()?;
    let mut streams = Vec::new();
    for index in 1..=config.cluster_size {
        let key = config.key(index)?;
        let label = key.to_string();
        let observer = elections::observe(storage.clone(), &key, Duration::from_secs(1));
        streams.push(observer.map(move |seen| (label.clone(), seen)).boxed());
    }
    let mut all = futures::stream::select_all(streams);
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let (key, seen) = tokio::select! {
            next = all.next() => match next {
                Some(item) => item,
                None => return Ok(()),
            },
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        };
        print_observation(&key, &seen, args.json);
    }
}

fn print_observation(key: &str, seen: &elections::Observation, json: bool) {
    use elections::Observation;
    let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let (state, leader, token, left, error) = match seen {
        Observation::Leader {
            value,
            fencing_token,
            time_left,
        } => (
            "leader",
            Some(String::from_utf8_lossy(value).into_owned()),
            *fencing_token,
            match time_left {
                TimeLeft::About(left) => Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
                _ => None,
            },
            None,
        ),
        Observation::NoLeader => ("no_leader", None, None, None, None),
        Observation::Unknown { error } => ("unknown", None, None, None, Some(error.clone())),
        _ => (
            "unknown",
            None,
            None,
            None,
            Some("unrecognised observation".to_owned()),
        ),
    };
    if json {
        let line = serde_json::json!({
            "time": at, "key": key, "state": state, "leader": leader,
            "fencing_token": token, "time_left_ms": left, "error": error,
        });
        println!("{line}");
        return;
    }
    let what = match (state, &leader, &error) {
        ("leader", Some(leader), _) => leader.clone(),
        (_, _, Some(error)) => format!("store error: {error}"),
        _ => "no leader".to_owned(),
    };
    let token = token.map_or_else(|| "-".to_owned(), |t| t.to_string());
    let left = left.map_or_else(
        || "-".to_owned(),
        |ms| format!("{:.1}s", Duration::from_millis(ms).as_secs_f64()),
    );
    println!("{at} {key} {what} token={token} time_left={left}");
}

async fn run(args: &StatusArgs) -> anyhow::Result<Vec<Row>> {
    let storage = open_existing(&args.store).await?;
    let config = args.store.config("status".to_owned());
    config.validate()?;
    let mut rows = Vec::new();
    for index in 1..=config.cluster_size {
        let key = config.key(index)?;
        let status = elections::inspect(&*storage, &key).await?;
        rows.push(Row {
            key: key.to_string(),
            leader: status
                .leader
                .map(|value| String::from_utf8_lossy(&value).into_owned()),
            fencing_token: status.latest_fencing_token,
            time_left_ms: match status.time_left {
                Some(TimeLeft::About(left)) => {
                    Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
                }
                _ => None,
            },
            expiry: status.time_left.map(|left| match left {
                TimeLeft::About(_) => "expires",
                TimeLeft::Never => "never",
                TimeLeft::Unknown => "unknown",
            }),
            candidates: status
                .candidates
                .iter()
                .map(|candidate| String::from_utf8_lossy(&candidate.value).into_owned())
                .collect(),
            waiting: status
                .candidates
                .iter()
                .map(|candidate| Waiting {
                    address: String::from_utf8_lossy(&candidate.value).into_owned(),
                    priority: candidate.priority,
                    standing_ms: std::time::SystemTime::now()
                        .duration_since(candidate.since)
                        .ok()
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                })
                .collect(),
        });
    }
    Ok(rows)
}

fn print(rows: &[Row], json: bool, leaders: usize) {
    if json {
        let body = serde_json::json!({ "leaders": leaders, "keys": rows });
        println!("{body}");
        return;
    }
    println!(
        // Tokens start from the wall clock in ns: 19 digits.
        "{:<24} {:<32} {:<19} TIME LEFT",
        "KEY", "LEADER", "FENCING TOKEN"
    );
    for row in rows {
        let token = row
            .fencing_token
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        let left = match (row.expiry, row.time_left_ms) {
            (Some("expires"), Some(ms)) => {
                format!("{:.1}s", Duration::from_millis(ms).as_secs_f64())
            }
            (Some(other), _) => other.to_owned(),
            (None, _) => "-".to_owned(),
        };
        println!(
            "{:<24} {:<32} {token:<19} {left}",
            row.key,
            row.leader.as_deref().unwrap_or("(none)")
        );
        for candidate in &row.waiting {
            let standing = candidate.standing_ms.map_or_else(
                || "?".to_owned(),
                |ms| format!("{:.1}s", Duration::from_millis(ms).as_secs_f64()),
            );
            println!(
                "  waiting: {}  (priority {}, for {standing})",
                candidate.address, candidate.priority
            );
        }
    }
}
