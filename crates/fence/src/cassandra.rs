//! Fenced writes on Cassandra / ScyllaDB: one lightweight transaction each.

use std::sync::Arc;

use scylla::{
    client::session::Session,
    statement::{Consistency, SerialConsistency, prepared::PreparedStatement},
    value::{CqlValue, Row},
};

use crate::{AppendVerdict, FenceError, Fenced, LogEntry, Verdict, check_name, error::db, signed};

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
/// An [`append`](Self::append) is `UPDATE … SET fence = t, seq = s + 1 … IF fence <= t AND seq = s`
/// (`s` the append count last seen; a lost race on `seq` alone is retried
/// with the fresh count), then the entry is inserted into the log at
/// `s + 1`.
///
/// ```no_run
/// # async fn demo(session: std::sync::Arc<scylla::client::session::Session>, token: u64) -> Result<(), fence::FenceError> {
/// use fence::{CassandraFence, Verdict};
/// CassandraFence::create_table(&session, "app", "fences").await?; // once, at deploy time
/// let fence = CassandraFence::new(session, "app", "fences").await?;
/// match fence.write("nightly-report", token, b"done").await? {
///     Verdict::Accepted => {}
///     Verdict::Rejected { highest_seen } => {
///         // A newer leader (token `highest_seen`) exists: stop working.
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
    /// An invalid name, or the database's error.
    pub async fn create_table(
        session: &Session,
        keyspace: &str,
        table: &str,
    ) -> Result<(), FenceError> {
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
            .map_err(db("creating the fence table"))?;
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE IF NOT EXISTS {keyspace}.{table}_log (resource text, seq bigint, fence bigint, value blob, PRIMARY KEY (resource, seq))"
                ),
                (),
            )
            .await
            .map_err(db("creating the fence log table"))?;
        Ok(())
    }

    /// Prepares the statements on `keyspace.table` (which must exist).
    ///
    /// # Errors
    ///
    /// An invalid name, or the database's error.
    pub async fn new(
        session: Arc<Session>,
        keyspace: &str,
        table: &str,
    ) -> Result<Self, FenceError> {
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
        let update = session
            .prepare(format!(
                "UPDATE {t} SET fence = ?, value = ? WHERE resource = ? IF fence <= ?"
            ))
            .await
            .map_err(db("preparing the fenced update"))?;
        let insert = session
            .prepare(format!(
                "INSERT INTO {t} (resource, fence, value) VALUES (?, ?, ?) IF NOT EXISTS"
            ))
            .await
            .map_err(db("preparing the fenced insert"))?;
        let mut read = session
            .prepare(format!("SELECT fence, value FROM {t} WHERE resource = ?"))
            .await
            .map_err(db("preparing the read"))?;
        read.set_consistency(Consistency::Serial);
        let append_update = session
            .prepare(format!(
                "UPDATE {t} SET fence = ?, seq = ? WHERE resource = ? IF fence <= ? AND seq = ?"
            ))
            .await
            .map_err(db("preparing the fenced append"))?;
        let append_insert = session
            .prepare(format!(
                "INSERT INTO {t} (resource, fence, seq) VALUES (?, ?, 1) IF NOT EXISTS"
            ))
            .await
            .map_err(db("preparing the first fenced append"))?;
        let mut log_insert = session
            .prepare(format!(
                "INSERT INTO {t}_log (resource, seq, fence, value) VALUES (?, ?, ?, ?)"
            ))
            .await
            .map_err(db("preparing the log insert"))?;
        log_insert.set_consistency(Consistency::Quorum);
        let mut log_read = session
            .prepare(format!(
                "SELECT seq, fence, value FROM {t}_log WHERE resource = ? ORDER BY seq"
            ))
            .await
            .map_err(db("preparing the log read"))?;
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

    /// Writes `value` to `resource` with fencing `token`: applied only if
    /// `token` is at least the highest token the resource has seen.
    ///
    /// # Errors
    ///
    /// The database's error: the outcome is then unknown (see [`FenceError`]).
    pub async fn write(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<Verdict, FenceError> {
        let t = signed(token)?;
        // An update of a missing row is not applied; an insert of an
        // existing one neither: at most a few rounds settle who was first.
        for _ in 0..4 {
            let answer = self
                .session
                .execute_unpaged(&self.update, (t, value, resource, t))
                .await
                .map_err(db("fenced update"))?;
            match lwt_answer(answer)? {
                (true, _) => return Ok(Verdict::Accepted),
                (false, Some(seen)) => return Ok(Verdict::Rejected { highest_seen: seen }),
                (false, None) => {}
            }
            let answer = self
                .session
                .execute_unpaged(&self.insert, (resource, t, value))
                .await
                .map_err(db("fenced insert"))?;
            if lwt_answer(answer)?.0 {
                return Ok(Verdict::Accepted);
            }
        }
        Err(FenceError::Answer(format!(
            "resource {resource:?} kept appearing and disappearing"
        )))
    }

    /// The register of `resource` (a SERIAL read: it sees every accepted
    /// write), or `None` if it was never written.
    ///
    /// # Errors
    ///
    /// The database's error.
    pub async fn read(&self, resource: &str) -> Result<Option<Fenced>, FenceError> {
        let answer = self
            .session
            .execute_unpaged(&self.read, (resource,))
            .await
            .map_err(db("reading the register"))?;
        let rows = answer
            .into_rows_result()
            .map_err(|err| FenceError::Answer(err.to_string()))?;
        let row = rows
            .maybe_first_row::<(Option<i64>, Option<Vec<u8>>)>()
            .map_err(|err| FenceError::Answer(err.to_string()))?;
        Ok(row.map(|(fence, value)| Fenced {
            token: fence.and_then(|f| u64::try_from(f).ok()).unwrap_or(0),
            value: value.unwrap_or_default(),
        }))
    }
}

impl CassandraFence {
    /// Appends `value` to `resource`'s log with fencing `token`: accepted
    /// only if `token` is at least the highest token the resource has seen
    /// (the register's fence, shared with [`write`](Self::write)); the
    /// check, the new fence and the entry's sequence number are one
    /// lightweight transaction, then the entry is inserted into the log.
    ///
    /// # Errors
    ///
    /// The database's error: the outcome is then unknown (see
    /// [`FenceError`]). If the transaction applied but the log insert
    /// failed, the log has a gap at that sequence number.
    pub async fn append(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<AppendVerdict, FenceError> {
        let t = signed(token)?;
        // The append count last seen; `None` for a row without one.
        let mut seen: Option<i64> = Some(0);
        for _ in 0..16 {
            let next = seen.unwrap_or(0).saturating_add(1);
            let answer = self
                .session
                .execute_unpaged(&self.append_update, (t, next, resource, t, seen))
                .await
                .map_err(db("fenced append"))?;
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
                        .map_err(db("first fenced append"))?;
                    if lwt_columns(answer)?.0 {
                        return self.log_entry(resource, 1, t, value).await;
                    }
                }
                Some(highest_seen) if highest_seen > token => {
                    return Ok(AppendVerdict::Rejected { highest_seen });
                }
                Some(_) => seen = seq_now,
            }
        }
        Err(FenceError::Answer(format!(
            "the append count of {resource:?} kept moving"
        )))
    }

    async fn log_entry(
        &self,
        resource: &str,
        seq: i64,
        token: i64,
        value: &[u8],
    ) -> Result<AppendVerdict, FenceError> {
        self.session
            .execute_unpaged(&self.log_insert, (resource, seq, token, value))
            .await
            .map_err(db("fenced log insert (the log has a gap)"))?;
        Ok(AppendVerdict::Appended {
            seq: u64::try_from(seq).unwrap_or(0),
        })
    }

    /// Reads `resource`'s log, in accept order (QUORUM reads).
    ///
    /// # Errors
    ///
    /// The database's error.
    pub async fn log(&self, resource: &str) -> Result<Vec<LogEntry>, FenceError> {
        let mut entries = Vec::new();
        let mut paging = scylla::response::PagingState::start();
        loop {
            let (result, state) = self
                .session
                .execute_single_page(&self.log_read, (resource,), paging)
                .await
                .map_err(db("reading the log"))?;
            let rows = result
                .into_rows_result()
                .map_err(|err| FenceError::Answer(err.to_string()))?;
            for row in rows
                .rows::<(i64, Option<i64>, Option<Vec<u8>>)>()
                .map_err(|err| FenceError::Answer(err.to_string()))?
            {
                let (seq, token, value) = row.map_err(|err| FenceError::Answer(err.to_string()))?;
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
}

/// `[applied]` and the current `fence` (if the row exists) of an LWT answer.
fn lwt_answer(
    answer: scylla::response::query_result::QueryResult,
) -> Result<(bool, Option<u64>), FenceError> {
    let (applied, fence, _) = lwt_columns(answer)?;
    Ok((applied, fence))
}

/// `[applied]`, the current `fence` (if the row exists) and the current
/// `seq` column of an LWT answer.
fn lwt_columns(
    answer: scylla::response::query_result::QueryResult,
) -> Result<(bool, Option<u64>, Option<CqlValue>), FenceError> {
    let rows = answer
        .into_rows_result()
        .map_err(|err| FenceError::Answer(err.to_string()))?;
    let names: Vec<String> = rows
        .column_specs()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let row: Row = rows
        .first_row()
        .map_err(|err| FenceError::Answer(err.to_string()))?;
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
