//! `vvm-host run`: provides and launches a [`vvm_orch::Vvm`] whose service
//! pipeline is the command, waits for a shutdown signal or a VVM problem,
//! then shuts the VVM down (the command stopped before leadership is
//! released) and maps the outcome to an exit status.

use std::{
    process::ExitCode,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use anyhow::Context;
use elections::Killer;
use tracing_subscriber::EnvFilter;
use ttl_storage::DynTtlStorage;
use vvm_orch::{ServicePipeline, Vvm, VvmConfig, VvmProblem};

use crate::{
    cli::Args,
    command::CommandPipeline,
    containment, default_storage, exit,
    exit::ExitCodes,
    fault::FaultyStorage,
    health::{Health, HealthStorage},
    job::{Outcome, RunningJob},
    killer::HostKiller,
    log, observe, program,
    signals::ShutdownSignals,
};

/// `vvm-host run`: logging set up, the command run while leading.
pub(crate) fn main(args: Args) -> ExitCode {
    let log_filter = args.log_filter();
    let filter = match EnvFilter::try_new(&log_filter) {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("vvm-host: invalid log filter {log_filter:?}: {err}");
            return ExitCode::from(exit::USAGE);
        }
    };
    log::init(filter, args.log_format);
    let code = run_host(args);
    log::flush();
    code
}

fn run_host(args: Args) -> ExitCode {
    // A mistyped program is said at once, before the store is touched,
    // with the shell's status, not at the next failover.
    if let Some(program) = args.command.first()
        && let Err(err) = program::resolve(program)
    {
        eprintln!("vvm-host: {err}");
        return ExitCode::from(err.exit_code());
    }
    let (config, codes) = match args.vvm_config().and_then(|c| Ok((c, args.exit_codes()?))) {
        Ok(valid) => valid,
        Err(err) => {
            eprintln!("vvm-host: {err}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("vvm-host: cannot start the async runtime: {err}");
            return ExitCode::from(codes.error);
        }
    };
    match runtime.block_on(run(args, config, codes)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("vvm-host: error: {}", crate::error_text::chain(&err));
            ExitCode::from(codes.error)
        }
    }
}

async fn run(args: Args, config: VvmConfig, codes: ExitCodes) -> anyhow::Result<u8> {
    let url = match &args.store.storage {
        Some(url) => url.clone(),
        None => default_storage::default_url()?,
    };
    // Bind the endpoint first: a bad address is an error before anything
    // is acquired.
    let health = Health::new(config.leadership_duration);
    if let Some(addr) = args.metrics_listen {
        observe::start(addr, health.clone()).await?;
    }
    let storage = url.open().await?;
    let storage = FaultyStorage::wrap_if_requested(storage);
    let storage = if args.metrics_listen.is_some() {
        HealthStorage::wrap(storage, health.clone())
    } else {
        storage
    };
    let containment = match containment::Plan::choose(args.containment) {
        Ok(plan) => Arc::new(plan),
        Err(err) => anyhow::bail!(err),
    };
    tracing::debug!(
        storage = %url,
        address = %config.address,
        cluster_size = config.cluster_size,
        containment = containment.name(),
        why = %containment.reason,
        "vvm-host starting"
    );
    if let Some(out_of_reach) = &containment.out_of_reach {
        tracing::warn!(
            containment = containment.name(),
            %out_of_reach,
            "the containment cannot hold every job here"
        );
    }
    let tries_once = args.tries_once();
    let running = RunningJob::default();
    let killer = Arc::new(HostKiller {
        running: running.clone(),
        exit_code: codes.lost,
    });
    let Some((pipeline, outcome)) = CommandPipeline::new(
        args.command,
        args.grace_period,
        args.pass_stdin,
        running.clone(),
        containment,
    ) else {
        anyhow::bail!("no command given");
    };
    let parts = Host {
        killer,
        tries_once,
        codes,
        health,
        child: outcome,
        running,
    };
    host(config, storage, pipeline, parts).await
}

/// What [`host`] needs besides the VVM's own parts.
struct Host {
    killer: Arc<dyn Killer>,
    /// `--no-wait`: a held lock is the expected answer, not an error.
    tries_once: bool,
    codes: ExitCodes,
    health: Arc<Health>,
    /// How the command ended, once it has.
    child: Arc<Mutex<Option<Outcome>>>,
    running: RunningJob,
}

/// Launches the VVM, waits for a signal or a problem, shuts down, and maps
/// the outcome to an exit status.
async fn host<P: ServicePipeline>(
    config: VvmConfig,
    storage: DynTtlStorage,
    pipeline: P,
    parts: Host,
) -> anyhow::Result<u8> {
    let Host {
        killer,
        tries_once,
        codes,
        health,
        child,
        running,
    } = parts;
    let mut signals = ShutdownSignals::new().context("cannot watch the shutdown signals")?;
    let vvm = Vvm::provide(config, storage, pipeline)?.with_killer(killer);
    tracing::debug!(value = vvm.value(), "acquiring leadership");
    let (vvm, problem) = vvm.launch();
    health.follow(vvm.status_watch());

    let requested_by = tokio::select! {
        () = problem.raised() => None,
        signal = signals.recv() => Some(signal),
    };
    health.shutting_down();
    if let Some(signal) = requested_by {
        tracing::info!(signal, "signal received; shutting down");
    }
    // A second signal during shutdown (as `docker compose` does) ends the
    // job at once instead of waiting for the rest of the grace period;
    // leadership is still released only after the job is gone.
    let watcher = tokio::spawn(async move {
        loop {
            let signal = signals.recv().await;
            match running.get() {
                Some(job) => {
                    job.kill_soon();
                    tracing::warn!(signal, "second signal: the command was SIGKILLed");
                }
                None => tracing::warn!(signal, "signal received while shutting down"),
            }
        }
    });
    let held = matches!(
        *vvm.status_watch().borrow(),
        vvm_orch::VvmStatus::Leading(_) | vvm_orch::VvmStatus::LeadershipLost(_)
    );
    let started = Instant::now();
    let result = vvm.shutdown().await;
    watcher.abort();
    let child_outcome = *child.lock().unwrap_or_else(PoisonError::into_inner);
    if held || child_outcome.is_some() {
        tracing::debug!(elapsed = ?started.elapsed(), "shut down; leadership released");
    } else {
        tracing::debug!(elapsed = ?started.elapsed(), "shut down (leadership was not held)");
    }

    Ok(match result {
        Ok(()) => 0,
        Err(VvmProblem::ServicesFinished) if child_outcome.is_some_and(Outcome::success) => {
            tracing::debug!("the command exited with status 0; leadership released");
            0
        }
        Err(VvmProblem::ServicesFinished | VvmProblem::Service(_)) if child_outcome.is_some() => {
            let code = child_outcome.map_or(codes.error, Outcome::exit_code);
            if let Some(meaning) = codes.collides_with(code) {
                tracing::warn!(
                    code,
                    "the command exited with {code}, which is also vvm-host's status for \"{meaning}\"; the command's status is passed on"
                );
            }
            code
        }
        Err(VvmProblem::LeadershipAcquisition {
            last_error: None, ..
        }) if tries_once => {
            tracing::info!("the lock is held; not waiting (--no-wait)");
            codes.no_leadership
        }
        Err(problem @ VvmProblem::LeadershipAcquisition { .. }) => {
            tracing::error!(%problem, "giving up");
            codes.no_leadership
        }
        Err(VvmProblem::LeadershipLost {
            reason: elections::EndReason::Superseded,
            ..
        }) => {
            tracing::info!("leadership handed over; the command was stopped");
            0
        }
        Err(problem @ VvmProblem::LeadershipLost { .. }) => {
            tracing::error!(%problem, "leadership lost; the command was stopped");
            codes.lost
        }
        Err(problem) => {
            tracing::error!(%problem, "failed");
            codes.error
        }
    })
}
