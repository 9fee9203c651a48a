//! [`PostgresStorage`]: the [`TtlStorage`] implementation.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::task::JoinHandle;
use tokio_postgres::{NoTls, Row, Statement, types::ToSql};
use ttl_storage::{
    Counted, CountedWrite, Entry, ErrorKind, Key, Result, StorageError, TimeLeft, Ttl, TtlStorage,
    Watch, WatchUnsupported, check_value,
};
use ttl_storage::{changes::Feeds, waiters::Waiters};

use crate::{
    config::PostgresConfig,
    error::{ConfigError, Op, classify, classify_pool, storage_error},
    pooler, schema, watch,
};

mod counted;
mod statements;

use statements::Statements;

/// How much longer than the server's `statement_timeout` the client waits
/// before it gives up on an answer: the server's own cancellation (a clean
/// "not applied") should normally arrive first.
const CLIENT_TIMEOUT_MARGIN: Duration = Duration::from_millis(500);

/// A [`TtlStorage`] on PostgreSQL: one table, each operation one atomic
/// statement on a pooled connection. See the [crate docs](crate).
pub struct PostgresStorage {
    pool: Pool,
    config: PostgresConfig,
    sql: Arc<Statements>,
    /// The notification channel compare-and-delete notifies.
    channel: String,
    /// The waiters of [`TtlStorage::watch`], ready while the listener listens.
    waiters: Arc<Waiters>,
    /// The followers of [`TtlStorage::changes`], armed while it listens.
    feeds: Arc<Feeds>,
    /// The task of the `LISTEN` connection ([`watch::run`]), started
    /// once [`PostgresStorage::connect`]'s checks have passed.
    _listener: Option<AbortOnDrop>,
}

impl Drop for PostgresStorage {
    fn drop(&mut self) {
        // Pending watches complete (their waiters re-check and fail);
        // followers are told the feed is down.
        self.waiters.set_ready(false);
        self.feeds.set_ready(false);
    }
}

/// What opening does to the table.
#[derive(Debug, Clone, Copy)]
enum Setup {
    /// Creates it when the configuration says so (`create_table`).
    AsConfigured,
    /// Creates nothing; a missing table is a [`ttl_storage::NoStore`].
    Existing,
}

/// The listener's task before it is spawned.
type Listening = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// A task aborted when this is dropped (also when `connect` fails after
/// starting it).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
        Self::open(config, Setup::AsConfigured).await
    }

    /// Connects like [`connect`](Self::connect) but writes nothing while
    /// opening, whatever `create_table` says: no schema, no table. A
    /// missing table is a permanent error whose source is a
    /// [`ttl_storage::NoStore`]. A role that may only `SELECT` opens this
    /// way (`vvm-host status`).
    pub async fn connect_existing(config: PostgresConfig) -> Result<Self> {
        Self::open(config, Setup::Existing).await
    }

    async fn open(config: PostgresConfig, setup: Setup) -> Result<Self> {
        let url = config.redacted_url();
        let mut pg = tokio_postgres::Config::new();
        for (host, port) in config.hosts() {
            pg.host(host).port(port);
        }
        pg.user(&config.user)
            .dbname(&config.dbname)
            .connect_timeout(config.options.connect_timeout)
            .application_name("storage-postgres")
            .options(format!(
                "-c statement_timeout={}",
                config.options.request_timeout.as_millis()
            ))
            .target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
        if let Some(password) = &config.password {
            pg.password(password);
        }
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let channel = watch::channel(&config.qualified_table());
        let waiters = Arc::new(Waiters::default());
        let feeds = Arc::new(Feeds::default());
        // The listener and the pooler check's second connection are
        // built here, for either transport, and run only after the pool's
        // first connection has shown no pooler shares its session.
        let (manager, listen, second): (Manager, Listening, pooler::Connecting) =
            if config.ssl_mode.uses_tls() {
                pg.ssl_mode(tokio_postgres::config::SslMode::Require);
                let tls =
                    ttl_storage::kit::tls::client_config(config.ssl_root_cert(), "sslrootcert")
                        .await?;
                let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
                (
                    Manager::from_config(pg.clone(), tls.clone(), manager_config),
                    Box::pin(watch::run(
                        pg.clone(),
                        tls.clone(),
                        channel.clone(),
                        Arc::clone(&waiters),
                        Arc::clone(&feeds),
                    )),
                    pooler::connect_one(pg, tls),
                )
            } else {
                pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
                (
                    Manager::from_config(pg.clone(), NoTls, manager_config),
                    Box::pin(watch::run(
                        pg.clone(),
                        NoTls,
                        channel.clone(),
                        Arc::clone(&waiters),
                        Arc::clone(&feeds),
                    )),
                    pooler::connect_one(pg, NoTls),
                )
            };
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(config.options.request_timeout))
            .create_timeout(Some(config.options.connect_timeout))
            .recycle_timeout(Some(config.options.connect_timeout))
            .build()
            .map_err(|err| {
                storage_error(ErrorKind::Permanent, &format!("configuring {url}"), err)
            })?;
        let mut storage = PostgresStorage {
            pool,
            sql: Arc::new(Statements::new(&config.qualified_table(), &channel)),
            config,
            channel,
            waiters,
            feeds,
            _listener: None,
        };
        // Before anything else is sent: a pooler in transaction mode would
        // spread this storage's statements (and LISTEN) over shared sessions.
        storage.refuse_shared_sessions(second).await?;
        storage._listener = Some(AbortOnDrop(tokio::spawn(listen)));
        let mut client = storage.client(&format!("connecting to {url}")).await?;
        let config = &storage.config;
        let setup = async {
            match setup {
                Setup::AsConfigured if config.create_table => {
                    schema::create(&mut client, config).await?;
                }
                Setup::AsConfigured => {}
                Setup::Existing => schema::require(&client, config).await?,
            }
            schema::validate(&client, config).await
        };
        // Each statement is bounded by the server's statement_timeout; this
        // bounds a lost connection too.
        let limit = config.options.connect_timeout + 2 * storage.answer_limit();
        tokio::time::timeout(limit, setup).await.map_err(|_| {
            StorageError::transient(format!(
                "setting up table {} on {url}: no answer within {limit:?}",
                config.qualified_table()
            ))
        })??;
        // Back to the pool: the replication check takes a connection too
        // (with `pool_size=1` it waited a whole request timeout for this one).
        drop(client);
        tracing::debug!(%url, table = %storage.config.qualified_table(), "postgres storage connected");
        storage.warn_without_synchronous_replication().await;
        storage.warn_without_statement_timeout().await;
        // The listener connects in parallel; watches answer unsupported
        // until it listens.
        let deadline = tokio::time::Instant::now() + storage.config.options.connect_timeout;
        while !storage.waiters.is_ready() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !storage.waiters.is_ready() {
            tracing::warn!(%url, "postgres watch: not listening yet; waiters poll until it is");
        }
        Ok(storage)
    }

    /// The configuration this storage was connected with.
    pub fn config(&self) -> &PostgresConfig {
        &self.config
    }

    /// The notification channel on which compare-and-delete notifies the
    /// key it deleted (`ttl_storage_<hash of the table>`), which
    /// [`TtlStorage::watch`] listens to.
    pub fn watch_channel(&self) -> &str {
        &self.channel
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

    /// Runs the read `sql` for `key` (one row at most) within the answer
    /// limit; errors are classified as reads.
    async fn read_row(
        &self,
        what: &str,
        sql: &str,
        key: &Key,
    ) -> Result<Option<tokio_postgres::Row>> {
        let client = self.client(what).await?;
        let statement = self.prepare(&client, what, sql).await?;
        let limit = self.answer_limit();
        tokio::time::timeout(limit, client.query_opt(&statement, &[&key.as_str()]))
            .await
            .map_err(|_| StorageError::transient(format!("{what}: no answer within {limit:?}")))?
            .map_err(|err| storage_error(classify(&err, Op::Read), what, err))
    }

    /// How long the client waits for one answer.
    fn answer_limit(&self) -> Duration {
        self.config.options.request_timeout + CLIENT_TIMEOUT_MARGIN
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

    /// Runs one conditional write and returns the rows it returned (one
    /// per row it changed, for the plain writes).
    async fn write(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let client = self.client(what).await?;
        let statement = self.prepare(&client, what, sql).await?;
        let limit = self.answer_limit();
        match tokio::time::timeout(limit, client.query(&statement, params)).await {
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
        Ok(rows.len() == 1)
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
        Ok(rows.len() == 1)
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
        Ok(rows.len() == 1)
    }

    /// One statement: the record's write and the counter's advance as
    /// data-modifying `WITH` parts (see `storage/counted.rs`).
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        self.counted(write).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        const WHAT: &str = "get";
        match self.read_row(WHAT, &self.sql.get, key).await? {
            None => Ok(None),
            Some(row) => row
                .try_get::<_, Vec<u8>>(0)
                .map(Some)
                .map_err(|err| storage_error(ErrorKind::Permanent, WHAT, err)),
        }
    }

    /// The value and its time to live, computed by the server
    /// (`expires_at - now()`) in the same statement: [`TimeLeft::About`]
    /// to the millisecond, or [`TimeLeft::Never`].
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        const WHAT: &str = "get";
        let Some(row) = self.read_row(WHAT, &self.sql.entry, key).await? else {
            return Ok(None);
        };
        let permanent = |err| storage_error(ErrorKind::Permanent, WHAT, err);
        let value: Vec<u8> = row.try_get(0).map_err(permanent)?;
        let millis: Option<f64> = row.try_get(1).map_err(permanent)?;
        Ok(Some(Entry {
            value,
            time_left: time_left(millis),
        }))
    }

    /// Registers a waiter of the key with the `LISTEN` connection, then (in
    /// the future) reads the record's remaining time to live, computed by
    /// the server (`expires_at - now()`): completes at once when there is
    /// no live record, when a compare-and-delete of the key commits (its
    /// `pg_notify`), 1 ms after the record's expiry as read, or when the
    /// listener connection is lost. Answers [`WatchUnsupported`] while the
    /// listener is not listening (connecting, or reconnecting): the caller
    /// polls.
    /// The notifications of the writes (see the crate docs): every new
    /// value with its count (a counted write), every delete; expiry is not
    /// reported (rows do not expire by themselves). Armed while the
    /// listener listens. A value over 3 600 bytes is not carried: its
    /// followers are interrupted and read the record.
    fn changes(
        &self,
        key: &Key,
        _counter: Option<&Key>,
    ) -> std::result::Result<ttl_storage::Changes, ttl_storage::ChangesUnsupported> {
        Ok(self.feeds.subscribe(key.as_str().to_string()))
    }

    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        let woken = self
            .waiters
            .register(key.as_str().to_string())
            .ok_or(WatchUnsupported)?;
        let pool = self.pool.clone();
        let sql = Arc::clone(&self.sql);
        let key = key.as_str().to_string();
        let limit = self.answer_limit();
        Ok(Box::pin(async move {
            let left = match remaining(&pool, &sql.remaining, &key, limit).await {
                Ok(Remaining::Gone) => return,
                Ok(Remaining::Never) => None,
                Ok(Remaining::Left(left)) => Some(left),
                Err(err) => {
                    tracing::debug!(%err, "postgres watch: reading the record's expiry failed");
                    tokio::time::sleep(WATCH_ERROR_PAUSE).await;
                    return;
                }
            };
            let expired = async {
                match left {
                    Some(left) => tokio::time::sleep(left).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = woken.woken() => {}
                () = expired => {}
            }
        }))
    }
}

/// How long a watch whose expiry read failed waits before it completes, so
/// that a caller that re-watches at once does not spin while the server is
/// unreachable.
const WATCH_ERROR_PAUSE: Duration = Duration::from_millis(200);

/// What the expiry read of a watch found.
enum Remaining {
    /// No live record.
    Gone,
    /// A record that never expires.
    Never,
    /// A record that expires after this (plus 1 ms, so that it has).
    Left(Duration),
}

/// A live record's time left from the server's `expires_at - now()` in
/// milliseconds (`None`: no expiry).
fn time_left(millis: Option<f64>) -> TimeLeft {
    match millis {
        None => TimeLeft::Never,
        // At most MAX_TTL away: the conversion cannot saturate.
        Some(ms) if ms.is_finite() && ms >= 0.0 => {
            TimeLeft::About(Duration::from_secs_f64(ms / 1000.0))
        }
        Some(_) => TimeLeft::Unknown,
    }
}

/// Reads the remaining time to live of `key`'s record with `sql`.
async fn remaining(pool: &Pool, sql: &str, key: &str, limit: Duration) -> Result<Remaining> {
    const WHAT: &str = "watch";
    let client = pool.get().await.map_err(|err| {
        let kind = classify_pool(&err);
        storage_error(kind, WHAT, err)
    })?;
    let read = async {
        let statement = client.prepare_cached(sql).await?;
        client.query_opt(&statement, &[&key]).await
    };
    let row = tokio::time::timeout(limit, read)
        .await
        .map_err(|_| StorageError::transient(format!("{WHAT}: no answer within {limit:?}")))?
        .map_err(|err| storage_error(classify(&err, Op::Read), WHAT, err))?;
    let Some(row) = row else {
        return Ok(Remaining::Gone);
    };
    let millis: Option<f64> = row
        .try_get(0)
        .map_err(|err| storage_error(ErrorKind::Permanent, WHAT, err))?;
    Ok(match millis {
        None => Remaining::Never,
        Some(ms) if ms.is_finite() && ms > 0.0 => {
            // At most MAX_TTL away: the conversion cannot saturate.
            Remaining::Left(Duration::from_secs_f64(ms / 1000.0) + Duration::from_millis(1))
        }
        Some(_) => Remaining::Gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_from_the_server() {
        assert_eq!(time_left(None), TimeLeft::Never);
        assert_eq!(
            time_left(Some(1500.0)),
            TimeLeft::About(Duration::from_millis(1500))
        );
        assert_eq!(time_left(Some(f64::NAN)), TimeLeft::Unknown);
        assert_eq!(time_left(Some(-3.0)), TimeLeft::Unknown);
    }

    #[test]
    fn statements_judge_expiry_by_the_server_clock() {
        let sql = Statements::new("s.t", "ttl_storage_0");
        assert!(sql.cad.contains("pg_notify('ttl_storage_0', key)"));
        for statement in [
            &sql.insert,
            &sql.cas,
            &sql.cad,
            &sql.get,
            &sql.entry,
            &sql.remaining,
            &sql.counted_insert,
            &sql.counted_swap,
        ] {
            assert!(statement.contains("now()"), "{statement}");
            assert!(statement.contains("s.t"), "{statement}");
        }
        // Written expiries count from the row's write.
        for statement in [
            &sql.insert,
            &sql.cas,
            &sql.counted_insert,
            &sql.counted_swap,
        ] {
            assert!(statement.contains("clock_timestamp() + $"), "{statement}");
        }
        // The counted forms: the counter after the record's parameters.
        assert!(
            sql.counted_insert.contains("SELECT $4,"),
            "{}",
            sql.counted_insert
        );
        assert!(
            sql.counted_swap.contains("SELECT $5,"),
            "{}",
            sql.counted_swap
        );
        assert!(sql.insert.contains("ON CONFLICT (key) DO UPDATE"));
        assert_eq!(ttl_secs(Ttl::NEVER), 0);
        assert_eq!(ttl_secs(Ttl::from_secs(20).unwrap()), 20);
    }
}
