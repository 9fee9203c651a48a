//! `vvm-host`: run a command only while this node leads, in the spirit of
//! `consul lock` / `etcdctl lock`, so a cron job or a daemon runs on exactly
//! one node of a cluster (or on `--cluster-size` nodes at most).
//!
//! ```text
//! vvm-host [OPTIONS] -- COMMAND [ARGS...]
//! ```
//!
//! It provides and launches a [`vvm_orch::Vvm`] whose service pipeline is
//! COMMAND (or a demo service), waits for SIGINT, SIGTERM or a VVM problem,
//! then shuts the VVM down: the command is stopped (SIGTERM, then SIGKILL
//! after the grace period) before leadership is released. See `--help` for
//! the options and exit statuses.

mod cli;
mod command;
mod demo;
mod killer;
mod storage_url;

use std::{
    io::IsTerminal,
    process::ExitCode,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use anyhow::Context;
use clap::Parser;
use elections::Killer;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;
use ttl_storage::DynTtlStorage;
use vvm_orch::{ServicePipeline, Vvm, VvmConfig, VvmProblem};

use crate::{
    cli::Args,
    command::{CommandPipeline, Outcome},
    demo::DemoPipeline,
    killer::{CommandGroup, HostKiller},
    storage_url::StorageUrl,
};

/// Exit status for errors of vvm-host itself (storage, runtime).
const EXIT_ERROR: u8 = 1;
/// Exit status for bad options (as clap uses).
const EXIT_USAGE: u8 = 2;
/// Exit status when no leadership was acquired within the acquisition duration.
const EXIT_NO_LEADERSHIP: u8 = 3;
/// Exit status after a leadership loss.
const EXIT_LEADERSHIP_LOST: u8 = 4;

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = match EnvFilter::try_new(&args.log) {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("vvm-host: invalid --log filter {:?}: {err}", args.log);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = match args.vvm_config() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("vvm-host: {err}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("vvm-host: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(run(args, config)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("vvm-host: error: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

async fn run(args: Args, config: VvmConfig) -> anyhow::Result<u8> {
    let url = match &args.storage {
        Some(url) => url.clone(),
        None => StorageUrl::default_url()?,
    };
    let storage = url
        .open()
        .await
        .with_context(|| format!("cannot open storage {url}"))?;
    tracing::info!(storage = %url, address = %config.address, cluster_size = config.cluster_size, "vvm-host starting");
    let group = CommandGroup::default();
    let killer = Arc::new(HostKiller {
        group: group.clone(),
    });
    match CommandPipeline::new(args.command, args.grace_period, group) {
        Some((pipeline, outcome)) => host(config, storage, pipeline, killer, Some(outcome)).await,
        None => host(config, storage, DemoPipeline, killer, None).await,
    }
}

/// Launches the VVM, waits for a signal or a problem, shuts down, and maps
/// the outcome to an exit status.
async fn host<P: ServicePipeline>(
    config: VvmConfig,
    storage: DynTtlStorage,
    pipeline: P,
    killer: Arc<dyn Killer>,
    child: Option<Arc<Mutex<Option<Outcome>>>>,
) -> anyhow::Result<u8> {
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let vvm = Vvm::provide(config, storage, pipeline)?.with_killer(killer);
    tracing::info!(value = vvm.value(), "acquiring leadership");
    let (vvm, problem) = vvm.launch();

    let requested_by = tokio::select! {
        () = problem.raised() => None,
        _ = sigint.recv() => Some("SIGINT"),
        _ = sigterm.recv() => Some("SIGTERM"),
    };
    if let Some(signal) = requested_by {
        tracing::info!(signal, "signal received; shutting down");
    }
    // Further signals during shutdown are only logged: the command still
    // gets its grace period, and leadership is released after it stopped.
    let watcher = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = sigint.recv() => {}
                _ = sigterm.recv() => {}
            }
            tracing::warn!(
                "signal received while shutting down; the services still get their grace period"
            );
        }
    });
    let started = Instant::now();
    let result = vvm.shutdown().await;
    watcher.abort();
    tracing::info!(elapsed = ?started.elapsed(), "shut down; leadership released");

    let child_outcome = child.and_then(|cell| *cell.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(match result {
        Ok(()) => 0,
        Err(VvmProblem::ServicesFinished | VvmProblem::Service(_)) if child_outcome.is_some() => {
            child_outcome.map_or(EXIT_ERROR, Outcome::exit_code)
        }
        Err(problem @ VvmProblem::LeadershipAcquisition { .. }) => {
            tracing::error!(%problem, "giving up");
            EXIT_NO_LEADERSHIP
        }
        Err(problem @ VvmProblem::LeadershipLost { .. }) => {
            tracing::error!(%problem, "leadership lost; the command was stopped");
            EXIT_LEADERSHIP_LOST
        }
        Err(problem) => {
            tracing::error!(%problem, "failed");
            EXIT_ERROR
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use storage_mem::MemStorage;
    use ttl_storage::{Key, Ttl, TtlStorage};

    use super::*;

    /// Leadership loss stops the command (SIGTERM to its group) before
    /// vvm-host exits with EXIT_LEADERSHIP_LOST.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn leadership_loss_stops_the_command_and_exits_non_zero() {
        let storage = MemStorage::new();
        let mut config = VvmConfig::new("test");
        // Long enough that the production killer (0.8 x 4 s after the last
        // renewal) never fires while the command stops.
        config.leadership_duration = Duration::from_secs(4);
        let marker = std::env::temp_dir().join(format!("vvm-host-loss-{}", std::process::id()));
        let script = format!(
            "trap 'echo stopped > {}; exit 0' TERM; while :; do sleep 0.05; done",
            marker.display()
        );
        let command = ["sh", "-c", &script].map(std::ffi::OsString::from).to_vec();
        let group = CommandGroup::default();
        let (pipeline, outcome) =
            CommandPipeline::new(command, Duration::from_secs(5), group.clone()).unwrap();
        let killer = elections::RecordingKiller::new();
        let host = tokio::spawn(host(
            config,
            Arc::new(storage.clone()),
            pipeline,
            killer.clone(),
            Some(outcome.clone()),
        ));

        let key = Key::new("vvm/leader/1").unwrap();
        let record = loop {
            if let Some(record) = storage.get(&key).await.unwrap() {
                break record;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Give the command time to start and install its trap.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ttl = Ttl::from_secs(60).unwrap();
        assert!(
            storage
                .compare_and_swap(&key, &record, b"intruder", ttl)
                .await
                .unwrap()
        );

        let code = tokio::time::timeout(Duration::from_secs(30), host)
            .await
            .expect("vvm-host returns")
            .unwrap()
            .unwrap();
        assert_eq!(code, EXIT_LEADERSHIP_LOST);
        assert!(killer.kills().is_empty());
        let stopped = std::fs::read_to_string(&marker).unwrap_or_default();
        let _ = std::fs::remove_file(&marker);
        assert_eq!(stopped.trim(), "stopped");
        let outcome = *outcome.lock().unwrap();
        assert!(matches!(outcome, Some(Outcome::Exited(status)) if status.success()));
        // The intruder's record is left alone.
        assert_eq!(
            storage.get(&key).await.unwrap().as_deref(),
            Some(&b"intruder"[..])
        );
    }
}
