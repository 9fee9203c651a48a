//! The elections killer of `vvm-host`: SIGKILL to the command's process
//! group, then the process exit of [`elections::ProcessKiller`].
//!
//! The command runs in its own process group, so exiting `vvm-host` alone
//! would leave it running without leadership. When a lost leadership is not
//! released in time (the command outlived the killer deadline, or vvm-host
//! itself is stuck), the whole job must end.

use std::sync::{Arc, Mutex, PoisonError};

use elections::{Killer, ProcessKiller};
use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use tokio::time::Instant;
use ttl_storage::Key;

/// The process group of the running command, if any; shared by the
/// command pipeline (which sets it) and the killer (which kills it).
#[derive(Debug, Clone, Default)]
pub(crate) struct CommandGroup(Arc<Mutex<Option<Pid>>>);

impl CommandGroup {
    pub(crate) fn set(&self, group: Option<Pid>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = group;
    }

    fn get(&self) -> Option<Pid> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Kills the command's process group, then exits the process with code 1.
#[derive(Debug)]
pub(crate) struct HostKiller {
    pub(crate) group: CommandGroup,
}

impl HostKiller {
    /// SIGKILL to the command's process group, if a command runs.
    fn kill_command(&self) {
        if let Some(group) = self.group.get() {
            tracing::error!(%group, "SIGKILL to the command's process group");
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

impl Killer for HostKiller {
    fn kill(&self, key: &Key, deadline: Instant) {
        tracing::error!(%key, "killer deadline passed while the command may still run");
        self.kill_command();
        ProcessKiller.kill(key, deadline);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::process::{CommandExt, ExitStatusExt};

    use super::*;

    #[test]
    fn kills_the_whole_command_group() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let group = CommandGroup::default();
        group.set(Some(Pid::from_raw(i32::try_from(child.id()).unwrap())));
        let killer = HostKiller {
            group: group.clone(),
        };
        killer.kill_command();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
        // The background `sleep` was in the group too: the group empties
        // (once its orphaned member has been reaped by init).
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while killpg(pid, None) != Err(nix::errno::Errno::ESRCH) {
            assert!(std::time::Instant::now() < deadline, "the group survived");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
