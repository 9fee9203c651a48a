//! The `pg-pod` binary: a resource pod serving tenants from PostgreSQL.
//!
//! | route | does |
//! |---|---|
//! | `GET/PUT/DELETE /destinations/{tenant}/kv/{key}` | read / upsert (body = value) / delete a key |
//! | `POST /destinations/{tenant}/transactions` | `BEGIN` on a pinned connection; answers `{"lock": ...}` |
//! | `GET/PUT/DELETE /locks/{lock}/kv/{key}` | the same, inside the transaction |
//! | `POST /locks/{lock}/commit`, `/locks/{lock}/rollback` | end it, release the connection and the lock |
//! | `GET /destinations/{tenant}/sleep/{secs}` | `SELECT pg_sleep(secs)` (cancellable) |
//! | `POST /_coordinator/cancel/{request_id}` | the coordinator's cancel message |
//! | `GET /tenants/{tenant}/events`, `GET /destinations/{tenant}/events` | the tenant's change events, as Server-Sent Events |
//! | `GET /tenants/{tenant}/rows`, `GET /destinations/{tenant}/rows` | the tenant's rows (JSON) |
//! | `GET /tenants/{tenant}/live` | the live page: the rows, updated from the events |
//!
//! Every write (`PUT`, `DELETE`, a commit) publishes a change event of the
//! tenant through `coordinator-events` ([`live`]). Every response carries
//! the header `x-pod-id`; JSON bodies carry `pod`.

mod config;
pub mod live;
mod pools;
mod routes;
mod tx;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use coordinator::{Member, MemberAddress, MemberConfig, MemberId, SaturationConfig};

pub use config::{ConfigError, EventsMode, PodArgs};
use pools::{PoolLimits, Pools};
use tx::Transactions;

/// Shared state of a running pod. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Pod {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    member: Member,
    pools: Arc<Pools>,
    txs: Transactions,
    events: coordinator_events::Events,
}

impl Pod {
    pub(crate) fn id(&self) -> &str {
        &self.inner.id
    }
    pub(crate) fn member(&self) -> &Member {
        &self.inner.member
    }
    pub(crate) fn pools(&self) -> &Pools {
        &self.inner.pools
    }
    pub(crate) fn txs(&self) -> &Transactions {
        &self.inner.txs
    }
    pub(crate) fn events(&self) -> &coordinator_events::Events {
        &self.inner.events
    }

    /// Rolls back transactions past their idle timeout or max lifetime.
    async fn reap(&self) {
        for (lock, tx) in self.txs().take_expired() {
            let ended = tx.finish(false).await;
            let released = self.member().unregister_lock(&lock).await;
            tracing::info!(%lock, tenant = %tx.tenant, ?ended, ?released, "rolled back a forgotten transaction");
        }
    }

    /// Rolls back every open transaction (shutdown).
    async fn rollback_all(&self) {
        for (lock, tx) in self.txs().take_all() {
            let _ = tx.finish(false).await;
            let _ = self.member().unregister_lock(&lock).await;
        }
    }
}

/// Runs a pod until Ctrl-C / SIGTERM: binds, registers with heartbeat,
/// serves, then rolls back open transactions and deregisters.
pub async fn run(args: PodArgs) -> anyhow::Result<()> {
    args.validate()?;
    let pg: tokio_postgres::Config = args.pg_url.parse().map_err(ConfigError::PgUrl)?;
    let id = MemberId::new(args.pod_id.as_str()).map_err(ConfigError::Coordinator)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let bound = listener.local_addr()?;
    let advertise = args
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{bound}"));
    let address = MemberAddress::parse(&advertise).map_err(ConfigError::Coordinator)?;

    let mut config = MemberConfig::new(id, address);
    config.prefix = args.prefix.clone();
    config.ttl = Duration::from_millis(args.member_ttl_ms);
    config.heartbeat_interval = args.heartbeat();
    config.lock_ttl = Duration::from_millis(args.lock_ttl_ms);
    config.saturation = SaturationConfig {
        max_concurrent: args.pool_size,
        queue_threshold: Duration::from_millis(args.queue_threshold_ms),
    };
    config.validate().map_err(ConfigError::Coordinator)?;

    let pools = Arc::new(Pools::new(
        pg,
        args.pod_id.clone(),
        PoolLimits {
            size: args.pool_size,
            max_pools: args.max_tenant_pools,
            idle_timeout: Duration::from_millis(args.pool_idle_ms),
            timeout: Duration::from_millis(args.pool_timeout_ms),
        },
    ));
    let valkey = coordinator::connect(&args.valkey_url, Duration::from_secs(5))
        .await
        .context("cannot connect to Valkey")?;
    let load = pools.clone();
    let member = Member::with_load_source(
        valkey.clone(),
        config,
        Arc::new(move || load.open_connections()),
    )?;
    let events_config = coordinator_events::EventsConfig {
        max_subscribers: args.max_event_streams,
        ..coordinator_events::EventsConfig::default()
    };
    let events = match args.events {
        EventsMode::Cluster => {
            coordinator_events::Events::clustered(&member, valkey, events_config).await?
        }
        EventsMode::Local => {
            coordinator_events::Events::standalone(member.id().clone(), events_config)?
        }
    };
    let pod = Pod {
        inner: Arc::new(Inner {
            id: args.pod_id.clone(),
            member: member.clone(),
            pools,
            txs: Transactions::new(
                Duration::from_millis(args.tx_idle_timeout_ms),
                Duration::from_millis(args.tx_max_lifetime_ms),
            ),
            events: events.clone(),
        }),
    };
    member
        .register()
        .await
        .context("cannot register in Valkey")?;
    let heartbeat = member.start_heartbeat();
    let reaper = tokio::spawn({
        let pod = pod.clone();
        async move {
            let period = pod.txs().reap_period();
            loop {
                tokio::time::sleep(period).await;
                pod.reap().await;
                pod.pools().close_idle();
            }
        }
    });
    tracing::info!(pod = %args.pod_id, %bound, %advertise, "pod serving");
    // event streams never end by themselves: ending the events ends them,
    // so the graceful shutdown can finish
    let closing = events.clone();
    let served = axum::serve(listener, routes::router(pod.clone()))
        .with_graceful_shutdown(async move {
            crate::shutdown_signal().await;
            tracing::info!("shutting down");
            closing.shutdown(Duration::from_secs(2)).await;
        })
        .await;
    reaper.abort();
    heartbeat.stop().await;
    pod.rollback_all().await;
    if let Err(err) = member.deregister().await {
        tracing::warn!(%err, "deregister failed");
    }
    pod.pools().close_all();
    served.context("server failed")
}
