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

    /// One JSON object instead of a table (with --watch: one per line, the
    /// same fields plus `time`, `change` and, on store trouble, `error`).
    #[arg(long)]
    json: bool,

    /// Keep watching: print one line per change (a new leader with its
    /// fencing token, no leader, the store failing or recovering) until
    /// interrupted. It only reads.
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

/// How often `--watch` re-reads a key. On a store that reports its writes
/// (`TtlStorage::changes`: etcd, Valkey, PostgreSQL) every leadership comes
/// from that report and the reads only see expiry and store trouble;
/// elsewhere a leadership shorter than this may be missed. After each
/// change it reads again within 10 ms.
const WATCH_POLL: Duration = Duration::from_millis(250);

/// `--watch`: one line per change of each key, until SIGINT/SIGTERM.
async fn watch(args: &StatusArgs) -> anyhow::Result<()> {
    use futures::StreamExt;
    let storage = open_existing(&args.store).await?;
    let config = args.store.config("status".to_owned());
    config.validate()?;
    let mut streams = Vec::new();
    for index in 1..=config.cluster_size {
        let key = config.key(index)?;
        let observer = elections::observe(storage.clone(), &key, WATCH_POLL);
        streams.push(observer.map(move |seen| (key.clone(), seen)).boxed());
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
        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        let change = Change::of(&seen);
        let mut row = match &seen {
            elections::Observation::Leader {
                value,
                fencing_token,
                time_left,
            } => Row::new(&key, Some(value), *fencing_token, Some(*time_left)),
            _ => Row::new(&key, None, None, None),
        };
        // The candidates are not part of the observation: one more read
        // (a failure leaves them empty; the change is still reported).
        if change != Change::StoreError
            && let Ok(status) = elections::inspect(&*storage, &key).await
        {
            row.add_candidates(&status.candidates);
        }
        let error = match &seen {
            elections::Observation::Unknown { error } => Some(error.as_str()),
            _ => None,
        };
        print_change(&at, change, &row, error, args.json);
    }
}

/// What a `--watch` line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Change {
    /// A leadership (a new one, or the first seen).
    Leader,
    /// Nobody leads (no record, or a hand-over marker).
    NoLeader,
    /// The store could not be read (once per outage).
    StoreError,
}

impl Change {
    fn of(seen: &elections::Observation) -> Self {
        match seen {
            elections::Observation::Leader { .. } => Self::Leader,
            elections::Observation::NoLeader => Self::NoLeader,
            _ => Self::StoreError,
        }
    }
}

/// One `--watch` line: the one-shot row of the key, with the time and the
/// change (JSON), or a line of text.
fn print_change(at: &str, change: Change, row: &Row, error: Option<&str>, json: bool) {
    if json {
        #[derive(serde::Serialize)]
        struct Line<'a> {
            time: &'a str,
            change: Change,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a str>,
            #[serde(flatten)]
            row: &'a Row,
        }
        match serde_json::to_string(&Line {
            time: at,
            change,
            error,
            row,
        }) {
            Ok(line) => println!("{line}"),
            Err(err) => eprintln!("vvm-host status: cannot encode a line: {err}"),
        }
        return;
    }
    let what = match (change, &row.leader, error) {
        (Change::Leader, Some(leader), _) => leader.clone(),
        (_, _, Some(error)) => format!("store error: {error}"),
        _ => "no leader".to_owned(),
    };
    let token = row
        .fencing_token
        .map_or_else(|| "-".to_owned(), |t| t.to_string());
    let left = row.time_left_ms.map_or_else(
        || "-".to_owned(),
        |ms| format!("{:.1}s", Duration::from_millis(ms).as_secs_f64()),
    );
    println!("{at} {} {what} token={token} time_left={left}", row.key);
}

impl Row {
    /// A row with no candidates yet.
    fn new(
        key: &ttl_storage::Key,
        leader: Option<&[u8]>,
        fencing_token: Option<u64>,
        time_left: Option<TimeLeft>,
    ) -> Self {
        Self {
            key: key.to_string(),
            leader: leader.map(|value| String::from_utf8_lossy(value).into_owned()),
            fencing_token,
            time_left_ms: match time_left {
                Some(TimeLeft::About(left)) => {
                    Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
                }
                _ => None,
            },
            expiry: time_left.map(|left| match left {
                TimeLeft::About(_) => "expires",
                TimeLeft::Never => "never",
                TimeLeft::Unknown => "unknown",
            }),
            candidates: Vec::new(),
            waiting: Vec::new(),
        }
    }

    fn add_candidates(&mut self, listed: &[elections::Candidate]) {
        let now = std::time::SystemTime::now();
        for candidate in listed {
            let address = String::from_utf8_lossy(&candidate.value).into_owned();
            self.candidates.push(address.clone());
            self.waiting.push(Waiting {
                address,
                priority: candidate.priority,
                standing_ms: now
                    .duration_since(candidate.since)
                    .ok()
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            });
        }
    }
}

async fn run(args: &StatusArgs) -> anyhow::Result<Vec<Row>> {
    let storage = open_existing(&args.store).await?;
    let config = args.store.config("status".to_owned());
    config.validate()?;
    let mut rows = Vec::new();
    for index in 1..=config.cluster_size {
        let key = config.key(index)?;
        let status = elections::inspect(&*storage, &key).await?;
        let mut row = Row::new(
            &key,
            status.leader.as_deref(),
            status.latest_fencing_token,
            status.time_left,
        );
        row.add_candidates(&status.candidates);
        rows.push(row);
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
