//! Lazily opened `deadpool-postgres` pools (and schemas), one per tenant,
//! bounded: at most `max_pools` tenants have a pool at once, the least
//! recently used idle pool is closed to make room, and pools idle longer
//! than `idle_timeout` are closed by [`Pools::close_idle`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

use crate::error::ApiError;
use crate::tenant::TenantId;

/// Limits of the per-tenant pools of one pod.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolLimits {
    /// Connections per tenant pool.
    pub(crate) size: usize,
    /// Tenants with an open pool at once; `size * max_pools` bounds the
    /// pod's PostgreSQL connections.
    pub(crate) max_pools: usize,
    /// A pool with no connection checked out for this long is closed.
    pub(crate) idle_timeout: Duration,
    /// Wait / create / recycle timeout of a pool.
    pub(crate) timeout: Duration,
}

struct Slot {
    pool: Arc<OnceCell<Pool>>,
    last_used: Instant,
}

/// The per-tenant pools of one pod.
pub(crate) struct Pools {
    base: tokio_postgres::Config,
    pod_id: String,
    limits: PoolLimits,
    pools: Mutex<HashMap<TenantId, Slot>>,
}

/// Whether nobody holds a connection of `pool` (or it is still opening).
fn is_idle(cell: &OnceCell<Pool>) -> bool {
    match cell.get() {
        Some(pool) => {
            let s = pool.status();
            s.size == s.available && s.waiting == 0
        }
        // still opening: busy
        None => false,
    }
}

impl Pools {
    pub(crate) fn new(base: tokio_postgres::Config, pod_id: String, limits: PoolLimits) -> Self {
        Self {
            base,
            pod_id,
            limits,
            pools: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, Slot>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Total open connections across every tenant's pool: the pod's load.
    pub(crate) fn open_connections(&self) -> i64 {
        self.lock()
            .values()
            .filter_map(|slot| slot.pool.get())
            .map(|pool| pool.status().size as i64)
            .sum()
    }

    /// The tenant's pool cell, making room for it if needed.
    fn cell(&self, tenant: &TenantId) -> Result<Arc<OnceCell<Pool>>, ApiError> {
        let mut pools = self.lock();
        if let Some(slot) = pools.get_mut(tenant) {
            slot.last_used = Instant::now();
            return Ok(slot.pool.clone());
        }
        if pools.len() >= self.limits.max_pools {
            let victim = pools
                .iter()
                .filter(|(_, slot)| is_idle(&slot.pool))
                .min_by_key(|(_, slot)| slot.last_used)
                .map(|(t, _)| t.clone());
            let Some(victim) = victim else {
                return Err(ApiError::Unavailable(
                    "every tenant pool of this pod is busy".into(),
                ));
            };
            if let Some(slot) = pools.remove(&victim) {
                if let Some(pool) = slot.pool.get() {
                    pool.close();
                }
                tracing::info!(tenant = %victim, "closed the least recently used idle tenant pool");
            }
        }
        let cell = Arc::new(OnceCell::new());
        pools.insert(
            tenant.clone(),
            Slot {
                pool: cell.clone(),
                last_used: Instant::now(),
            },
        );
        Ok(cell)
    }

    /// A connection of the tenant's pool, opening the pool (and creating
    /// its schema) on first use. A pool closed by eviction between lookup
    /// and checkout is reopened once.
    pub(crate) async fn get(&self, tenant: &TenantId) -> Result<Object, ApiError> {
        for _ in 0..2 {
            let cell = self.cell(tenant)?;
            let pool = match cell.get_or_try_init(|| self.open(tenant)).await {
                Ok(pool) => pool.clone(),
                Err(e) => {
                    self.forget(tenant, &cell);
                    return Err(e);
                }
            };
            match pool.get().await {
                Err(PoolError::Closed) => {
                    self.forget(tenant, &cell);
                    continue;
                }
                other => return Ok(other?),
            }
        }
        Err(ApiError::Unavailable(
            "tenant pool closed while in use".into(),
        ))
    }

    /// Drops `tenant`'s slot if it still holds `cell`.
    fn forget(&self, tenant: &TenantId, cell: &Arc<OnceCell<Pool>>) {
        let mut pools = self.lock();
        if pools
            .get(tenant)
            .is_some_and(|s| Arc::ptr_eq(&s.pool, cell))
        {
            pools.remove(tenant);
        }
    }

    async fn open(&self, tenant: &TenantId) -> Result<Pool, ApiError> {
        let mut config = self.base.clone();
        // visible in pg_stat_activity
        config.application_name(format!("pg-tenants/{}/{}", self.pod_id, tenant));
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let timeout = self.limits.timeout;
        let pool = Pool::builder(manager)
            .max_size(self.limits.size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .map_err(|e| ApiError::Unavailable(format!("cannot build pool: {e}")))?;
        let mut conn = pool.get().await?;
        let schema = tenant.schema();
        // Pods opening the same tenant at once serialise on an advisory lock
        // (CREATE SCHEMA IF NOT EXISTS alone can race on the catalog).
        let tx = conn.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&schema.as_str()],
        )
        .await?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.kv (k text PRIMARY KEY, v text NOT NULL);"
        ))
        .await?;
        tx.commit().await?;
        drop(conn);
        tracing::info!(%tenant, %schema, "opened tenant pool");
        Ok(pool)
    }

    /// Closes the pools idle for longer than the idle timeout.
    pub(crate) fn close_idle(&self) {
        let cutoff = Instant::now().checked_sub(self.limits.idle_timeout);
        let mut pools = self.lock();
        pools.retain(|tenant, slot| {
            let stale = cutoff.is_some_and(|c| slot.last_used < c) && is_idle(&slot.pool);
            if stale {
                if let Some(pool) = slot.pool.get() {
                    pool.close();
                }
                tracing::info!(%tenant, "closed an idle tenant pool");
            }
            !stale
        });
    }

    /// Closes every pool (used at shutdown).
    pub(crate) fn close_all(&self) {
        for slot in self.lock().values() {
            if let Some(pool) = slot.pool.get() {
                pool.close();
            }
        }
    }
}
