//! The signals that shut `vvm-host` down in order: SIGINT, SIGTERM, SIGHUP
//! and SIGQUIT all stop the command, then release leadership.

use std::io;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals that shut vvm-host down: SIGINT, SIGTERM, SIGHUP, SIGQUIT.
pub(crate) fn shutdown_kinds() -> [SignalKind; 4] {
    [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::quit(),
    ]
}

/// Listens to `kinds` without ever reading them: their default action
/// (ending or stopping the process) no longer applies while the returned
/// listeners live. Handlers, unlike ignored signals, are reset when a child
/// execs: a command started later gets the defaults.
pub(crate) fn disarm(kinds: impl IntoIterator<Item = SignalKind>) -> io::Result<Vec<Signal>> {
    kinds.into_iter().map(signal).collect()
}

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
