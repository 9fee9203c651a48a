//! Fencing for a resource kept in PostgreSQL: a transaction that carries
//! the writer's fencing token commits its writes only if no higher token
//! was seen.
//!
//! [`PostgresFence::check`] runs, inside the caller's transaction, one
//! statement that records the token for the resource if it is at least the
//! highest recorded, and locks the resource's fence row until the
//! transaction ends. So fenced transactions on one resource run one at a
//! time in token order, and a deposed leader's transaction (lower token)
//! learns it must roll back before it writes anything.
//!
//! [`PostgresFence::append`] applies the same guard to an append-only
//! log (table `<fence table>_log`): inside the caller's transaction it
//! checks the token and inserts the entry with the next sequence number,
//! so the entry is in the log exactly when the transaction commits, in
//! the order the fence admitted it. [`PostgresFence::log`] reads it back.
//!
//! [`PostgresFence`] implements the workspace's one fencing contract,
//! [`fence::Fence`] (guarded write of a register, fenced append, reads),
//! checked by the shared `fence::suite!` on the real engine; [`open`]
//! opens it from a URL (as `storage_url::open_fence` does). The outcome
//! types are the shared ones, re-exported here.
//!
//! ```no_run
//! use storage_postgres::{PostgresStorage, fence::PostgresFence};
//!
//! # async fn demo(token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! let storage = PostgresStorage::from_url("postgres://app@db.internal/app").await?;
//! let fence = PostgresFence::create(&storage, "fences").await?;
//! let mut client = storage.pool().get().await?;
//! let tx = client.transaction().await?;
//! if fence.check(&tx, "billing", token).await? {
//!     tx.execute("UPDATE invoices SET sent = true WHERE due < now()", &[]).await?;
//!     tx.commit().await?;
//! } // else: a newer leader exists; dropping `tx` rolls back
//! # Ok(()) }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use deadpool_postgres::Pool;
pub use fence::{AppendOutcome, FenceOutcome, LogEntry};
use fence::{DynFence, Fence, Fenced, Numbering, OpenOptions};
use ttl_storage::{ErrorKind, Result, StorageError};

use crate::{
    PostgresConfig, PostgresStorage,
    error::{Op, classify, classify_pool, storage_error},
};

/// Fence rows of one table `(resource text PRIMARY KEY, token bigint,
/// value bytea)`, and the fenced logs in `<table>_log`
/// `(resource text, seq bigint, token bigint, value bytea, PRIMARY KEY (resource, seq))`.
///
/// Its [`Fence`] implementation runs on the storage's connection pool:
/// a guarded write is one `INSERT … ON CONFLICT … DO UPDATE … WHERE
/// token <= $2` (the row's `value` is the register's), an append is a
/// transaction of [`append`](Self::append) (numbered
/// [`Numbering::Contiguous`], in commit order).
#[derive(Debug, Clone)]
pub struct PostgresFence {
    pool: Pool,
    table: String,
    log_table: String,
    check_sql: String,
    write_sql: String,
}

impl PostgresFence {
    /// Creates the fence table `table` (in the storage's schema, if any)
    /// and its log table `<table>_log` when missing, serialized by an
    /// advisory lock like the storage's own table. `table` must be a plain
    /// lower-case identifier.
    pub async fn create(storage: &PostgresStorage, table: &str) -> Result<Self> {
        let config = storage.config();
        let checked = crate::PostgresConfig::builder()
            .host(config.host())
            .table(table)
            .build()
            .map_err(|err| {
                StorageError::with_source(ErrorKind::Permanent, "bad fence table name", err)
            })?;
        let table = match config.schema() {
            Some(schema) => format!("{schema}.{}", checked.table()),
            None => checked.table().to_string(),
        };
        let mut client = storage.pool().get().await.map_err(|err| {
            storage_error(crate::error::classify_pool(&err), "fence: connecting", err)
        })?;
        let failed = |err: tokio_postgres::Error| {
            storage_error(
                classify(&err, Op::Read),
                &format!("creating fence table {table}"),
                err,
            )
        };
        let tx = client.transaction().await.map_err(failed)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&format!("storage-postgres:{table}")],
        )
        .await
        .map_err(failed)?;
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (resource text PRIMARY KEY, token bigint NOT NULL)"
        ))
        .await
        .map_err(failed)?;
        // The register's value (of `Fence::write`); tables made before it
        // existed get it here.
        tx.batch_execute(&format!(
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS value bytea"
        ))
        .await
        .map_err(failed)?;
        let log_table = format!("{table}_log");
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {log_table} (resource text NOT NULL, seq bigint NOT NULL, \
             token bigint NOT NULL, value bytea NOT NULL, PRIMARY KEY (resource, seq))"
        ))
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        let check_sql = format!(
            "INSERT INTO {table} AS f (resource, token) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token \
             WHERE f.token <= EXCLUDED.token RETURNING token"
        );
        let write_sql = format!(
            "INSERT INTO {table} AS f (resource, token, value) VALUES ($1, $2, $3) \
             ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value \
             WHERE f.token <= EXCLUDED.token RETURNING token"
        );
        Ok(PostgresFence {
            pool: storage.pool().clone(),
            table,
            log_table,
            check_sql,
            write_sql,
        })
    }

    /// The fence table, as written in SQL.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Inside `tx`: records `token` for `resource` and returns `true` if it
    /// is at least the highest token recorded (the fence row stays locked
    /// until `tx` ends); returns `false` without changing anything if a
    /// higher token was recorded — roll back then.
    ///
    /// Tokens above `i64::MAX` are refused with a permanent error.
    pub async fn check(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        resource: &str,
        token: u64,
    ) -> Result<bool> {
        let token = i64::try_from(token).map_err(|_| {
            StorageError::permanent(format!("fencing token {token} does not fit a bigint"))
        })?;
        let row = tx
            .query_opt(&self.check_sql, &[&resource, &token])
            .await
            // Nothing commits before the caller's COMMIT: a lost answer
            // here aborts the transaction, so it is never "unknown".
            .map_err(|err| storage_error(classify(&err, Op::Read), "fence check", err))?;
        Ok(row.is_some())
    }

    /// Inside `tx`: if `token` is at least the highest token recorded for
    /// `resource` (the fence [`check`](Self::check) uses), records it and
    /// inserts `value` into the resource's log with the next sequence
    /// number. The fence row stays locked until `tx` ends, so appends are
    /// numbered in the order they commit; the entry is in the log when
    /// `tx` commits (a failed commit leaves the outcome unknown). Refused:
    /// nothing changed, roll back.
    ///
    /// Tokens above `i64::MAX` are refused with a permanent error.
    pub async fn append(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<AppendOutcome> {
        if !self.check(tx, resource, token).await? {
            let highest = tx
                .query_opt(
                    &format!("SELECT token FROM {} WHERE resource = $1", self.table),
                    &[&resource],
                )
                .await
                .map_err(|err| storage_error(classify(&err, Op::Read), "fence read", err))?
                .and_then(|row| row.try_get::<_, i64>(0).ok())
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0);
            return Ok(AppendOutcome::Rejected { highest });
        }
        // Safe as `max + 1`: every append holds the fence row's lock.
        let signed = i64::try_from(token).unwrap_or(i64::MAX);
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO {log} (resource, seq, token, value) \
                     SELECT $1, coalesce(max(seq), 0) + 1, $2, $3 FROM {log} WHERE resource = $1 \
                     RETURNING seq",
                    log = self.log_table
                ),
                &[&resource, &signed, &value],
            )
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), "fenced log insert", err))?;
        let seq = row
            .try_get::<_, i64>(0)
            .ok()
            .and_then(|s| u64::try_from(s).ok())
            .ok_or_else(|| StorageError::permanent("fenced log insert: no sequence number"))?;
        Ok(AppendOutcome::Appended { seq })
    }

    /// Reads `resource`'s log, in accept order (committed entries only).
    pub async fn log(
        &self,
        client: &tokio_postgres::Client,
        resource: &str,
    ) -> Result<Vec<LogEntry>> {
        let rows = client
            .query(
                &format!(
                    "SELECT seq, token, value FROM {} WHERE resource = $1 ORDER BY seq",
                    self.log_table
                ),
                &[&resource],
            )
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), "fenced log read", err))?;
        rows.iter()
            .map(|row| {
                let number = |i: usize| {
                    row.try_get::<_, i64>(i)
                        .ok()
                        .and_then(|n| u64::try_from(n).ok())
                };
                match (number(0), number(1), row.try_get::<_, Vec<u8>>(2)) {
                    (Some(seq), Some(token), Ok(value)) => Ok(LogEntry { seq, token, value }),
                    _ => Err(StorageError::permanent("fenced log read: a malformed row")),
                }
            })
            .collect()
    }

    /// The highest token recorded for `resource`, if any.
    pub async fn highest(
        &self,
        client: &tokio_postgres::Client,
        resource: &str,
    ) -> Result<Option<u64>> {
        let row = client
            .query_opt(
                &format!("SELECT token FROM {} WHERE resource = $1", self.table),
                &[&resource],
            )
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), "fence read", err))?;
        Ok(row
            .and_then(|row| row.try_get::<_, i64>(0).ok())
            .and_then(|t| u64::try_from(t).ok()))
    }
}

/// A pooled connection for the [`Fence`] implementation.
async fn pooled(pool: &Pool) -> Result<deadpool_postgres::Object> {
    pool.get()
        .await
        .map_err(|err| storage_error(classify_pool(&err), "fence: connecting", err))
}

#[async_trait]
impl Fence for PostgresFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        let signed = fence::signed_token(token)?;
        ttl_storage::check_value(value)?;
        let client = pooled(&self.pool).await?;
        let row = client
            .query_opt(&self.write_sql, &[&resource, &signed, &value])
            .await
            .map_err(|err| storage_error(classify(&err, Op::Write), "fenced write", err))?;
        if row.is_some() {
            return Ok(FenceOutcome::Accepted);
        }
        let highest = self.highest(&client, resource).await?.ok_or_else(|| {
            StorageError::permanent("fenced write: refused, but the fence row is gone")
        })?;
        Ok(FenceOutcome::Rejected { highest })
    }

    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        let client = pooled(&self.pool).await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT token, value FROM {} WHERE resource = $1",
                    self.table
                ),
                &[&resource],
            )
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), "fence read", err))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let token = row
            .try_get::<_, i64>(0)
            .ok()
            .and_then(|t| u64::try_from(t).ok())
            .ok_or_else(|| StorageError::permanent("fence read: a malformed token"))?;
        let value = row
            .try_get::<_, Option<Vec<u8>>>(1)
            .map_err(|err| {
                storage_error(ErrorKind::Permanent, "fence read: a malformed value", err)
            })?
            .unwrap_or_default();
        Ok(Some(Fenced { token, value }))
    }

    /// One transaction: [`PostgresFence::append`], then `COMMIT` (a lost
    /// answer to it is an unknown outcome).
    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        let mut client = pooled(&self.pool).await?;
        let tx = client
            .transaction()
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), "fenced append: BEGIN", err))?;
        let outcome = PostgresFence::append(self, &tx, resource, token, value).await?;
        if let AppendOutcome::Appended { .. } = outcome {
            tx.commit().await.map_err(|err| {
                storage_error(classify(&err, Op::Write), "fenced append: COMMIT", err)
            })?;
        }
        Ok(outcome)
    }

    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        let client = pooled(&self.pool).await?;
        PostgresFence::log(self, &client, resource).await
    }

    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}

/// Opens the fence of a PostgreSQL configuration (a parsed URL, as
/// [`crate::DRIVER`]'s fence opener passes it) on a pool of its own, in the table
/// `options.table` (in the configuration's schema, if any). The tables
/// are created if missing whatever `options.create` says: creation is
/// idempotent and serialized by an advisory lock.
///
/// # Errors
///
/// A bad table name (permanent), or the connection's error.
pub async fn open(config: PostgresConfig, options: &OpenOptions) -> Result<DynFence> {
    let storage = PostgresStorage::connect(config).await?;
    Ok(Arc::new(
        PostgresFence::create(&storage, &options.table).await?,
    ))
}
