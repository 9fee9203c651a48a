//! Fenced writes on Cassandra / ScyllaDB: one lightweight transaction each.

use std::sync::Arc;

use scylla::{
    client::session::Session,
    statement::{Consistency, SerialConsistency, prepared::PreparedStatement},
    value::{CqlValue, Row},
};

use crate::{FenceError, Fenced, Verdict, check_name, error::db, signed};

/// A table of fenced registers on Cassandra or ScyllaDB:
/// `(resource text PRIMARY KEY, fence bigint, value blob)`.
///
/// A write is `UPDATE … SET fence = t, value = v WHERE resource = r IF fence <= t`
/// (a Paxos round at SERIAL consistency, QUORUM commit), or, for a resource
/// never written, `INSERT … IF NOT EXISTS`: the check and the write are one
/// atomic step of the database.
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

    /// Creates the table `keyspace.table` if it does not exist. Run it once
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
        session
            .query_unpaged(
                format!(
                    "CREATE TABLE IF NOT EXISTS {keyspace}.{table} (resource text PRIMARY KEY, fence bigint, value blob)"
                ),
                (),
            )
            .await
            .map_err(db("creating the fence table"))?;
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
        Ok(CassandraFence {
            session,
            update: lwt(update),
            insert: lwt(insert),
            read,
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

/// `[applied]` and the current `fence` (if the row exists) of an LWT answer.
fn lwt_answer(
    answer: scylla::response::query_result::QueryResult,
) -> Result<(bool, Option<u64>), FenceError> {
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
    Ok((applied, fence))
}
