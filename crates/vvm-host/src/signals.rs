//! The signals that shut `vvm-host` down in order: SIGINT, SIGTERM, SIGHUP
//! and SIGQUIT all stop the command, then release leadership.

use std::io;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Listens to the shutdown signals (which replaces their default action).
pub(crate) struct ShutdownSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl ShutdownSignals {
    /// Starts listening.
    pub(crate) fn new() -> io::Result<Self> {
        Ok(ShutdownSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    /// The name of the next signal received.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
            _ = self.quit.recv() => "SIGQUIT",
        }
    }
}
