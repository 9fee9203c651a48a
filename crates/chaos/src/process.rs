//! What every chaos program shares about processes: its logging set-up,
//! where a run writes (its work directory and summary line), and signals
//! sent to the processes it started.

use std::{fmt::Display, io::Write, path::PathBuf};

use anyhow::Context;
use tokio::process::Command;

/// Where a chaos run writes: its logs (and histories), and the one summary
/// line it appends. Flattened into the command lines of `chaos` and
/// `chaos-fleet` (`--work-dir`, `--summary`).
#[derive(Debug, Clone, clap::Args)]
pub struct Output {
    /// Directory for logs and histories (default: a temporary one).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Also append `<name>: <summary line>` to this file (`name`: the
    /// engine, or `coordinator`).
    #[arg(long)]
    pub summary: Option<PathBuf>,
}

impl Output {
    /// The work directory given, else `<temp>/<prefix>-<pid>`.
    pub fn work_dir(&self, prefix: &str) -> PathBuf {
        self.work_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()))
        })
    }

    /// Appends `<name>: <line>` to the summary file, if one was given.
    ///
    /// # Errors
    ///
    /// The file cannot be opened or written.
    pub fn append_summary(&self, name: &str, line: impl Display) -> anyhow::Result<()> {
        let Some(path) = &self.summary else {
            return Ok(());
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(file, "{name}: {line}")?;
        Ok(())
    }
}

/// The start of every chaos program: [`init_logging`] with
/// `default_filter`, then its command line `A` (clap exits on `--help` or
/// a bad argument).
pub fn start<A: clap::Parser>(default_filter: &str) -> A {
    init_logging(default_filter);
    A::parse()
}

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
