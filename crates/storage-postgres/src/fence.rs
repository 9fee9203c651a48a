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

use ttl_storage::{ErrorKind, StorageError};

use crate::{
    PostgresStorage,
    error::{Op, classify, storage_error},
};

/// Fence rows of one table `(resource text PRIMARY KEY, token bigint)`.
#[derive(Debug, Clone)]
pub struct PostgresFence {
    table: String,
    check_sql: String,
}

impl PostgresFence {
    /// Creates the fence table `table` (in the storage's schema, if any)
    /// when missing, serialized by an advisory lock like the storage's own
    /// table. `table` must be a plain lower-case identifier.
    pub async fn create(storage: &PostgresStorage, table: &str) -> Result<Self, StorageError> {
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
        tx.commit().await.map_err(failed)?;
        let check_sql = format!(
            "INSERT INTO {table} AS f (resource, token) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token \
             WHERE f.token <= EXCLUDED.token RETURNING token"
        );
        Ok(PostgresFence { table, check_sql })
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
    ) -> Result<bool, StorageError> {
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

    /// The highest token recorded for `resource`, if any.
    pub async fn highest(
        &self,
        client: &tokio_postgres::Client,
        resource: &str,
    ) -> Result<Option<u64>, StorageError> {
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
