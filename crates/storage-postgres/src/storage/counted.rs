//! The counted write ([`TtlStorage::write_counted`](ttl_storage::TtlStorage::write_counted))
//! in one statement: the record's conditional write and the counter's
//! advance are two data-modifying `WITH` parts of one statement, so one
//! transaction applies both or neither.
//!
//! The counter's next value is computed in its `ON CONFLICT DO UPDATE`,
//! which reads the latest committed row under its row lock (not the
//! statement's snapshot): two take-overs racing on one counter never both
//! take the same number. A counter that cannot advance (not a decimal
//! `u64`, or past `max`) fails a cast on purpose, which aborts the whole
//! statement: nothing is written.

use ttl_storage::{Counted, CountedWrite, Result, StorageError, check_value};

use super::{PostgresStorage, ttl_secs};

/// The text the statement's deliberate failure carries when the counter
/// does not hold a decimal `u64`.
const NOT_DECIMAL: &str = "ttl-storage counter is not a decimal u64";
/// The same when the counter's next value would pass `max`.
const EXHAUSTED: &str = "ttl-storage counter is exhausted";

/// The counted form of `record` (the plain `insert` or `cas`, ending in
/// `RETURNING key, value`), notifying `channel` of the new value and count
/// when `when` holds: the counter's key, floor and max are parameters
/// `$first`, `$first + 1` and `$first + 2` (floor and max as text: a `u64`
/// does not fit a `bigint`). Returns the counter's new value as text, or
/// no row when the record's condition failed.
pub(super) fn statement(table: &str, record: &str, first: u8, channel: &str, when: &str) -> String {
    let (counter, floor, max) = (first, first + 1, first + 2);
    let start = format!("least(${floor}::text::numeric, ${max}::text::numeric)");
    let current = "convert_from(c.value, 'UTF8')";
    // The failing casts name a column, so the planner cannot fold them
    // (a constant one would fail every statement at planning).
    let fail = |what: &str| format!("('{what}: ' || c.key)::numeric");
    format!(
        "WITH rec AS ({record}), \
         cnt AS (INSERT INTO {table} AS c (key, value, expires_at) \
           SELECT ${counter}, convert_to({start}::text, 'UTF8'), NULL FROM rec \
           ON CONFLICT (key) DO UPDATE SET expires_at = NULL, value = convert_to((CASE \
             WHEN c.expires_at IS NOT NULL AND c.expires_at <= now() THEN {start} \
             WHEN {current} !~ '^[0-9]{{1,20}}$' THEN {not_decimal} \
             WHEN {current}::numeric + 1 > ${max}::text::numeric THEN {exhausted} \
             ELSE greatest({current}::numeric + 1, {start}) END)::text, 'UTF8') \
           RETURNING value) \
         SELECT convert_from(cnt.value, 'UTF8'), \
           CASE WHEN {when} THEN pg_notify('{channel}', {payload}) END FROM cnt, rec",
        payload = super::statements::written_payload("rec", "convert_from(cnt.value, 'UTF8')"),
        not_decimal = fail(NOT_DECIMAL),
        exhausted = fail(EXHAUSTED),
    )
}

impl PostgresStorage {
    /// [`TtlStorage::write_counted`](ttl_storage::TtlStorage::write_counted)
    /// in one statement.
    pub(super) async fn counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        const WHAT: &str = "write_counted";
        check_value(write.value)?;
        let (key, counter) = (write.key.as_str(), write.counter.as_str());
        let (floor, max) = (write.floor.to_string(), write.max.to_string());
        let ttl = ttl_secs(write.ttl);
        let written = match write.expected {
            None => {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                    [&key, &write.value, &ttl, &counter, &floor, &max];
                self.write(WHAT, &self.sql.counted_insert, &params).await
            }
            Some(old) => {
                check_value(old)?;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                    [&key, &old, &write.value, &ttl, &counter, &floor, &max];
                self.write(WHAT, &self.sql.counted_swap, &params).await
            }
        };
        let rows = written.map_err(|err| said_plainly(err, write))?;
        let Some(row) = rows.first() else {
            return Ok(Counted::Refused);
        };
        let text: String = row.try_get(0).map_err(|err| {
            StorageError::outcome_unknown(format!(
                "{WHAT}: unreadable counter in the answer: {err}"
            ))
        })?;
        text.parse::<u64>().map(Counted::Written).map_err(|_| {
            StorageError::outcome_unknown(format!("{WHAT}: the counter came back as {text:?}"))
        })
    }
}

/// The statement's deliberate failures, said as the other drivers say
/// them (permanent: nothing was written); any other error as it was.
fn said_plainly(err: StorageError, write: CountedWrite<'_>) -> StorageError {
    let text = err.to_string();
    let counter = write.counter;
    if text.contains(NOT_DECIMAL) {
        StorageError::permanent(format!(
            "write_counted: counter {counter} is not a decimal u64: the record was written by something else"
        ))
    } else if text.contains(EXHAUSTED) {
        StorageError::permanent(format!(
            "write_counted: counter {counter} is exhausted (max {})",
            write.max
        ))
    } else {
        err
    }
}
