//! Signals sent only to processes proven to be ours.
//!
//! A pid is a number the kernel hands out again once its process has been
//! reaped. So a pid read from `/proc` or `cgroup.procs` is opened as a
//! *pidfd* first, which names that one process for as long as the fd is
//! open, and only then checked ("still in our cgroup", "still our
//! descendant"); the signal goes through the pidfd. A process that was
//! replaced by an unrelated one between the read and the open fails the
//! check and is left alone.

use nix::sys::signal::Signal;
use rustix::process::{Pid, PidfdFlags, pidfd_open, pidfd_send_signal};

/// Sends `signal` to `pid` if, once a pidfd names it, `still_ours()` holds.
/// True if the signal was sent.
pub(crate) fn signal_verified(pid: i32, signal: Signal, still_ours: impl FnOnce() -> bool) -> bool {
    let Some(target) = Pid::from_raw(pid) else {
        return false;
    };
    let Ok(fd) = pidfd_open(target, PidfdFlags::empty()) else {
        return false; // gone already
    };
    if !still_ours() {
        return false;
    }
    send(&fd, signal)
}

/// Sends `signal` through an open pidfd.
pub(crate) fn send(fd: &impl std::os::fd::AsFd, signal: Signal) -> bool {
    let Some(signal) = to_rustix(signal) else {
        return false;
    };
    pidfd_send_signal(fd, signal).is_ok()
}

fn to_rustix(signal: Signal) -> Option<rustix::process::Signal> {
    Some(match signal {
        Signal::SIGKILL => rustix::process::Signal::KILL,
        Signal::SIGTERM => rustix::process::Signal::TERM,
        Signal::SIGINT => rustix::process::Signal::INT,
        Signal::SIGHUP => rustix::process::Signal::HUP,
        Signal::SIGQUIT => rustix::process::Signal::QUIT,
        Signal::SIGCONT => rustix::process::Signal::CONT,
        _ => return None,
    })
}

/// A pidfd for `pid` (our own child, so the pid is still held), if the
/// kernel has pidfds (Linux 5.3).
pub(crate) fn open(pid: i32) -> Option<std::os::fd::OwnedFd> {
    pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()
}

/// A pidfd for `pid` if, once it names it, it is a child of `parent` (an
/// unreaped child of ours, so `parent`'s pid is held): the process `parent`
/// reported, not one that took its pid since. Only for watching.
pub(crate) fn open_child_of(pid: i32, parent: i32) -> Option<std::os::fd::OwnedFd> {
    let fd = open(pid)?;
    (super::tree::parent_of(pid) == Some(parent)).then_some(fd)
}

/// True once the process `fd` names has exited (it is a zombie or gone).
pub(crate) fn exited(fd: &impl std::os::fd::AsFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(ready) => ready > 0,
        // Cannot tell: not known to be gone.
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_pidfd_says_when_its_process_has_exited() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(open_child_of(pid, me + 1).is_none(), "not its parent");
        let fd = open_child_of(pid, me).unwrap();
        assert!(!exited(&fd));
        child.kill().unwrap();
        let _ = child.wait();
        assert!(exited(&fd));
    }

    #[test]
    fn a_failed_check_sends_nothing() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert!(!signal_verified(pid, Signal::SIGKILL, || false));
        assert!(child.try_wait().unwrap().is_none(), "signalled anyway");
        assert!(signal_verified(pid, Signal::SIGKILL, || true));
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}
