//! The command `vvm-host` runs as its service pipeline, under a guard
//! process (see [`crate::guard`]).

use std::{ffi::OsString, sync::Arc, sync::Mutex, sync::PoisonError, time::Duration};

use vvm_orch::{ServiceContext, ServicePipeline};

use crate::{
    containment::Plan,
    job::{Job, JobError, Outcome, RunningJob},
};

/// How long the guard has to acknowledge a `kill` before vvm-host ends
/// the job itself.
const KILL_ACK_LIMIT: Duration = Duration::from_secs(2);

/// Why the command failed as a service.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("command exited by itself with {0}")]
    Exited(Outcome),
}

/// Runs `program args...` while leading.
pub(crate) struct CommandPipeline {
    program: OsString,
    args: Vec<OsString>,
    grace: Duration,
    /// `--pass-stdin`: the command reads vvm-host's standard input.
    pass_stdin: bool,
    outcome: Arc<Mutex<Option<Outcome>>>,
    running: RunningJob,
    containment: Arc<Plan>,
}

impl CommandPipeline {
    /// The pipeline, and the cell where it records how the command ended.
    /// `running` holds the job while it runs, for the killer.
    pub(crate) fn new(
        command: Vec<OsString>,
        grace: Duration,
        pass_stdin: bool,
        running: RunningJob,
        containment: Arc<Plan>,
    ) -> Option<(Self, Arc<Mutex<Option<Outcome>>>)> {
        let mut command = command.into_iter();
        let program = command.next()?;
        let outcome = Arc::new(Mutex::new(None));
        let pipeline = CommandPipeline {
            program,
            args: command.collect(),
            grace,
            pass_stdin,
            outcome: outcome.clone(),
            running,
            containment,
        };
        Some((pipeline, outcome))
    }

    fn record(&self, outcome: Outcome) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
    }
}

impl ServicePipeline for CommandPipeline {
    type Error = CommandError;

    async fn run(&self, ctx: ServiceContext) -> Result<(), CommandError> {
        let env = [
            ("VVM_HOST_KEY", ctx.key().as_str().to_owned()),
            ("VVM_HOST_KEY_INDEX", ctx.key_index().to_string()),
            ("VVM_HOST_FENCING_TOKEN", ctx.fencing_token().to_string()),
        ];
        let started = Job::start(
            &self.program,
            &self.args,
            &env,
            self.pass_stdin,
            &self.containment,
            &self.running,
        )
        .await;
        let mut job = match started {
            Ok(job) => job,
            Err(err) => {
                if let JobError::Spawn { message, .. } = &err {
                    let not_found = message.starts_with("not-found");
                    if not_found || message.starts_with("not-executable") {
                        self.record(Outcome::NotStarted { not_found });
                    }
                }
                return Err(err.into());
            }
        };
        let cgroup = job
            .cgroup()
            .map_or_else(|| "-".to_owned(), |c| c.display().to_string());
        tracing::info!(
            pid = job.pid().map_or(0, nix::unistd::Pid::as_raw),
            program = %self.program.to_string_lossy(),
            containment = self.containment.name(),
            %cgroup,
            "command started"
        );

        tokio::select! {
            ended = job.wait() => {
                let (outcome, swept) = ended?;
                self.record(outcome);
                tracing::info!(%outcome, swept, "command exited by itself");
                return if outcome.success() { Ok(()) } else { Err(CommandError::Exited(outcome)) };
            }
            () = ctx.shutdown_requested() => {}
        }
        tracing::info!(grace = ?self.grace, "stopping the command: SIGTERM");
        // A guard that is gone shows in `wait`; one that is stopped does
        // not answer, and vvm-host then ends the job itself.
        let _ = job.terminate();
        let (outcome, swept) = match tokio::time::timeout(self.grace, job.wait()).await {
            Ok(ended) => ended?,
            Err(_) => {
                let _ = job.kill();
                tracing::warn!(grace = ?self.grace, "the command outlived its grace period: SIGKILL");
                let acked = tokio::time::timeout(KILL_ACK_LIMIT, async {
                    loop {
                        if job.acks().kill {
                            break None;
                        }
                        // `wait` returns at the exit report, or sets the ack.
                        tokio::select! {
                            ended = job.wait() => break Some(ended),
                            () = tokio::time::sleep(Duration::from_millis(20)) => {}
                        }
                    }
                })
                .await;
                match acked {
                    Ok(Some(ended)) => ended?,
                    Ok(None) => job.wait().await?,
                    Err(_) => {
                        let waited = self.grace + KILL_ACK_LIMIT;
                        let err = job.take_over(waited).await;
                        tracing::error!(%err, "the guard is stopped or stuck");
                        return Err(err.into());
                    }
                }
            }
        };
        self.record(outcome);
        tracing::info!(%outcome, swept, "command stopped");
        Ok(())
    }
}
