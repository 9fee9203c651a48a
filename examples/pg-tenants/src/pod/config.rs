//! Command-line flags and environment variables of `pg-pod`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Where a tenant's change events go (`--events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventsMode {
    /// To the subscribers on every pod (the subscription map and the
    /// broadcast through Valkey).
    Cluster,
    /// To this pod's subscribers only (standalone: no broadcast).
    Local,
}

/// `pg-pod`: a resource pod serving tenants from PostgreSQL.
#[derive(Debug, Clone, Parser)]
#[command(name = "pg-pod", version, about)]
pub struct PodArgs {
    /// Valkey/Redis URL.
    #[arg(long, env = "VALKEY_URL", default_value = "redis://127.0.0.1:6379")]
    pub valkey_url: String,
    /// PostgreSQL URL (libpq URI or key=value form).
    #[arg(
        long,
        env = "PG_URL",
        default_value = "postgresql://postgres@127.0.0.1:5432/postgres"
    )]
    pub pg_url: String,
    /// Address to listen on.
    #[arg(long, env = "POD_LISTEN", default_value = "127.0.0.1:3001")]
    pub listen: SocketAddr,
    /// Address published to Valkey for coordinators to dial
    /// (default `http://<listen>`).
    #[arg(long, env = "POD_ADVERTISE")]
    pub advertise: Option<String>,
    /// This pod's member id.
    #[arg(long, env = "POD_ID")]
    pub pod_id: String,
    /// Valkey key prefix shared with the coordinators.
    #[arg(long, env = "COORDINATOR_PREFIX", default_value = "coordinator")]
    pub prefix: String,
    /// Connections per tenant pool; also the per-tenant concurrency cap whose
    /// wait queue triggers fan-out.
    #[arg(long, env = "POOL_SIZE", default_value_t = 4)]
    pub pool_size: usize,
    /// Member record TTL, milliseconds.
    #[arg(long, env = "MEMBER_TTL_MS", default_value_t = 30_000)]
    pub member_ttl_ms: u64,
    /// Heartbeat period, milliseconds (default: a third of the member TTL).
    #[arg(long, env = "HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Lock record TTL, milliseconds (refreshed while the transaction is open).
    #[arg(long, env = "LOCK_TTL_MS", default_value_t = 30_000)]
    pub lock_ttl_ms: u64,
    /// How long a tenant's queue must stay non-empty before fan-out, ms.
    #[arg(long, env = "QUEUE_THRESHOLD_MS", default_value_t = 1_000)]
    pub queue_threshold_ms: u64,
    /// A transaction idle this long is rolled back, milliseconds.
    #[arg(long, env = "TX_IDLE_TIMEOUT_MS", default_value_t = 30_000)]
    pub tx_idle_timeout_ms: u64,
    /// A transaction open this long is rolled back, milliseconds.
    #[arg(long, env = "TX_MAX_LIFETIME_MS", default_value_t = 300_000)]
    pub tx_max_lifetime_ms: u64,
    /// Longest wait for a pooled connection (or a new one), milliseconds.
    #[arg(long, env = "POOL_TIMEOUT_MS", default_value_t = 30_000)]
    pub pool_timeout_ms: u64,
    /// Tenants with an open pool at once; with `--pool-size` this bounds the
    /// pod's PostgreSQL connections (`pool_size * max_tenant_pools`). The
    /// least recently used idle pool is closed to make room.
    #[arg(long, env = "MAX_TENANT_POOLS", default_value_t = 8)]
    pub max_tenant_pools: usize,
    /// A tenant pool unused for this long is closed, milliseconds.
    #[arg(long, env = "POOL_IDLE_MS", default_value_t = 60_000)]
    pub pool_idle_ms: u64,
    /// Where change events go: `cluster` (subscribers on every pod) or
    /// `local` (this pod's only).
    #[arg(long, env = "EVENTS", value_enum, default_value_t = EventsMode::Cluster)]
    pub events: EventsMode,
    /// Event streams (`GET /tenants/{t}/events`) this pod serves at once.
    #[arg(long, env = "MAX_EVENT_STREAMS", default_value_t = 1_000)]
    pub max_event_streams: usize,
}

/// Invalid settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Invalid(String),
    /// The PostgreSQL URL does not parse.
    #[error("invalid PostgreSQL URL: {0}")]
    PgUrl(#[from] tokio_postgres::Error),
    /// An id or address was refused by the coordinator crate.
    #[error(transparent)]
    Coordinator(#[from] coordinator::Error),
}

impl PodArgs {
    /// Checks the ranges that the coordinator crate does not check itself.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if !(1..=1000).contains(&self.pool_size) {
            return bad("pool size must be within 1..=1000");
        }
        if self.tx_idle_timeout_ms == 0 || self.tx_max_lifetime_ms == 0 {
            return bad("transaction timeouts must be positive");
        }
        if self.pool_timeout_ms == 0 {
            return bad("pool timeout must be positive");
        }
        if !(1..=10_000).contains(&self.max_tenant_pools) {
            return bad("max tenant pools must be within 1..=10000");
        }
        if self.pool_idle_ms == 0 {
            return bad("pool idle timeout must be positive");
        }
        if !(1..=1_000_000).contains(&self.max_event_streams) {
            return bad("max event streams must be within 1..=1000000");
        }
        Ok(())
    }

    /// The heartbeat period.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms.unwrap_or(self.member_ttl_ms / 3))
    }
}
