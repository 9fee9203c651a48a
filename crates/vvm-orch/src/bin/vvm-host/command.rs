//! The command `vvm-host` runs as its service pipeline.

use std::{
    ffi::OsString,
    io,
    os::unix::process::ExitStatusExt,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use nix::{
    errno::Errno,
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use tokio::process::{Child, Command};
use vvm_orch::{ServiceContext, ServicePipeline};

use crate::killer::CommandGroup;

/// How the command ended, for the exit status of `vvm-host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It exited (by itself or after our signals).
    Exited(ExitStatus),
    /// It could not be started: 127 if not found, 126 otherwise, as shells do.
    NotStarted(io::ErrorKind),
}

impl Outcome {
    /// The exit code a shell would report.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Outcome::Exited(status) => match (status.code(), status.signal()) {
                (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
                (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
                (None, None) => 1,
            },
            Outcome::NotStarted(io::ErrorKind::NotFound) => 127,
            Outcome::NotStarted(_) => 126,
        }
    }
}

/// Why the command failed as a service.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: OsString,
        #[source]
        source: io::Error,
    },
    #[error("command exited by itself with {0}")]
    Exited(ExitStatus),
    #[error("waiting for the command failed: {0}")]
    Wait(#[from] io::Error),
}

/// Runs `program args...` while leading.
pub(crate) struct CommandPipeline {
    program: OsString,
    args: Vec<OsString>,
    grace: Duration,
    outcome: Arc<Mutex<Option<Outcome>>>,
    group: CommandGroup,
}

impl CommandPipeline {
    /// The pipeline, and the cell where it records how the command ended.
    /// `group` is kept up to date with the command's process group.
    pub(crate) fn new(
        command: Vec<OsString>,
        grace: Duration,
        group: CommandGroup,
    ) -> Option<(Self, Arc<Mutex<Option<Outcome>>>)> {
        let mut command = command.into_iter();
        let program = command.next()?;
        let outcome = Arc::new(Mutex::new(None));
        let pipeline = CommandPipeline {
            program,
            args: command.collect(),
            grace,
            outcome: outcome.clone(),
            group,
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
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            // Its own process group: we signal the whole job, and a Ctrl-C
            // on the terminal reaches vvm-host only, which then stops it.
            .process_group(0)
            .kill_on_drop(true)
            .env("VVM_HOST_KEY", ctx.key().as_str())
            .env("VVM_HOST_KEY_INDEX", ctx.key_index().to_string())
            .env("VVM_HOST_FENCING_TOKEN", ctx.fencing_token().to_string());
        let mut child = command.spawn().map_err(|source| {
            self.record(Outcome::NotStarted(source.kind()));
            CommandError::Spawn {
                program: self.program.clone(),
                source,
            }
        })?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        tracing::info!(pid = ?group, program = ?self.program, "command started");

        let status = tokio::select! {
            status = child.wait() => {
                let status = status?;
                kill_group(group, Signal::SIGKILL);
                self.group.set(None);
                self.record(Outcome::Exited(status));
                tracing::info!(%status, "command exited by itself");
                return if status.success() { Ok(()) } else { Err(CommandError::Exited(status)) };
            }
            () = ctx.shutdown_requested() => stop(&mut child, group, self.grace).await?,
        };
        self.group.set(None);
        self.record(Outcome::Exited(status));
        tracing::info!(%status, "command stopped");
        Ok(())
    }
}

/// SIGTERM to the group, SIGKILL after `grace`; then SIGKILL to whatever
/// is left in the group, so nothing of the job outlives the leadership.
async fn stop(child: &mut Child, group: Option<Pid>, grace: Duration) -> io::Result<ExitStatus> {
    tracing::info!(?grace, "stopping the command: SIGTERM");
    kill_group(group, Signal::SIGTERM);
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            tracing::warn!(?grace, "the command outlived its grace period: SIGKILL");
            kill_group(group, Signal::SIGKILL);
            child.wait().await?
        }
    };
    kill_group(group, Signal::SIGKILL);
    Ok(status)
}

fn kill_group(group: Option<Pid>, signal: Signal) {
    let Some(group) = group else { return };
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(err) => tracing::warn!(%err, ?signal, "could not signal the command's process group"),
    }
}
