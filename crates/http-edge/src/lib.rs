//! # http-edge
//!
//! Serving an axum [`Router`](axum::Router) to clients you do not trust:
//! header-read timeout, idle timeout and a connection cap that sheds idle
//! connections first, HTTP/1.1 and HTTP/2 (h2c). The coordinator serves its
//! routes with it, and `vvm-host` its `/metrics` and `/healthz`.
//!
//! `axum::serve` keeps every connection open for as long as the peer wants:
//! a few hundred silent or trickling TCP connections exhaust the process's
//! file descriptors and lock every other client out. [`serve`] bounds that:
//!
//! - a request's headers must arrive within
//!   [`ServeConfig::header_read_timeout`] (slowloris), else the connection
//!   is closed;
//! - a connection with no request in flight (a response body still being
//!   sent counts) for [`ServeConfig::idle_timeout`] is closed; bytes alone
//!   are not activity, so an HTTP/2 client that only pings or trickles
//!   frames without completing a request is closed too (HTTP/2 has no
//!   header-read timeout of its own);
//! - at most [`ServeConfig::max_connections`] connections are open: when a
//!   new one arrives at the cap, the connection idle the longest (no request
//!   in flight) is closed to make room; if every connection is busy, the new
//!   one is refused (closed at once);
//! - the cap follows the process's file-descriptor limit: the soft
//!   `RLIMIT_NOFILE` is raised to the hard limit at start, and the cap is
//!   at most half the descriptors left after [`RESERVED_FDS`]; `accept`
//!   failing for want of descriptors (EMFILE, ENFILE) closes the
//!   longest-idle connection and backs off instead of spinning.

mod fds;
mod serve;

pub use fds::{RESERVED_FDS, raise_fd_limit};
pub use serve::{Result, ServeConfig, serve};

/// Why [`serve`] did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A [`ServeConfig`] bound is out of range.
    #[error("invalid server limits: {0}")]
    InvalidConfig(String),
}
