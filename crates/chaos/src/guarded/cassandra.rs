//! The guarded resource on Cassandra (and ScyllaDB): one row per resource id that accepts a
//! write only with a fencing token at least as high as any it has seen, and
//! an append-only log of the writes it accepted.
//!
//! ```text
//! guarded(id text PRIMARY KEY, fence bigint, seq bigint, writer text)
//! guarded_log(id text, seq bigint, fence bigint, writer text, PRIMARY KEY (id, seq))
//! ```
//!
//! A write is one lightweight transaction,
//! `UPDATE guarded SET fence = t, seq = s + 1, writer = w WHERE id = ? IF fence <= t AND seq = s`,
//! (`token` is a reserved word in CQL, hence `fence`), so the token check and the sequence number are decided atomically by
//! Paxos; the writer then appends `(s + 1, t)` to the log. Because `seq` is
//! the log's clustering key, the log lists the accepted writes in the
//! order Paxos accepted them, whoever wrote them, even if a writer died
//! between its update and its append (that leaves a gap, never a wrong
//! entry).

use scylla::{
    client::{session::Session, session_builder::SessionBuilder},
    statement::{Consistency, SerialConsistency, prepared::PreparedStatement},
    value::{CqlValue, Row},
};
use storage_scylla::ScyllaConfig;

use super::{GuardedError, LogEntry, Verdict, db};

/// A connection to the guarded resource `id`.
pub(crate) struct CassandraGuarded {
    session: Session,
    id: String,
    update: PreparedStatement,
    append: PreparedStatement,
    /// The last sequence number seen, a guess the LWT corrects.
    seq: u64,
}

impl std::fmt::Debug for CassandraGuarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraGuarded")
            .field("id", &self.id)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

async fn session(config: &ScyllaConfig) -> Result<Session, GuardedError> {
    SessionBuilder::new()
        .known_nodes(config.contact_points())
        .connection_timeout(config.connect_timeout())
        .build()
        .await
        .map_err(db("connecting"))
}

/// Creates the tables (in the URL's keyspace, which must exist) and the
/// resource's row with token 0, seq 0.
///
/// # Errors
///
/// A bad URL or a database error.
pub(crate) async fn setup(url: &str, id: &str) -> Result<(), GuardedError> {
    let config = ScyllaConfig::from_url(url)?;
    let session = session(&config).await?;
    let ks = config.keyspace();
    for ddl in [
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.guarded (id text PRIMARY KEY, fence bigint, seq bigint, writer text)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.guarded_log (id text, seq bigint, fence bigint, writer text, PRIMARY KEY (id, seq))"
        ),
    ] {
        session
            .query_unpaged(ddl, ())
            .await
            .map_err(db("creating tables"))?;
    }
    session
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.guarded (id, fence, seq, writer) VALUES (?, 0, 0, 'setup') IF NOT EXISTS"
            ),
            (id,),
        )
        .await
        .map_err(db("creating the resource row"))?;
    Ok(())
}

/// Reads the log of resource `id` in accept order.
///
/// # Errors
///
/// A bad URL or a database error.
pub(crate) async fn read_log(url: &str, id: &str) -> Result<Vec<LogEntry>, GuardedError> {
    let config = ScyllaConfig::from_url(url)?;
    let session = session(&config).await?;
    let mut statement: scylla::statement::Statement = format!(
        "SELECT seq, fence, writer FROM {}.guarded_log WHERE id = ? ORDER BY seq",
        config.keyspace()
    )
    .into();
    statement.set_consistency(Consistency::Quorum);
    statement.set_page_size(5000);
    let mut entries = Vec::new();
    let mut paging = scylla::response::PagingState::start();
    loop {
        let (result, state) = session
            .query_single_page(statement.clone(), (id,), paging)
            .await
            .map_err(db("reading the log"))?;
        let rows = result
            .into_rows_result()
            .map_err(|err| GuardedError::Answer(err.to_string()))?;
        for row in rows
            .rows::<(i64, i64, String)>()
            .map_err(|err| GuardedError::Answer(err.to_string()))?
        {
            let (seq, token, writer) = row.map_err(|err| GuardedError::Answer(err.to_string()))?;
            entries.push(LogEntry {
                seq: u64::try_from(seq).unwrap_or(0),
                token: u64::try_from(token).unwrap_or(0),
                writer,
            });
        }
        match state.into_paging_control_flow() {
            std::ops::ControlFlow::Break(()) => break,
            std::ops::ControlFlow::Continue(next) => paging = next,
        }
    }
    Ok(entries)
}

impl CassandraGuarded {
    /// Connects to resource `id` in the URL's keyspace (set up by [`setup`]).
    ///
    /// # Errors
    ///
    /// A bad URL or a database error.
    pub(crate) async fn connect(url: &str, id: &str) -> Result<Self, GuardedError> {
        let config = ScyllaConfig::from_url(url)?;
        let session = session(&config).await?;
        let ks = config.keyspace();
        let mut update = session
            .prepare(format!(
                "UPDATE {ks}.guarded SET fence = ?, seq = ?, writer = ? WHERE id = ? IF fence <= ? AND seq = ?"
            ))
            .await
            .map_err(db("preparing the update"))?;
        update.set_is_idempotent(false);
        update.set_serial_consistency(Some(SerialConsistency::Serial));
        update.set_consistency(Consistency::Quorum);
        let mut append = session
            .prepare(format!(
                "INSERT INTO {ks}.guarded_log (id, seq, fence, writer) VALUES (?, ?, ?, ?)"
            ))
            .await
            .map_err(db("preparing the append"))?;
        append.set_consistency(Consistency::Quorum);
        Ok(CassandraGuarded {
            session,
            id: id.to_string(),
            update,
            append,
            seq: 0,
        })
    }

    /// Writes `token` as `writer`: accepted if the highest token the
    /// resource has seen is at most `limit` (`token` itself when fenced).
    /// An accepted write is appended to the log before this returns.
    ///
    /// # Errors
    ///
    /// A database error: the outcome is then unknown.
    pub(crate) async fn write(
        &mut self,
        token: u64,
        writer: &str,
        limit: u64,
    ) -> Result<Verdict, GuardedError> {
        let t = i64::try_from(token).map_err(|_| GuardedError::Answer("token too large".into()))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // A lost race on `seq` with an equal-or-lower token is retried with
        // the fresh seq; a few rounds suffice with one writer at a time.
        for _ in 0..8 {
            let seq = i64::try_from(self.seq).unwrap_or(i64::MAX);
            let next = seq.saturating_add(1);
            let result = self
                .session
                .execute_unpaged(&self.update, (t, next, writer, &self.id, limit, seq))
                .await
                .map_err(db("guarded update"))?;
            let rows = result
                .into_rows_result()
                .map_err(|err| GuardedError::Answer(err.to_string()))?;
            let names: Vec<String> = rows
                .column_specs()
                .iter()
                .map(|c| c.name().to_string())
                .collect();
            let row: Row = rows
                .first_row()
                .map_err(|err| GuardedError::Answer(err.to_string()))?;
            let column = |name: &str| {
                names
                    .iter()
                    .position(|n| n == name)
                    .and_then(|i| row.columns.get(i).cloned().flatten())
            };
            let applied = matches!(column("[applied]"), Some(CqlValue::Boolean(true)));
            if applied {
                self.seq = u64::try_from(next).unwrap_or(0);
                self.session
                    .execute_unpaged(&self.append, (&self.id, next, t, writer))
                    .await
                    .map_err(db("log append"))?;
                return Ok(Verdict::Accepted(self.seq));
            }
            let seen = match column("fence") {
                Some(CqlValue::BigInt(v)) => u64::try_from(v).unwrap_or(0),
                other => return Err(GuardedError::Answer(format!("fence column: {other:?}"))),
            };
            if let Some(CqlValue::BigInt(v)) = column("seq") {
                self.seq = u64::try_from(v).unwrap_or(0);
            }
            if i64::try_from(seen).unwrap_or(i64::MAX) > limit {
                return Ok(Verdict::Rejected(seen));
            }
        }
        Err(GuardedError::Answer(
            "the sequence number kept moving".into(),
        ))
    }
}
