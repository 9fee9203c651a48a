//! The guarded resource: a fenced log, kept by the project's public
//! fencing helpers in the same database as the leases. A write is an
//! append carrying the writer's fencing token: the database accepts it
//! only if the token is at least the highest it has seen, in one atomic
//! step of the helper, and numbers it in accept order; the harness reads
//! the log back afterwards, so a run is checked independently of what
//! the writers reported.
//!
//! | engine | helper | atomic check |
//! |---|---|---|
//! | Cassandra / ScyllaDB | `storage_cassandra::fence::CassandraFence` | lightweight transaction |
//! | DynamoDB | `storage_dynamodb::fence::DynamoDbFence` | conditional `UpdateItem` |
//! | Valkey / Redis | `storage_valkey::fence::ValkeyFence` | one Lua script |
//! | PostgreSQL | `storage_postgres::fence::PostgresFence` | `INSERT … ON CONFLICT … WHERE` in a transaction |
//! | etcd | `storage_etcd::fence::EtcdFence` | one transaction |
//!
//! The fence is opened by [`storage_url::open_fence`] (this crate names no
//! driver) and used through [`fence::Fence::append`] and
//! [`fence::Fence::log`]; each entry's value is `"<token> <writer>"`.
//!
//! **Negative control** (`fenced = false`): the writer then hands the
//! helper the highest token ([`UNFENCED_TOKEN`]) instead of its own, so
//! the database admits every write, as a resource that ignores tokens
//! would; the log still orders them and the entry still names the
//! writer's real token, which the checker uses.

use fence::{AppendOutcome, DynFence, OpenOptions};
use storage_url::{OpenError, StorageUrl};

/// The table (Cassandra, DynamoDB, PostgreSQL) of the guarded resources.
const TABLE: &str = "chaos_fences";

/// The token an unfenced writer hands the helper: every write passes.
pub const UNFENCED_TOKEN: u64 = i64::MAX.unsigned_abs();

/// A guarded-resource error.
#[derive(Debug, thiserror::Error)]
pub enum GuardedError {
    /// The URL is not one the storage registry accepts.
    #[error(transparent)]
    Url(#[from] storage_url::UrlError),
    /// The URL names an engine without a fence.
    #[error("no guarded resource on {0}: use a cassandra, dynamodb, valkey, postgres or etcd URL")]
    Engine(String),
    /// The fence could not be opened.
    #[error(transparent)]
    Open(OpenError),
    /// The fence failed.
    #[error(transparent)]
    Storage(#[from] ttl_storage::StorageError),
    /// A log entry that is not `"<token> <writer>"`, or whose token is
    /// not the one the helper checked.
    #[error("unexpected log entry: {0}")]
    Answer(String),
}

/// One accepted write, as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in accept order.
    pub seq: u64,
    /// The fencing token it carried.
    pub token: u64,
    /// Who wrote it.
    pub writer: String,
}

/// A connection to one guarded resource.
#[derive(Debug)]
pub struct Guarded {
    fence: DynFence,
    id: String,
    fenced: bool,
}

/// Opens the fence of `url`'s engine; creates its tables if `create`
/// (once per run: concurrent schema changes are unsafe on Cassandra).
async fn connect(url: &str, create: bool) -> Result<DynFence, GuardedError> {
    let parsed: StorageUrl = url.parse()?;
    storage_url::open_fence(&parsed, &OpenOptions::new(TABLE, create))
        .await
        .map_err(|err| match err {
            OpenError::NoFence { url } => GuardedError::Engine(url),
            other => GuardedError::Open(other),
        })
}

/// Creates the resource's tables if needed (the resource `id` itself
/// needs no setup: its first append creates it).
///
/// # Errors
///
/// A bad URL or a database error.
pub async fn setup(url: &str, _id: &str) -> Result<(), GuardedError> {
    connect(url, true).await.map(drop)
}

/// Reads the log of resource `id`, in accept order.
///
/// # Errors
///
/// A bad URL, a database error, or an entry that is not `"<token>
/// <writer>"` or whose token disagrees with the one the helper checked.
pub async fn read_log(url: &str, id: &str) -> Result<Vec<LogEntry>, GuardedError> {
    let fence = connect(url, false).await?;
    fence
        .log(id)
        .await?
        .into_iter()
        .map(|e| entry(e.seq, e.token, &e.value))
        .collect()
}

/// A log entry from the helper's `(seq, checked token, value)`: the value
/// is `"<token> <writer>"`, and the token must be the one the helper
/// checked (or the writer was unfenced).
fn entry(seq: u64, checked: u64, value: &[u8]) -> Result<LogEntry, GuardedError> {
    let text = String::from_utf8_lossy(value);
    let (token, writer) = text
        .split_once(' ')
        .and_then(|(t, w)| Some((t.parse::<u64>().ok()?, w.to_string())))
        .ok_or_else(|| GuardedError::Answer(format!("seq {seq}: {text:?}")))?;
    if checked != token && checked != UNFENCED_TOKEN {
        return Err(GuardedError::Answer(format!(
            "seq {seq}: the helper checked token {checked}, the writer carried {token}"
        )));
    }
    Ok(LogEntry { seq, token, writer })
}

impl Guarded {
    /// Connects to resource `id` (set up by [`setup`]).
    ///
    /// `fenced = false` is a negative control only: the resource then
    /// accepts any token (it still orders and logs the writes), so a run
    /// with zombies must report stale writes accepted.
    ///
    /// # Errors
    ///
    /// A bad URL or a database error.
    pub async fn connect(url: &str, id: &str, fenced: bool) -> Result<Self, GuardedError> {
        Ok(Guarded {
            fence: connect(url, false).await?,
            id: id.to_string(),
            fenced,
        })
    }

    /// Writes with fencing `token` as `writer`: accepted if `token` is at
    /// least the highest token the resource has seen. An accepted write is
    /// in the log before this returns (for Cassandra and DynamoDB, unless
    /// this returns an error: the log then has a gap at its number).
    ///
    /// # Errors
    ///
    /// A database error: the outcome is then unknown.
    pub async fn write(&mut self, token: u64, writer: &str) -> Result<AppendOutcome, GuardedError> {
        let checked = if self.fenced { token } else { UNFENCED_TOKEN };
        let value = format!("{token} {writer}");
        Ok(self
            .fence
            .append(&self.id, checked, value.as_bytes())
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_the_checked_token() {
        let want = LogEntry {
            seq: 4,
            token: 7,
            writer: "c1.2".into(),
        };
        assert_eq!(entry(4, 7, b"7 c1.2").ok(), Some(want.clone()));
        // Unfenced: the helper checked the highest token, the entry keeps
        // the writer's own.
        assert_eq!(entry(4, UNFENCED_TOKEN, b"7 c1.2").ok(), Some(want));
        assert!(matches!(
            entry(4, 8, b"7 c1.2"),
            Err(GuardedError::Answer(_))
        ));
        assert!(entry(4, 7, b"seven c1.2").is_err());
        assert!(entry(4, 7, b"7").is_err());
    }

    #[tokio::test]
    async fn engines_without_a_helper_are_refused() {
        let err = Guarded::connect("mem", "r", true).await.err();
        assert!(matches!(err, Some(GuardedError::Engine(_))), "{err:?}");
    }
}
