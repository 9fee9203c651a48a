//! # pg-tenants
//!
//! The reference example of the coordinator pattern over a real resource:
//! multi-tenant PostgreSQL pods behind a coordinator (design source
//! `004_ea79b625640898f8.txt`, "Worked example: PostgreSQL connection pool").
//!
//! - [`pod`] — the `pg-pod` binary: one lazily opened `deadpool-postgres`
//!   pool and one schema per tenant, key-value routes, transactions pinned to
//!   one connection behind a coordinator lock id, saturation fan-out wired to
//!   the pool's wait queue, PostgreSQL cancel requests for cancelled calls,
//!   and live tenants: each write publishes a change event to the tenant's
//!   subscribers on every pod (`coordinator-events`), served as
//!   Server-Sent Events with a page that follows them ([`pod::live`]).
//! - [`coord`] — the `pg-coordinator` binary: `/tenants/{id}/...` and
//!   `/transactions/{lock}/...` onto the coordinator's destination and lock
//!   routing, `/pods` listing live pods with their load.
//!
//! ## Guarantees
//!
//! - Tenant ids are validated (`^[A-Za-z0-9_-]{1,64}$`, [`TenantId`]) before
//!   any Valkey or PostgreSQL access; malformed ids answer 400.
//! - A transaction's calls all run on the one connection that ran its
//!   `BEGIN`; `commit` / `rollback` release it and delete the lock record.
//!   A transaction idle past its idle timeout, or open past its max
//!   lifetime, is rolled back by the pod.
//! - A call cancelled by the coordinator (its client went away) aborts its
//!   running statement with a PostgreSQL cancel request.
//!
//! ## Assumptions
//!
//! - One PostgreSQL database shared by every pod (tenants' data survives a
//!   pod's death), and one Valkey/Redis.
//! - Tenants are few enough that one small pool per tenant per pod fits in
//!   PostgreSQL's `max_connections`.
//!
//! See `README.md` for a walkthrough.
//!
//! ```
//! use pg_tenants::TenantId;
//!
//! let t = TenantId::new("acme-eu_1").unwrap();
//! assert_eq!(t.schema(), "\"t_acme-eu_1\"");
//! assert!(TenantId::new("no/slashes").is_err());
//! ```

pub mod coord;
mod error;
pub mod pod;
mod tenant;

pub use error::ApiError;
pub use tenant::{InvalidTenant, MAX_TENANT_LEN, TenantId};

/// The response header naming the pod that served a call.
pub const POD_HEADER: &str = "x-pod-id";

/// Initialises `tracing` from `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
