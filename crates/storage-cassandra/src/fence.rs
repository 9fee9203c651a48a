//! The [`fence::Fence`] of Cassandra / ScyllaDB: each guarded write or
//! append is one lightweight transaction.

use std::sync::Arc;

use async_trait::async_trait;
use fence::{
    AppendOutcome, DynFence, Fence, FenceOutcome, Fenced, LogEntry, Numbering, OpenOptions,
    check_name, signed_token,
};
use scylla::{
    client::{session::Session, session_builder::SessionBuilder},
    errors::{ExecutionError, PrepareError},
    response::query_result::QueryResult,
    statement::{Consistency, SerialConsistency, prepared::PreparedStatement},
    value::{CqlValue, Row},
};
use ttl_storage::{ErrorKind, Result, StorageError};

use crate::{
    CassandraConfig,
    classify::{Op, classify_execution, classify_new_session, classify_prepare, describe},
};

/// A table of fenced registers on Cassandra or ScyllaDB:
/// `(resource text PRIMARY KEY, fence bigint, value blob, seq bigint)`,
/// and their logs in `<table>_log`
/// `(resource text, seq bigint, fence bigint, value blob, PRIMARY KEY (resource, seq))`.
///
/// A write is `UPDATE … SET fence = t, value = v WHERE resource = r IF fence <= t`
/// (a Paxos round at SERIAL consistency, QUORUM commit), or, for a resource
/// never written, `INSERT … IF NOT EXISTS`: the check and the write are one
/// atomic step of the database.
///
/// An append is `UPDATE … SET fence = t, seq = s + 1 … IF fence <= t AND seq = s`
/// (`s` the append count last seen; a lost race on `seq` alone is retried
/// with the fresh count), then the entry is inserted into the log at
/// `s + 1` ([`Numbering::Contiguous`]; if the process dies between the two
/// steps the log has a gap at that number).
///
/// ```no_run
/// # async fn demo(session: std::sync::Arc<scylla::client::session::Session>, token: u64) -> Result<(), ttl_storage::StorageError> {
/// use fence::{Fence, FenceOutcome};
/// use storage_cassandra::fence::CassandraFence;
/// CassandraFence::create_table(&session, "app", "fences").await?; // once, at deploy time
/// let fence = CassandraFence::new(session, "app", "fences").await?;
/// match fence.write("nightly-report", token, b"done").await? {
///     FenceOutcome::Accepted => {}
///     FenceOutcome::Rejected { highest } => {
///         // A newer leader (token `highest`) exists: stop working.
///     }
/// }
/// # Ok(()) }
/// ```
pub struct CassandraFence {
    session: Arc<Session>,
    update: PreparedStatement,
    insert: PreparedStatement,
    read: PreparedStatement,
    append_update: PreparedStatement,
    append_insert: PreparedStatement,
    log_insert: PreparedStatement,
    log_read: PreparedStatement,
}

impl std::fmt::Debug for CassandraFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraFence").finish_non_exhaustive()
    }
}

/// A failed execution of a statement of kind `op`.
fn executing(what: &'static str, op: Op) -> impl Fn(ExecutionError) -> StorageError {
    move |err| StorageError::with_source(classify_execution(&err, op), describe(what, &err), err)
}

/// A failed prepare (nothing was executed).
fn preparing(what: &'static str) -> impl Fn(PrepareError) -> StorageError {
    move |err| StorageError::with_source(classify_prepare(&err), what, err)
}

/// An answer without the expected columns: after a write the outcome is
/// unknown, after a read nothing changed.
fn answer(op: Op) -> impl Fn(String) -> StorageError {
    move |detail| {
        let kind = match op {
            Op::Write => ErrorKind::OutcomeUnknown,
            Op::Read => ErrorKind::Permanent,
        };
        StorageError::with_source(
            kind,
            "unexpected answer from the database",
            std::io::Error::other(detail),
        )
    }
}

impl CassandraFence {
    /// The condition to put on your own lightweight transactions, with the
    /// token bound to the `?` (and `SET fence = ?` in the same statement).
    pub const CONDITION: &'static str = "IF fence <= ?";

    /// Creates the table `keyspace.table` and its log table
    /// `keyspace.table_log` if they do not exist. Run it once
    /// (at deploy time): concurrent schema changes on several Cassandra
    /// coordinators can create conflicting table ids.
    ///
    /// # Errors
    ///
    /// An invalid name (permanent), or the database's error.
    pub async fn create_table(session: &Session, keyspace: &str, table: &str) -> Result<()> {
        check_name(keyspace, &[])?;
        check_name(table, &[])?;
        check_name(&format!("{table}_log"), &[])?;
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE IF NOT EXISTS {keyspace}.{table} (resource text PRIMARY KEY, fence bigint, value blob, seq bigint)"
                ),
                (),
            )
            .await
            .map_err(executing("creating the fence table", Op::Read))?;
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE IF NOT EXISTS {keyspace}.{table}_log (resource text, seq bigint, fence bigint, value blob, PRIMARY KEY (resource, seq))"
                ),
                (),
            )
            .await
            .map_err(executing("creating the fence log table", Op::Read))?;
        Ok(())
    }

    /// Prepares the statements on `keyspace.table` (which must exist).
    ///
    /// # Errors
    ///
    /// An invalid name (permanent), or the database's error.
    pub async fn new(session: Arc<Session>, keyspace: &str, table: &str) -> Result<Self> {
        check_name(keyspace, &[])?;
        check_name(table, &[])?;
        check_name(&format!("{table}_log"), &[])?;
        let t = format!("{keyspace}.{table}");
        let lwt = |mut statement: PreparedStatement| {
            statement.set_is_idempotent(false);
            statement.set_serial_consistency(Some(SerialConsistency::Serial));
            statement.set_consistency(Consistency::Quorum);
            statement
        };
        let prepare = |text: String, what: &'static str| {
            let session = session.clone();
            async move { session.prepare(text).await.map_err(preparing(what)) }
        };
        let update = prepare(
            format!("UPDATE {t} SET fence = ?, value = ? WHERE resource = ? IF fence <= ?"),
            "preparing the fenced update",
        )
        .await?;
        let insert = prepare(
            format!("INSERT INTO {t} (resource, fence, value) VALUES (?, ?, ?) IF NOT EXISTS"),
            "preparing the fenced insert",
        )
        .await?;
        let mut read = prepare(
            format!("SELECT fence, value FROM {t} WHERE resource = ?"),
            "preparing the read",
        )
        .await?;
        read.set_consistency(Consistency::Serial);
        let append_update = prepare(
            format!(
                "UPDATE {t} SET fence = ?, seq = ? WHERE resource = ? IF fence <= ? AND seq = ?"
            ),
            "preparing the fenced append",
        )
        .await?;
        let append_insert = prepare(
            format!("INSERT INTO {t} (resource, fence, seq) VALUES (?, ?, 1) IF NOT EXISTS"),
            "preparing the first fenced append",
        )
        .await?;
        let mut log_insert = prepare(
            format!("INSERT INTO {t}_log (resource, seq, fence, value) VALUES (?, ?, ?, ?)"),
            "preparing the log insert",
        )
        .await?;
        log_insert.set_consistency(Consistency::Quorum);
        let mut log_read = prepare(
            format!("SELECT seq, fence, value FROM {t}_log WHERE resource = ? ORDER BY seq"),
            "preparing the log read",
        )
        .await?;
        log_read.set_consistency(Consistency::Quorum);
        log_read.set_page_size(5000);
        Ok(CassandraFence {
            session,
            update: lwt(update),
            insert: lwt(insert),
            read,
            append_update: lwt(append_update),
            append_insert: lwt(append_insert),
            log_insert,
            log_read,
        })
    }

    async fn log_entry(
        &self,
        resource: &str,
        seq: i64,
        token: i64,
        value: &[u8],
    ) -> Result<AppendOutcome> {
        self.session
            .execute_unpaged(&self.log_insert, (resource, seq, token, value))
            .await
            .map_err(executing(
                "fenced log insert (the log has a gap)",
                Op::Write,
            ))?;
        Ok(AppendOutcome::Appended {
            seq: u64::try_from(seq).unwrap_or(0),
        })
    }
}

#[async_trait]
impl Fence for CassandraFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        let t = signed_token(token)?;
        // An update of a missing row is not applied; an insert of an
        // existing one neither: at most a few rounds settle who was first.
        for _ in 0..4 {
            let answer = self
                .session
                .execute_unpaged(&self.update, (t, value, resource, t))
                .await
                .map_err(executing("fenced update", Op::Write))?;
            match lwt_answer(answer)? {
                (true, _) => return Ok(FenceOutcome::Accepted),
                (false, Some(highest)) => return Ok(FenceOutcome::Rejected { highest }),
                (false, None) => {}
            }
            let answer = self
                .session
                .execute_unpaged(&self.insert, (resource, t, value))
                .await
                .map_err(executing("fenced insert", Op::Write))?;
            if lwt_answer(answer)?.0 {
                return Ok(FenceOutcome::Accepted);
            }
        }
        Err(StorageError::transient(format!(
            "fenced write: resource {resource:?} kept appearing and disappearing"
        )))
    }

    /// A SERIAL read: it sees every accepted write.
    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        let answer = self
            .session
            .execute_unpaged(&self.read, (resource,))
            .await
            .map_err(executing("reading the register", Op::Read))?;
        let rows = answer
            .into_rows_result()
            .map_err(|err| self::answer(Op::Read)(err.to_string()))?;
        let row = rows
            .maybe_first_row::<(Option<i64>, Option<Vec<u8>>)>()
            .map_err(|err| self::answer(Op::Read)(err.to_string()))?;
        Ok(row.map(|(fence, value)| Fenced {
            token: fence.and_then(|f| u64::try_from(f).ok()).unwrap_or(0),
            value: value.unwrap_or_default(),
        }))
    }

    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        let t = signed_token(token)?;
        // The append count last seen; `None` for a row without one.
        let mut seen: Option<i64> = Some(0);
        for _ in 0..16 {
            let next = seen.unwrap_or(0).saturating_add(1);
            let answer = self
                .session
                .execute_unpaged(&self.append_update, (t, next, resource, t, seen))
                .await
                .map_err(executing("fenced append", Op::Write))?;
            let (applied, fence, seq) = lwt_columns(answer)?;
            let seq_now = match seq {
                Some(CqlValue::BigInt(v)) => Some(v),
                _ => None,
            };
            if applied {
                return self.log_entry(resource, next, t, value).await;
            }
            match fence {
                // No row yet: the first append creates it.
                None => {
                    let answer = self
                        .session
                        .execute_unpaged(&self.append_insert, (resource, t))
                        .await
                        .map_err(executing("first fenced append", Op::Write))?;
                    if lwt_columns(answer)?.0 {
                        return self.log_entry(resource, 1, t, value).await;
                    }
                }
                Some(highest) if highest > token => {
                    return Ok(AppendOutcome::Rejected { highest });
                }
                Some(_) => seen = seq_now,
            }
        }
        Err(StorageError::transient(format!(
            "fenced append: the append count of {resource:?} kept moving"
        )))
    }

    /// QUORUM reads, paged.
    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        let bad = answer(Op::Read);
        let mut entries = Vec::new();
        let mut paging = scylla::response::PagingState::start();
        loop {
            let (result, state) = self
                .session
                .execute_single_page(&self.log_read, (resource,), paging)
                .await
                .map_err(executing("reading the log", Op::Read))?;
            let rows = result.into_rows_result().map_err(|e| bad(e.to_string()))?;
            for row in rows
                .rows::<(i64, Option<i64>, Option<Vec<u8>>)>()
                .map_err(|e| bad(e.to_string()))?
            {
                let (seq, token, value) = row.map_err(|e| bad(e.to_string()))?;
                entries.push(LogEntry {
                    seq: u64::try_from(seq).unwrap_or(0),
                    token: token.and_then(|t| u64::try_from(t).ok()).unwrap_or(0),
                    value: value.unwrap_or_default(),
                });
            }
            match state.into_paging_control_flow() {
                std::ops::ControlFlow::Break(()) => break,
                std::ops::ControlFlow::Continue(next) => paging = next,
            }
        }
        Ok(entries)
    }

    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}

/// `[applied]` and the current `fence` (if the row exists) of an LWT answer.
fn lwt_answer(answer: QueryResult) -> Result<(bool, Option<u64>)> {
    let (applied, fence, _) = lwt_columns(answer)?;
    Ok((applied, fence))
}

/// `[applied]`, the current `fence` (if the row exists) and the current
/// `seq` column of an LWT answer.
fn lwt_columns(answer: QueryResult) -> Result<(bool, Option<u64>, Option<CqlValue>)> {
    let bad = self::answer(Op::Write);
    let rows = answer.into_rows_result().map_err(|e| bad(e.to_string()))?;
    let names: Vec<String> = rows
        .column_specs()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let row: Row = rows.first_row().map_err(|e| bad(e.to_string()))?;
    let column = |name: &str| {
        names
            .iter()
            .position(|n| n == name)
            .and_then(|i| row.columns.get(i).cloned().flatten())
    };
    let applied = matches!(column("[applied]"), Some(CqlValue::Boolean(true)));
    let fence = match column("fence") {
        Some(CqlValue::BigInt(v)) => u64::try_from(v).ok(),
        _ => None,
    };
    Ok((applied, fence, column("seq")))
}

/// Opens the fence of a `scylla://` / `cassandra://` configuration (a
/// parsed URL, as [`crate::DRIVER`]'s fence opener passes it): a session of its own
/// (contact points, connect timeout, credentials and TLS of the
/// configuration), in its keyspace (which must exist: opening the storage
/// creates it), in the table `options.table`, created first if
/// `options.create`.
///
/// # Errors
///
/// A bad table name (permanent), or the database's error.
pub async fn open(config: CassandraConfig, options: &OpenOptions) -> Result<DynFence> {
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.contact_points)
        .connection_timeout(config.connect_timeout);
    if let Some(credentials) = &config.credentials {
        builder = builder.user(&credentials.user, &credentials.password);
    }
    if let Some(tls) = &config.tls {
        builder = crate::tls::configure(builder, tls).await?;
    }
    let session = builder.build().await.map_err(|err| {
        StorageError::with_source(
            classify_new_session(&err),
            format!("fence: connecting to {:?} failed", config.contact_points),
            err,
        )
    })?;
    if options.create {
        CassandraFence::create_table(&session, &config.keyspace, &options.table).await?;
    }
    let fence = CassandraFence::new(Arc::new(session), &config.keyspace, &options.table).await?;
    Ok(Arc::new(fence))
}
