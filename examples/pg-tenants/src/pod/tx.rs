//! Open transactions: each pinned to one pooled connection inside `BEGIN`,
//! keyed by the coordinator lock id that routes its calls here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coordinator::{DestinationPermit, LockId};
use deadpool_postgres::Object;
use tokio::sync::OwnedMutexGuard;

use crate::error::ApiError;
use crate::tenant::TenantId;

/// One open transaction.
pub(crate) struct Tx {
    pub(crate) tenant: TenantId,
    /// `None` once committed or rolled back.
    conn: Arc<tokio::sync::Mutex<Option<Object>>>,
    /// A statement failed: PostgreSQL aborted the transaction.
    failed: AtomicBool,
    created: Instant,
    last_used: Mutex<Instant>,
    /// The tenant's concurrency slot, held as long as the connection is.
    _permit: DestinationPermit,
}

impl Tx {
    pub(crate) fn new(tenant: TenantId, conn: Object, permit: DestinationPermit) -> Self {
        let now = Instant::now();
        Self {
            tenant,
            conn: Arc::new(tokio::sync::Mutex::new(Some(conn))),
            failed: AtomicBool::new(false),
            created: now,
            last_used: Mutex::new(now),
            _permit: permit,
        }
    }

    /// Exclusive use of the pinned connection; one call at a time.
    pub(crate) async fn lock(&self) -> Result<OwnedMutexGuard<Option<Object>>, ApiError> {
        let guard = self.conn.clone().lock_owned().await;
        if guard.is_none() {
            return Err(ApiError::NotFound("transaction already finished"));
        }
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        Ok(guard)
    }

    /// Records a failed statement (the transaction can then only roll back).
    pub(crate) fn mark_failed(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Whether a statement failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn expired(&self, idle: Duration, max_lifetime: Duration, now: Instant) -> bool {
        let last = *self.last_used.lock().unwrap_or_else(|p| p.into_inner());
        now.duration_since(last) >= idle || now.duration_since(self.created) >= max_lifetime
    }

    /// Ends the transaction with `COMMIT` (or `ROLLBACK`); a connection whose
    /// end statement failed is detached from the pool and closed.
    pub(crate) async fn finish(&self, commit: bool) -> Result<(), ApiError> {
        let mut guard = self.conn.clone().lock_owned().await;
        let Some(conn) = guard.take() else {
            return Err(ApiError::NotFound("transaction already finished"));
        };
        let sql = if commit { "COMMIT" } else { "ROLLBACK" };
        match conn.batch_execute(sql).await {
            Ok(()) => Ok(()),
            Err(err) => {
                // unknown connection state: never hand it to another caller
                drop(Object::take(conn));
                Err(err.into())
            }
        }
    }
}

/// The open transactions of one pod.
pub(crate) struct Transactions {
    open: Mutex<HashMap<LockId, Arc<Tx>>>,
    /// Idle timeout.
    pub(crate) idle: Duration,
    /// Max lifetime.
    pub(crate) max_lifetime: Duration,
}

impl Transactions {
    pub(crate) fn new(idle: Duration, max_lifetime: Duration) -> Self {
        Self {
            open: Mutex::default(),
            idle,
            max_lifetime,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<LockId, Arc<Tx>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn insert(&self, lock: LockId, tx: Tx) {
        self.map().insert(lock, Arc::new(tx));
    }

    pub(crate) fn get(&self, lock: &LockId) -> Option<Arc<Tx>> {
        self.map().get(lock).cloned()
    }

    pub(crate) fn remove(&self, lock: &LockId) -> Option<Arc<Tx>> {
        self.map().remove(lock)
    }

    /// Removes and returns the transactions past their idle timeout or max
    /// lifetime.
    pub(crate) fn take_expired(&self) -> Vec<(LockId, Arc<Tx>)> {
        let now = Instant::now();
        let mut map = self.map();
        let ids: Vec<LockId> = map
            .iter()
            .filter(|(_, tx)| tx.expired(self.idle, self.max_lifetime, now))
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| map.remove(&id).map(|tx| (id, tx)))
            .collect()
    }

    /// Removes and returns every open transaction (shutdown).
    pub(crate) fn take_all(&self) -> Vec<(LockId, Arc<Tx>)> {
        self.map().drain().collect()
    }

    /// How often the reaper looks for expired transactions.
    pub(crate) fn reap_period(&self) -> Duration {
        (self.idle.min(self.max_lifetime) / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}
