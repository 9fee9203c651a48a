//! What every chaos program shares about processes: its logging set-up,
//! and signals sent to the processes it started.

use anyhow::Context;
use tokio::process::Command;

/// Sets up `tracing` to standard error for one of the chaos programs:
/// `RUST_LOG` when set, else `default_filter` (such as `"warn"`).
pub fn init_logging(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .init();
}

/// Sends `kill -s <sig> <pid>` (`STOP`, `CONT`, `KILL`) to a process this
/// run started and still holds, so the pid is its own.
pub(crate) async fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .await
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -s {sig} {pid} failed");
    Ok(())
}
