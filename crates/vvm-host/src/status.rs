//! `vvm-host status`: who leads each key, read only.
//!
//! ```text
//! vvm-host status [--storage URL] [--key-prefix P] [--cluster-size N] [--json]
//! ```
//!
//! For each key, the leader's address, the latest fencing token issued and,
//! where the driver can tell, the time left on the lease. Exit 0 when some
//! key has a leader, 3 when none has; never takes or extends a lease.

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use ttl_storage::{DynTtlStorage, TimeLeft};

use crate::cli::StoreArgs;

/// The first argument that selects this subcommand.
pub(crate) const STATUS_ARG: &str = "status";

/// Exit status when no key has a leader.
const NO_LEADER: u8 = 3;

/// Show who leads each key (read only).
#[derive(Debug, Parser)]
#[command(name = "vvm-host status", version)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,

    /// One JSON object instead of a table.
    #[arg(long)]
    json: bool,
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
}

/// Runs `vvm-host status` with `args` (after the subcommand's name).
pub(crate) fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let args = StatusArgs::parse_from(std::iter::once("vvm-host status".into()).chain(args));
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
    match runtime.block_on(run(&args)) {
        Ok(rows) => {
            let leaders = rows.iter().filter(|row| row.leader.is_some()).count();
            print(&rows, args.json, leaders);
            if leaders > 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(NO_LEADER)
            }
        }
        Err(err) => {
            eprintln!("vvm-host status: {err:#}");
            ExitCode::from(crate::exit::DEFAULT_ERROR)
        }
    }
}

async fn run(args: &StatusArgs) -> anyhow::Result<Vec<Row>> {
    let url = match &args.store.storage {
        Some(url) => url.clone(),
        None => crate::default_storage::default_url()?,
    };
    let storage: DynTtlStorage = url.open().await?;
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
        "{:<24} {:<32} {:<14} TIME LEFT",
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
            "{:<24} {:<32} {token:<14} {left}",
            row.key,
            row.leader.as_deref().unwrap_or("(none)")
        );
    }
}
