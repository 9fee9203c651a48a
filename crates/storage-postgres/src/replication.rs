//! What the connected primary says about its replication, and the warning
//! when a failover could lose acknowledged writes.

use std::time::Duration;

use ttl_storage::{Result, StorageError};

use crate::{
    PostgresStorage,
    error::{Op, classify, classify_pool, storage_error},
};

/// The replication of the server a [`PostgresStorage`] writes to, as
/// [`PostgresStorage::replication`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// Standbys streaming from this server now (rows of `pg_stat_replication`).
    pub standbys: u32,
    /// `synchronous_standby_names` (empty: no synchronous standby).
    pub synchronous_standby_names: String,
    /// `synchronous_commit` as this driver's sessions run it.
    pub synchronous_commit: String,
}

impl Replication {
    /// Whether a commit waits for a standby: `synchronous_standby_names`
    /// is set and `synchronous_commit` is `on`, `remote_write` or
    /// `remote_apply` (`off` and `local` do not wait).
    pub fn synchronous(&self) -> bool {
        !self.synchronous_standby_names.trim().is_empty()
            && !matches!(self.synchronous_commit.as_str(), "off" | "local")
    }

    /// Whether promoting a standby could lose acknowledged writes (a lease,
    /// a fencing counter going back): standbys stream from this server but
    /// commits do not wait for one.
    ///
    /// ```
    /// use storage_postgres::Replication;
    ///
    /// let mut r = Replication {
    ///     standbys: 1,
    ///     synchronous_standby_names: String::new(),
    ///     synchronous_commit: "on".into(),
    /// };
    /// assert!(r.failover_can_lose_writes());
    /// r.synchronous_standby_names = "standby1".into();
    /// assert!(!r.failover_can_lose_writes());
    /// ```
    pub fn failover_can_lose_writes(&self) -> bool {
        self.standbys > 0 && !self.synchronous()
    }
}

/// How long the replication query may take.
const LIMIT: Duration = Duration::from_secs(5);

impl PostgresStorage {
    /// Reads the connected server's replication (see [`Replication`]).
    /// [`PostgresStorage::connect`] logs a warning when
    /// [`Replication::failover_can_lose_writes`].
    ///
    /// Errors: transient when no connection or answer comes; permanent
    /// when the server refuses the query.
    pub async fn replication(&self) -> Result<Replication> {
        let what = "reading the replication settings";
        let client = self
            .pool()
            .get()
            .await
            .map_err(|err| storage_error(classify_pool(&err), what, err))?;
        let query = client.query_one(
            "SELECT (SELECT count(*) FROM pg_stat_replication)::int4, \
             current_setting('synchronous_standby_names'), \
             current_setting('synchronous_commit')",
            &[],
        );
        let row = tokio::time::timeout(LIMIT, query)
            .await
            .map_err(|_| StorageError::transient(format!("{what}: no answer within {LIMIT:?}")))?
            .map_err(|err| storage_error(classify(&err, Op::Read), what, err))?;
        let standbys: i32 = row.get(0);
        Ok(Replication {
            standbys: u32::try_from(standbys)
                .map_err(|_| StorageError::permanent(format!("{what}: {standbys} standbys")))?,
            synchronous_standby_names: row.get(1),
            synchronous_commit: row.get(2),
        })
    }

    /// Logs a warning if a failover could lose acknowledged writes; a
    /// failed check is logged too, never fatal.
    pub(crate) async fn warn_without_synchronous_replication(&self) {
        let url = self.config().redacted_url();
        match self.replication().await {
            Ok(r) if r.failover_can_lose_writes() => tracing::warn!(
                %url,
                standbys = r.standbys,
                synchronous_standby_names = %r.synchronous_standby_names,
                synchronous_commit = %r.synchronous_commit,
                "postgres: standbys replicate asynchronously; a promoted standby can miss \
                 acknowledged lease writes and fencing tokens (set synchronous_standby_names \
                 and synchronous_commit = on; see docs/guarantees.md)"
            ),
            Ok(r) => tracing::debug!(%url, ?r, "postgres replication"),
            Err(err) => {
                tracing::warn!(%url, %err, "postgres: could not read the replication settings")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_standbys_without_a_waiting_commit_can_lose_writes() {
        let r = |standbys, names: &str, commit: &str| Replication {
            standbys,
            synchronous_standby_names: names.into(),
            synchronous_commit: commit.into(),
        };
        assert!(!r(0, "", "on").failover_can_lose_writes());
        assert!(r(1, "", "on").failover_can_lose_writes());
        assert!(r(2, " ", "on").failover_can_lose_writes());
        assert!(r(1, "s1", "off").failover_can_lose_writes());
        assert!(r(1, "s1", "local").failover_can_lose_writes());
        assert!(!r(1, "s1", "on").failover_can_lose_writes());
        assert!(!r(1, "FIRST 1 (s1)", "remote_apply").failover_can_lose_writes());
    }
}
