//! [`PostgresStorage`]: the [`TtlStorage`] implementation.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{NoTls, Statement, types::ToSql};
use ttl_storage::{ErrorKind, Key, Result, StorageError, Ttl, TtlStorage, check_value};

use crate::{
    config::PostgresConfig,
    error::{ConfigError, Op, classify, classify_pool, storage_error},
    schema,
};

/// How much longer than the server's `statement_timeout` the client waits
/// before it gives up on an answer: the server's own cancellation (a clean
/// "not applied") should normally arrive first.
const CLIENT_TIMEOUT_MARGIN: Duration = Duration::from_millis(500);

/// The four statements, for one table. `now()` is the start of the
/// statement's transaction on the *server's* clock; each statement is its
/// own transaction, so every expiry decision uses one server instant.
#[derive(Debug)]
struct Statements {
    insert: String,
    cas: String,
    cad: String,
    get: String,
}

impl Statements {
    fn new(table: &str) -> Self {
        // $n::bigint seconds; 0 means "never expires" (NULL).
        let expiry = |n: u8| {
            format!(
                "CASE WHEN ${n}::bigint = 0 THEN NULL ELSE now() + ${n}::bigint * interval '1 second' END"
            )
        };
        let live = "(expires_at IS NULL OR expires_at > now())";
        Statements {
            insert: format!(
                "INSERT INTO {table} AS r (key, value, expires_at) VALUES ($1, $2, {}) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at \
                 WHERE r.expires_at IS NOT NULL AND r.expires_at <= now()",
                expiry(3)
            ),
            cas: format!(
                "UPDATE {table} SET value = $3, expires_at = {} \
                 WHERE key = $1 AND value = $2 AND {live}",
                expiry(4)
            ),
            cad: format!("DELETE FROM {table} WHERE key = $1 AND value = $2 AND {live}"),
            get: format!("SELECT value FROM {table} WHERE key = $1 AND {live}"),
        }
    }
}

/// A [`TtlStorage`] on PostgreSQL: one table, each operation one atomic
/// statement on a pooled connection. See the [crate docs](crate).
pub struct PostgresStorage {
    pool: Pool,
    config: PostgresConfig,
    sql: Statements,
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PostgresStorage {
    /// Parses `url` (see [`PostgresConfig::from_url`]) and [connects](Self::connect).
    pub async fn from_url(url: &str) -> Result<Self> {
        let config = PostgresConfig::from_url(url).map_err(|err: ConfigError| {
            StorageError::with_source(ErrorKind::Permanent, "bad PostgreSQL URL", err)
        })?;
        Self::connect(config).await
    }

    /// Opens the pool and one connection, creates the table if the
    /// configuration asks for it (the default) and checks its columns.
    ///
    /// Errors: [`ErrorKind::Transient`] when the server cannot be reached;
    /// [`ErrorKind::Permanent`] for bad credentials, a TLS failure (for
    /// instance `sslmode=require` against a server without TLS), a missing
    /// table without `create_table` or a table of the wrong shape.
    pub async fn connect(config: PostgresConfig) -> Result<Self> {
        let url = config.redacted_url();
        let mut pg = tokio_postgres::Config::new();
        pg.host(&config.host)
            .port(config.port)
            .user(&config.user)
            .dbname(&config.dbname)
            .connect_timeout(config.connect_timeout)
            .application_name("storage-postgres")
            .options(format!(
                "-c statement_timeout={}",
                config.request_timeout.as_millis()
            ))
            .target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
        if let Some(password) = &config.password {
            pg.password(password);
        }
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = if config.ssl_mode.uses_tls() {
            pg.ssl_mode(tokio_postgres::config::SslMode::Require);
            let tls = crate::tls::client_config(config.ssl_root_cert()).await?;
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
            Manager::from_config(pg, tls, manager_config)
        } else {
            pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
            Manager::from_config(pg, NoTls, manager_config)
        };
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(config.request_timeout))
            .create_timeout(Some(config.connect_timeout))
            .recycle_timeout(Some(config.connect_timeout))
            .build()
            .map_err(|err| {
                storage_error(ErrorKind::Permanent, &format!("configuring {url}"), err)
            })?;
        let storage = PostgresStorage {
            pool,
            sql: Statements::new(&config.qualified_table()),
            config,
        };
        let mut client = storage.client(&format!("connecting to {url}")).await?;
        let config = &storage.config;
        let setup = async {
            if config.create_table {
                schema::create(&mut client, config).await?;
            }
            schema::validate(&client, config).await
        };
        // Each statement is bounded by the server's statement_timeout; this
        // bounds a lost connection too.
        let limit = config.connect_timeout + 2 * storage.answer_limit();
        tokio::time::timeout(limit, setup).await.map_err(|_| {
            StorageError::transient(format!(
                "setting up table {} on {url}: no answer within {limit:?}",
                config.qualified_table()
            ))
        })??;
        tracing::debug!(%url, table = %storage.config.qualified_table(), "postgres storage connected");
        Ok(storage)
    }

    /// The configuration this storage was connected with.
    pub fn config(&self) -> &PostgresConfig {
        &self.config
    }

    /// The connection pool, for callers that want to share it (the
    /// table's name is [`PostgresConfig::qualified_table`]).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A pooled connection. Nothing has been sent yet, so every failure is
    /// transient or permanent, never unknown.
    async fn client(&self, what: &str) -> Result<Object> {
        self.pool.get().await.map_err(|err| {
            let kind = classify_pool(&err);
            tracing::debug!(%err, ?kind, "{what}: no connection");
            storage_error(kind, what, err)
        })
    }

    /// How long the client waits for one answer.
    fn answer_limit(&self) -> Duration {
        self.config.request_timeout + CLIENT_TIMEOUT_MARGIN
    }

    /// `sql` prepared on `client` (cached per connection). Nothing is
    /// executed yet, so a lost answer here is transient, never unknown.
    async fn prepare(&self, client: &Object, what: &str, sql: &str) -> Result<Statement> {
        let limit = self.answer_limit();
        match tokio::time::timeout(limit, client.prepare_cached(sql)).await {
            Ok(Ok(statement)) => Ok(statement),
            Ok(Err(err)) => Err(storage_error(classify(&err, Op::Read), what, err)),
            Err(_) => Err(StorageError::transient(format!(
                "{what}: preparing the statement got no answer within {limit:?}"
            ))),
        }
    }

    /// Runs one conditional write and returns the number of rows it changed.
    async fn write(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let client = self.client(what).await?;
        let statement = self.prepare(&client, what, sql).await?;
        let limit = self.answer_limit();
        match tokio::time::timeout(limit, client.execute(&statement, params)).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(err)) => {
                let kind = classify(&err, Op::Write);
                tracing::debug!(%err, ?kind, "{what} failed");
                Err(storage_error(kind, what, err))
            }
            Err(_) => Err(StorageError::outcome_unknown(format!(
                "{what}: no answer within {limit:?}"
            ))),
        }
    }
}

/// The TTL in whole seconds for the statements, `0` for [`Ttl::NEVER`].
fn ttl_secs(ttl: Ttl) -> i64 {
    i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)
}

#[async_trait]
impl TtlStorage for PostgresStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        let rows = self
            .write(
                "insert_if_not_exists",
                &self.sql.insert,
                &[&key.as_str(), &value, &ttl_secs(ttl)],
            )
            .await?;
        Ok(rows == 1)
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        let rows = self
            .write(
                "compare_and_swap",
                &self.sql.cas,
                &[&key.as_str(), &old, &new, &ttl_secs(ttl)],
            )
            .await?;
        Ok(rows == 1)
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        let rows = self
            .write(
                "compare_and_delete",
                &self.sql.cad,
                &[&key.as_str(), &value],
            )
            .await?;
        Ok(rows == 1)
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        const WHAT: &str = "get";
        let client = self.client(WHAT).await?;
        let statement = self.prepare(&client, WHAT, &self.sql.get).await?;
        let limit = self.answer_limit();
        let row = tokio::time::timeout(limit, client.query_opt(&statement, &[&key.as_str()]))
            .await
            .map_err(|_| StorageError::transient(format!("{WHAT}: no answer within {limit:?}")))?
            .map_err(|err| storage_error(classify(&err, Op::Read), WHAT, err))?;
        match row {
            None => Ok(None),
            Some(row) => row
                .try_get::<_, Vec<u8>>(0)
                .map(Some)
                .map_err(|err| storage_error(ErrorKind::Permanent, WHAT, err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_judge_expiry_by_the_server_clock() {
        let sql = Statements::new("s.t");
        for statement in [&sql.insert, &sql.cas, &sql.cad, &sql.get] {
            assert!(statement.contains("now()"), "{statement}");
            assert!(statement.contains("s.t"), "{statement}");
        }
        assert!(sql.insert.contains("ON CONFLICT (key) DO UPDATE"));
        assert_eq!(ttl_secs(Ttl::NEVER), 0);
        assert_eq!(ttl_secs(Ttl::from_secs(20).unwrap()), 20);
    }
}
