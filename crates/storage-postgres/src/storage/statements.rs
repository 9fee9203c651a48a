//! The SQL of every operation, for one table.

/// A live row: no expiry, or one after the statement's start.
const LIVE: &str = "(expires_at IS NULL OR expires_at > now())";

/// The expiry of a write whose TTL in whole seconds is parameter `$n`
/// (`0`: never, `NULL`), counted from when the row is written.
fn expiry(n: u8) -> String {
    format!(
        "CASE WHEN ${n}::bigint = 0 THEN NULL \
         ELSE clock_timestamp() + ${n}::bigint * interval '1 second' END"
    )
}

/// `insert_if_not_exists` ($1 key, $2 value, $3 TTL): a row that is absent
/// or expired is (re)written; each written row is returned.
fn insert_sql(table: &str) -> String {
    format!(
        "INSERT INTO {table} AS r (key, value, expires_at) VALUES ($1, $2, {}) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at \
         WHERE r.expires_at IS NOT NULL AND r.expires_at <= now() RETURNING key, value",
        expiry(3)
    )
}

/// `compare_and_swap` ($1 key, $2 old, $3 new, $4 TTL); each written row
/// is returned.
fn swap_sql(table: &str) -> String {
    format!(
        "UPDATE {table} SET value = $3, expires_at = {} \
         WHERE key = $1 AND value = $2 AND {LIVE} RETURNING key, value",
        expiry(4)
    )
}

/// The longest value a notification carries (hex-encoded, with a key of
/// at most 512 bytes and a count, it stays under `NOTIFY`'s 8000 bytes);
/// a longer one is notified as `!`: its followers read the record.
const MAX_NOTIFIED: usize = 3600;

/// The payload telling followers that row `row` (a `WITH` part returning
/// `key, value`) was written with `count` (an SQL text expression):
/// `key LF count LF hex(value)` (keys hold no control character).
pub(super) fn written_payload(row: &str, count: &str) -> String {
    format!(
        "{row}.key || E'\\n' || {count} || E'\\n' || CASE WHEN octet_length({row}.value) <= {MAX_NOTIFIED} \
         THEN encode({row}.value, 'hex') ELSE '!' END"
    )
}

/// `sql` (ending in `RETURNING key, value`), notifying `channel` of the
/// written row when `when` (an SQL condition) holds.
fn notifying(sql: &str, channel: &str, when: &str) -> String {
    format!(
        "WITH w AS ({sql}) SELECT CASE WHEN {when} THEN pg_notify('{channel}', {}) END FROM w",
        written_payload("w", "''")
    )
}

/// The statements, for one table. `now()` is the start of the
/// statement's transaction on the *server's* clock; each statement is its
/// own transaction, so every liveness decision uses one server instant.
/// A written expiry counts from `clock_timestamp()` instead, read when the
/// row is written: a statement that waited for another writer's row lock
/// (and re-checked its `WHERE` on the new row) is anchored after that
/// writer's commit, so a swap applied late never moves the expiry earlier
/// than one already acknowledged (`now()` would anchor it at its start,
/// possibly before the writer it waited for).
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) insert: String,
    pub(super) cas: String,
    /// `insert` and the counter's advance, in one statement.
    pub(super) counted_insert: String,
    /// `cas` and the counter's advance, in one statement.
    pub(super) counted_swap: String,
    pub(super) cad: String,
    pub(super) get: String,
    /// The value and its time to live in milliseconds (`NULL`: never).
    pub(super) entry: String,
    /// The record's time to live in milliseconds, on the server's clock
    /// (`NULL`: never expires; no row: no live record).
    pub(super) remaining: String,
}

impl Statements {
    /// The statements on `table`; the writes notify `channel` of a new
    /// value (a renewal, same value, notifies nothing) and
    /// compare-and-delete of the deleted key.
    pub(super) fn new(table: &str, channel: &str) -> Self {
        let live = LIVE;
        Statements {
            insert: notifying(&insert_sql(table), channel, "true"),
            cas: notifying(&swap_sql(table), channel, "$2 IS DISTINCT FROM $3"),
            counted_insert: super::counted::statement(
                table,
                &insert_sql(table),
                4,
                channel,
                "true",
            ),
            counted_swap: super::counted::statement(
                table,
                &swap_sql(table),
                5,
                channel,
                "$2 IS DISTINCT FROM $3",
            ),
            // The notification is sent when the statement's transaction
            // commits, that is with the delete; its row count is the
            // number of rows deleted.
            cad: format!(
                "WITH gone AS (DELETE FROM {table} WHERE key = $1 AND value = $2 AND {live} \
                 RETURNING key) SELECT pg_notify('{channel}', key) FROM gone"
            ),
            get: format!("SELECT value FROM {table} WHERE key = $1 AND {live}"),
            entry: format!(
                "SELECT value, (extract(epoch FROM expires_at - now()) * 1000)::float8 \
                 FROM {table} WHERE key = $1 AND {live}"
            ),
            remaining: format!(
                "SELECT (extract(epoch FROM expires_at - now()) * 1000)::float8 \
                 FROM {table} WHERE key = $1 AND {live}"
            ),
        }
    }
}
