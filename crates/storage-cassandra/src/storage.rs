//! [`CassandraStorage`]: the [`TtlStorage`] implementation.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use scylla::{
    client::{
        execution_profile::ExecutionProfile, session::Session, session_builder::SessionBuilder,
    },
    errors::{ExecutionError, NewSessionError},
    policies::load_balancing::DefaultPolicy,
    response::query_result::QueryResult,
    serialize::row::SerializeRow,
    statement::prepared::PreparedStatement,
    value::{CqlValue, Row},
};
use tokio::time::Instant;
use ttl_storage::{
    Entry, ErrorKind, Key, MAX_TTL, Result, StorageError, TimeLeft, Ttl, TtlStorage, check_value,
};

use crate::{
    classify::{
        Op, classify_execution, classify_new_session, classify_prepare, describe, login_refused,
        serial_read_retryable,
    },
    config::CassandraConfig,
    schema,
    suspects::{AttemptTracker, AvoidSuspects, Suspects, Unanswered},
};

/// Cassandra's largest TTL (20 years), which is also [`MAX_TTL`].
const CASSANDRA_MAX_TTL_SECS: u64 = 630_720_000;

/// A [`TtlStorage`] on Apache Cassandra or ScyllaDB, every operation a
/// lightweight transaction. See the [crate docs](crate) for the guarantees.
pub struct CassandraStorage {
    session: Session,
    config: CassandraConfig,
    insert: PreparedStatement,
    cas: PreparedStatement,
    delete: PreparedStatement,
    get: PreparedStatement,
    /// `get` with the value's remaining TTL, for [`TtlStorage::get_entry`].
    entry: PreparedStatement,
    /// Coordinators that left a request unanswered (see [`crate::suspects`]).
    suspects: Arc<Suspects>,
}

impl std::fmt::Debug for CassandraStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraStorage")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl CassandraStorage {
    /// Parses `url` (see [`CassandraConfig::from_url`]) and [connects](Self::connect).
    pub async fn from_url(url: &str) -> Result<Self> {
        let config = CassandraConfig::from_url(url).map_err(|err| {
            StorageError::with_source(ErrorKind::Permanent, "bad scylla:// URL", err)
        })?;
        Self::connect(config).await
    }

    /// Connects, creates the keyspace and table if the configuration asks
    /// for it, checks the table's schema and prepares the statements.
    ///
    /// Errors: [`ErrorKind::Permanent`] for a wrong schema, bad credentials
    /// or a TLS setup problem; [`ErrorKind::Transient`] when no node answers.
    pub async fn connect(config: CassandraConfig) -> Result<Self> {
        Self::open(config, false).await
    }

    /// Connects like [`connect`](Self::connect) but changes no schema,
    /// whatever `create_schema` says: a missing keyspace or table is a
    /// permanent error whose source is a [`ttl_storage::NoStore`].
    pub async fn connect_existing(config: CassandraConfig) -> Result<Self> {
        Self::open(config, true).await
    }

    async fn open(config: CassandraConfig, existing: bool) -> Result<Self> {
        let suspects = Arc::new(Suspects::default());
        let policy = AvoidSuspects::new(Arc::new(DefaultPolicy::default()), suspects.clone());
        let profile = ExecutionProfile::builder()
            .load_balancing_policy(Arc::new(policy))
            .request_timeout(Some(config.request_timeout))
            .consistency(config.consistency.to_driver())
            .serial_consistency(Some(config.serial_consistency.to_driver()))
            .build()
            .into_handle();
        let mut builder = SessionBuilder::new()
            .known_nodes(&config.contact_points)
            .connection_timeout(config.connect_timeout)
            .keyspaces_to_fetch([config.keyspace.clone()])
            .default_execution_profile_handle(profile);
        if let Some(credentials) = &config.credentials {
            builder = builder.user(&credentials.user, &credentials.password);
        }
        if let Some(tls) = &config.tls {
            builder = crate::tls::configure(builder, tls).await?;
        }
        // A frozen node accepts TCP connections and never answers: drop a
        // connection whose keepalives go unanswered for the request timeout
        // (the driver's default waits 30 s). Schema agreement keeps the
        // driver's 60 s: a busy cluster can take longer than a request
        // timeout to agree on a new keyspace.
        builder = builder
            .keepalive_interval(config.connect_timeout.min(Duration::from_secs(2)))
            .keepalive_timeout(config.request_timeout);
        let session = match builder.build().await {
            Ok(session) => session,
            Err(err) => return Err(session_failed(&config, err).await),
        };
        if config.create_schema && !existing {
            schema::create(&session, &config).await?;
        }
        schema::validate(&session, &config, existing).await?;

        let table = format!("{}.{}", config.keyspace, config.table);
        // Every record is written by an UPDATE, never an INSERT: an INSERT
        // adds a row marker whose TTL a later conditional UPDATE cannot
        // restart, so a record shortened by compare_and_swap would keep an
        // empty-valued ghost row alive. Without row markers a row lives
        // exactly as long as its value cell, and `IF value = null` is
        // "absent or expired".
        let insert =
            format!("UPDATE {table} USING TTL ? SET value = ? WHERE key = ? IF value = null");
        let cas = format!("UPDATE {table} USING TTL ? SET value = ? WHERE key = ? IF value = ?");
        let delete = format!("DELETE FROM {table} WHERE key = ? IF value = ?");
        let get = format!("SELECT value FROM {table} WHERE key = ?");
        let entry = format!("SELECT value, TTL(value) FROM {table} WHERE key = ?");
        let insert = prepare(&session, &insert, false).await?;
        let cas = prepare(&session, &cas, false).await?;
        let delete = prepare(&session, &delete, false).await?;
        let mut get = prepare(&session, &get, true).await?;
        get.set_consistency(config.serial_consistency.as_read_consistency());
        let mut entry = prepare(&session, &entry, true).await?;
        entry.set_consistency(config.serial_consistency.as_read_consistency());
        tracing::debug!(%table, nodes = ?config.contact_points, "scylla storage connected");
        Ok(CassandraStorage {
            session,
            config,
            insert,
            cas,
            delete,
            get,
            entry,
            suspects,
        })
    }

    /// Executes `statement`, noting which node each attempt went to: an
    /// attempt still unanswered when the request ends or is dropped makes
    /// its node a suspect that later requests go around.
    async fn execute(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
    ) -> std::result::Result<QueryResult, ExecutionError> {
        let tracker = Arc::new(AttemptTracker::default());
        let mut statement = statement.clone();
        statement.set_history_listener(tracker.clone());
        let _unanswered = Unanswered {
            tracker,
            suspects: &self.suspects,
        };
        self.session.execute_unpaged(&statement, values).await
    }

    /// The configuration this storage was connected with.
    pub fn config(&self) -> &CassandraConfig {
        &self.config
    }

    /// Runs the SERIAL read of `key`, retrying the errors that contention
    /// (or a replica briefly down) gives, with jittered exponential backoff,
    /// until the request timeout has passed since the first attempt.
    ///
    /// This is the read callers use to settle an outcome-unknown write, and
    /// Paxos v2 abandons a read that contends with another round on the key
    /// (`WriteTimeout` at SERIAL, write type CAS): exactly when elections
    /// run. Giving up at the first such answer would leave the outcome
    /// unknown for no reason.
    async fn serial_read(&self, statement: &PreparedStatement, key: &Key) -> Result<QueryResult> {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut delays = settle_backoff();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let err = match self.execute(statement, (key.as_str(),)).await {
                Ok(result) => return Ok(result),
                Err(err) => err,
            };
            let next = delays
                .next()
                .filter(|delay| serial_read_retryable(&err) && Instant::now() + *delay < deadline);
            match next {
                Some(delay) => {
                    tracing::debug!(%err, attempt, ?delay, "serial read failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => {
                    let message = format!("{} (after {attempt} attempts)", describe("get", &err));
                    return Err(StorageError::with_source(
                        classify_execution(&err, Op::Read),
                        message,
                        err,
                    ));
                }
            }
        }
    }

    /// Runs a conditional write and returns its `[applied]` flag.
    async fn conditional(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        what: &str,
    ) -> Result<bool> {
        let result = self.execute(statement, values).await.map_err(|err| {
            let kind = classify_execution(&err, Op::Write);
            tracing::debug!(%err, ?kind, "{what} failed");
            StorageError::with_source(kind, describe(what, &err), err)
        })?;
        applied(result).map_err(|message| {
            // The write was executed; only its answer is unreadable.
            StorageError::outcome_unknown(format!("{what}: {message}"))
        })
    }
}

/// Delays between attempts of a SERIAL read: exponential from 10 ms to
/// 400 ms, with full jitter so that contenders do not retry in lockstep
/// (endless; the caller stops at its deadline).
fn settle_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(400))
        .with_factor(2.0)
        .with_jitter()
        .with_jitter_seed(jitter_seed())
        .without_max_times()
        .build()
}

/// A different seed for every backoff (backon without its `std` feature
/// would use one fixed seed: every contender would wait in lockstep).
fn jitter_seed() -> u64 {
    rand::random()
}

/// Prepares one statement.
async fn prepare(session: &Session, cql: &str, idempotent: bool) -> Result<PreparedStatement> {
    let mut prepared = session.prepare(cql).await.map_err(|err| {
        StorageError::with_source(
            classify_prepare(&err),
            format!("preparing `{cql}` failed"),
            err,
        )
    })?;
    prepared.set_is_idempotent(idempotent);
    Ok(prepared)
}

/// The TTL to write for `ttl`, in seconds (0 = never expires).
///
/// Cassandra keeps expiry times in whole seconds and truncates the write
/// time, so a TTL of `t` can end up to one second early; writing `t + 1`
/// keeps the record live for at least `t` (capped at Cassandra's maximum).
pub(crate) fn cql_ttl(ttl: Ttl) -> i32 {
    let secs = match ttl.as_secs() {
        0 => 0,
        t => (t + 1).min(CASSANDRA_MAX_TTL_SECS),
    };
    debug_assert!(MAX_TTL.as_secs() <= CASSANDRA_MAX_TTL_SECS);
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// Reads the `[applied]` column of a lightweight transaction's answer.
fn applied(result: QueryResult) -> std::result::Result<bool, String> {
    let rows = result
        .into_rows_result()
        .map_err(|err| format!("LWT answer has no rows: {err}"))?;
    let row: Row = rows
        .first_row()
        .map_err(|err| format!("LWT answer has no [applied] row: {err}"))?;
    match row.columns.first() {
        Some(Some(CqlValue::Boolean(applied))) => Ok(*applied),
        other => Err(format!(
            "LWT answer's first column is not [applied]: {other:?}"
        )),
    }
}

#[async_trait]
impl TtlStorage for CassandraStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        self.conditional(
            &self.insert,
            (cql_ttl(ttl), value, key.as_str()),
            "insert_if_not_exists",
        )
        .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        self.conditional(
            &self.cas,
            (cql_ttl(ttl), new, key.as_str(), old),
            "compare_and_swap",
        )
        .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        self.conditional(&self.delete, (key.as_str(), value), "compare_and_delete")
            .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        let result = self.serial_read(&self.get, key).await?;
        let row: Option<(Option<Vec<u8>>,)> = first_row(result)?;
        Ok(row.and_then(|(value,)| value))
    }

    /// The value and `TTL(value)`, read at SERIAL like `get`: whole seconds
    /// as the replicas count them (a record written with TTL `t` shows up
    /// to `t + 1`, see the crate docs), [`TimeLeft::Never`] for `USING TTL 0`.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        let result = self.serial_read(&self.entry, key).await?;
        let row: Option<(Option<Vec<u8>>, Option<i32>)> = first_row(result)?;
        Ok(row.and_then(|(value, ttl)| {
            value.map(|value| Entry {
                value,
                time_left: cell_time_left(ttl),
            })
        }))
    }
}

/// The first row of a read's answer, if any, as `R`.
fn first_row<R>(result: QueryResult) -> Result<Option<R>>
where
    R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>,
{
    let rows = result.into_rows_result().map_err(|err| {
        StorageError::with_source(ErrorKind::Transient, "get: answer has no rows", err)
    })?;
    rows.maybe_first_row().map_err(|err| {
        StorageError::with_source(ErrorKind::Permanent, "get: unexpected column type", err)
    })
}

/// A cell's `TTL(...)` in seconds as a time left (`null`: no TTL).
fn cell_time_left(ttl: Option<i32>) -> TimeLeft {
    match ttl {
        None => TimeLeft::Never,
        Some(secs) => TimeLeft::About(Duration::from_secs(u64::try_from(secs).unwrap_or(0))),
    }
}

/// A CQL `OPTIONS` request (protocol v4, stream 0, no body): what a native
/// port answers in plaintext with a `SUPPORTED` frame.
const CQL_OPTIONS: &[u8] = &[0x04, 0, 0, 0, 0x05, 0, 0, 0, 0];

/// The error of a failed first connection. A TLS session to a node whose
/// native port speaks plaintext fails vaguely (a broken connection, or a
/// timeout); a plaintext `OPTIONS` to the same address tells it, and then
/// that is what is said (a configuration mistake: permanent).
async fn session_failed(config: &CassandraConfig, err: NewSessionError) -> StorageError {
    let what = format!("connecting to {:?}", config.contact_points);
    if config.tls.is_some() {
        for point in &config.contact_points {
            let Some((host, port)) = point
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host.trim_matches(['[', ']']), port.parse().ok()?)))
            else {
                continue;
            };
            let limit = config.connect_timeout.min(Duration::from_secs(2));
            if ttl_storage::kit::tls::answers_in_plaintext(host, port, CQL_OPTIONS, limit).await {
                tracing::debug!(%point, %err, "the node answered a plaintext OPTIONS: it does not speak TLS");
                return StorageError::permanent(format!(
                    "{what} failed: the node at {point} does not speak TLS (its native port \
                     answers in plaintext); drop tls=true, or enable client encryption on \
                     the cluster"
                ));
            }
        }
    }
    if let Some(refused) = login_refused(&err) {
        tracing::debug!(%err, "the node refused the login");
        return StorageError::permanent(format!("{what} failed: {refused}"));
    }
    StorageError::with_source(classify_new_session(&err), format!("{what} failed"), err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_ttl_as_time_left() {
        assert_eq!(cell_time_left(None), TimeLeft::Never);
        assert_eq!(
            cell_time_left(Some(21)),
            TimeLeft::About(Duration::from_secs(21))
        );
    }

    #[test]
    fn settle_backoff_is_jittered_growing_and_bounded() {
        let delays: Vec<Duration> = settle_backoff().take(40).collect();
        assert_eq!(delays.len(), 40, "endless: the deadline stops it");
        // Full jitter adds up to one more delay on top of the base.
        assert!(
            delays.iter().all(|d| *d <= Duration::from_millis(800)),
            "{delays:?}"
        );
        assert!(delays[0] >= Duration::from_millis(10), "{delays:?}");
        assert!(delays[20] >= Duration::from_millis(400), "{delays:?}");
        // Two contenders do not wait in lockstep.
        let other: Vec<Duration> = settle_backoff().take(40).collect();
        assert_ne!(delays, other);
        // A 12 s budget allows dozens of attempts.
        let mut spent = Duration::ZERO;
        let attempts = settle_backoff()
            .take_while(|d| {
                spent += *d;
                spent < Duration::from_secs(12)
            })
            .count();
        assert!((15..=1200).contains(&attempts), "{attempts}");
    }

    #[test]
    fn ttl_is_one_second_longer_and_never_is_zero() {
        assert_eq!(cql_ttl(Ttl::NEVER), 0);
        assert_eq!(cql_ttl(Ttl::from_secs(1).unwrap()), 2);
        assert_eq!(cql_ttl(Ttl::from_secs(20).unwrap()), 21);
        let max = Ttl::new(MAX_TTL).unwrap();
        assert_eq!(cql_ttl(max), 630_720_000);
    }
}
