//! One lazily opened `deadpool-postgres` pool (and schema) per tenant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

use crate::error::ApiError;
use crate::tenant::TenantId;

/// The per-tenant pools of one pod.
pub(crate) struct Pools {
    base: tokio_postgres::Config,
    pod_id: String,
    size: usize,
    timeout: Duration,
    pools: Mutex<HashMap<TenantId, Arc<OnceCell<Pool>>>>,
}

impl Pools {
    pub(crate) fn new(
        base: tokio_postgres::Config,
        pod_id: String,
        size: usize,
        timeout: Duration,
    ) -> Self {
        Self {
            base,
            pod_id,
            size,
            timeout,
            pools: Mutex::default(),
        }
    }

    /// Total open connections across every tenant's pool: the pod's load.
    pub(crate) fn open_connections(&self) -> i64 {
        let pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools
            .values()
            .filter_map(|cell| cell.get())
            .map(|pool| pool.status().size as i64)
            .sum()
    }

    /// The tenant's pool, opening it (and creating its schema) on first use.
    pub(crate) async fn pool(&self, tenant: &TenantId) -> Result<Pool, ApiError> {
        let cell = {
            let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
            pools.entry(tenant.clone()).or_default().clone()
        };
        let pool = cell.get_or_try_init(|| self.open(tenant)).await?;
        Ok(pool.clone())
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
        let pool = Pool::builder(manager)
            .max_size(self.size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.timeout))
            .create_timeout(Some(self.timeout))
            .recycle_timeout(Some(self.timeout))
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

    /// Closes every pool (used at shutdown).
    pub(crate) fn close_all(&self) {
        let pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        for pool in pools.values().filter_map(|cell| cell.get()) {
            pool.close();
        }
    }
}
