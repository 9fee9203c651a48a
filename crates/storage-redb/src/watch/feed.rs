//! Removal notifications between processes: an inotify watch on the events
//! file, which every process writes to after committing a delete
//! (see [`crate::watch::EventsFile::announce_removal`]).

use std::path::Path;

use tokio::sync::watch;

/// Counts the modifications of the events file seen by this process; dropped
/// with the last handle, which stops the task reading inotify.
pub(crate) struct ChangeFeed {
    changes: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChangeFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ChangeFeed {
    /// A receiver that sees every modification from now on, or `None` once
    /// the task reading inotify has stopped (an error, or its runtime shut
    /// down): waiters must then poll.
    pub(crate) fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        (!self.task.is_finished()).then(|| self.changes.subscribe())
    }

    /// Starts watching the events file at `path`. Must run in a tokio
    /// runtime with I/O enabled. Fails where inotify is unavailable (the
    /// storage then reports watching as unsupported).
    #[cfg(target_os = "linux")]
    pub(crate) fn start(path: &Path) -> std::io::Result<ChangeFeed> {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        use tokio::io::unix::AsyncFd;

        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(path, AddWatchFlags::IN_MODIFY)?;
        // Deprecated in tokio for types that could hand out another
        // descriptor; `Fd` owns its descriptor and always returns that one,
        // which is the condition tokio's safe constructors will check.
        #[allow(deprecated)]
        let fd = AsyncFd::new(linux::Fd(inotify))?;
        let changes = watch::Sender::new(0u64);
        let task = tokio::spawn(linux::read_events(fd, changes.clone()));
        Ok(ChangeFeed { changes, task })
    }

    /// Elsewhere watching is unsupported.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn start(_path: &Path) -> std::io::Result<ChangeFeed> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "removal notifications need inotify (Linux)",
        ))
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::{AsFd, AsRawFd, RawFd};

    use nix::sys::inotify::Inotify;
    use tokio::{io::unix::AsyncFd, sync::watch};

    /// The inotify descriptor, as tokio's reactor needs it.
    pub(super) struct Fd(pub(super) Inotify);

    impl AsRawFd for Fd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }

    /// Bumps `changes` after every batch of inotify events, until the
    /// descriptor fails or the task is aborted.
    pub(super) async fn read_events(fd: AsyncFd<Fd>, changes: watch::Sender<u64>) {
        loop {
            let mut ready = match fd.readable().await {
                Ok(ready) => ready,
                Err(err) => {
                    tracing::warn!(error = %err, "removal notifications stopped; waiters fall back to polling");
                    break;
                }
            };
            match ready.try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from)) {
                Ok(Ok(events)) if events.is_empty() => {}
                Ok(Ok(_)) => changes.send_modify(|n| *n = n.wrapping_add(1)),
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "removal notifications stopped; waiters fall back to polling");
                    break;
                }
                // Not readable after all (EAGAIN): wait again.
                Err(_would_block) => {}
            }
        }
        // Wake everyone once, so no waiter relies on a dead feed.
        changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}
