//! vvm-host's log: `tracing` to standard error through a writer that never
//! blocks. A stalled reader (a full pipe to journald, `docker logs` or a
//! slow `| tee`) or a terminal that stops background writers must never
//! hold up renewal or the killer: lines that do not fit in the buffer are
//! dropped (and counted by the writer), never waited for.

use std::{
    io::IsTerminal,
    sync::{Mutex, PoisonError},
};

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Lines buffered before new ones are dropped.
const BUFFERED_LINES: usize = 8192;

/// Flushes the writer when taken and dropped (bounded by a second).
static FLUSH: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// Installs the subscriber with `filter`.
pub(crate) fn init(filter: EnvFilter) {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("vvm-host-log")
        .finish(std::io::stderr());
    *FLUSH.lock().unwrap_or_else(PoisonError::into_inner) = Some(guard);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Writes what is buffered, waiting at most about a second (a stalled
/// reader gets what fits). Call before exiting the process; logging after
/// it is lost.
pub(crate) fn flush() {
    let guard = FLUSH.lock().unwrap_or_else(PoisonError::into_inner).take();
    drop(guard);
}
