//! The elections killer of `vvm-host`: SIGKILL to the whole job (the
//! command's process group and every descendant, through the guard), then
//! exit with the "leadership lost" status.
//!
//! It runs when a lost leadership was not released in time: the store hangs
//! (the renewal cannot even fail), the command outlived the killer deadline,
//! or vvm-host itself is stuck. Exiting alone would be enough for the guard
//! (its lifeline closes), but the killer waits (a bounded time) until the
//! job is known gone — its cgroups empty and, in the PID-namespace modes,
//! the namespace's init exited, which it does only once every process of
//! the namespace is gone — so the log says "the job is gone" only when it
//! is.

use std::time::Duration;

use elections::{ArmEvent, Killer};
use tokio::time::Instant;
use ttl_storage::Key;

use crate::job::RunningJob;

/// How long the killer waits for the guard to confirm the job is gone.
const CONFIRM_LIMIT: Duration = Duration::from_secs(2);

/// Kills the running job, then exits the process with `exit_code`.
#[derive(Debug)]
pub(crate) struct HostKiller {
    pub(crate) running: RunningJob,
    pub(crate) exit_code: u8,
}

impl Killer for HostKiller {
    fn armed(&self, event: &ArmEvent) {
        // The guard keeps the same deadline, in case vvm-host cannot.
        self.running
            .deadline(event.deadline.map(tokio::time::Instant::into_std));
    }

    fn kill(&self, key: &Key, deadline: Instant) {
        // Kill first, then speak: the log may be a stalled pipe (its writer
        // never blocks, but the kill must not wait for anything).
        let late_by = Instant::now().saturating_duration_since(deadline);
        let job = self.running.get();
        let outcome = job.as_ref().map(|job| job.kill_now(CONFIRM_LIMIT));
        tracing::error!(
            %key,
            ?late_by,
            "killer deadline passed while the command may still run (the lease may expire soon)"
        );
        if let Some(job) = &job {
            job.log_notes();
        }
        match outcome {
            Some(true) => {
                tracing::error!("killer: SIGKILL sent to every process of the job; the job is gone")
            }
            Some(false) => tracing::error!(
                "killer: SIGKILL sent; the job is not confirmed gone within {CONFIRM_LIMIT:?} after the guard and {CONFIRM_LIMIT:?} after its SIGKILL (a process in uninterruptible sleep?)"
            ),
            None => tracing::error!("killer: no command running"),
        }
        tracing::error!(exit_code = self.exit_code, "killer: exiting");
        crate::log::flush();
        std::process::exit(i32::from(self.exit_code));
    }
}
