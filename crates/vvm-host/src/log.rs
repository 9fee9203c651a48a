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

/// The format of log lines (`--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with the current span's fields and the
    /// list of spans.
    Json,
}

/// Whether to colour lines: standard error is a terminal and `NO_COLOR`
/// is unset or empty (<https://no-color.org>).
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the subscriber with `filter`, writing lines in `format`.
pub(crate) fn init(filter: EnvFilter, format: Format) {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("vvm-host-log")
        .finish(std::io::stderr());
    *FLUSH.lock().unwrap_or_else(PoisonError::into_inner) = Some(guard);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        Format::Text => builder.with_ansi(colour()).init(),
        Format::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

/// Writes what is buffered, waiting at most about a second (a stalled
/// reader gets what fits). Call before exiting the process; logging after
/// it is lost.
pub(crate) fn flush() {
    let guard = FLUSH.lock().unwrap_or_else(PoisonError::into_inner).take();
    drop(guard);
}
