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
//! | Cassandra / ScyllaDB | [`fence::CassandraFence::append`] | lightweight transaction |
//! | DynamoDB | [`fence::DynamoFence::append`] | conditional `UpdateItem` |
//! | Valkey / Redis | [`storage_valkey::fence::ValkeyFence::append`] | one Lua script |
//! | PostgreSQL | [`storage_postgres::fence::PostgresFence::append`] | `INSERT … ON CONFLICT … WHERE` in a transaction |
//! | etcd | [`storage_etcd::fence::EtcdFence::append`] | one transaction |
//!
//! The backend is picked by [`storage_url::Engine`]; each entry's value is
//! `"<token> <writer>"`.
//!
//! **Negative control** (`fenced = false`): the writer then hands the
//! helper the highest token ([`UNFENCED_TOKEN`]) instead of its own, so
//! the database admits every write, as a resource that ignores tokens
//! would; the log still orders them and the entry still names the
//! writer's real token, which the checker uses.

use std::sync::Arc;

use fence::{AppendVerdict, CassandraFence, DynamoFence};
use storage_etcd::{EtcdStorage, fence::EtcdFence};
use storage_postgres::{PostgresStorage, fence::PostgresFence};
use storage_url::{Engine, StorageUrl};
use storage_valkey::{ValkeyStorage, fence::ValkeyFence};

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
    /// The URL names an engine without a fencing helper here.
    #[error("no guarded resource on {0}: use a cassandra, dynamodb, valkey, postgres or etcd URL")]
    Engine(String),
    /// The driver rejected the URL's configuration.
    #[error("bad {engine} URL: {source}")]
    Config {
        /// The engine.
        engine: &'static str,
        /// The driver's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A fencing helper of the `fence` crate failed.
    #[error(transparent)]
    Fence(#[from] fence::FenceError),
    /// A driver's fencing helper (or its connection) failed.
    #[error(transparent)]
    Storage(#[from] ttl_storage::StorageError),
    /// The database did not answer or refused a statement.
    #[error("{what}: {source}")]
    Db {
        /// What was being done.
        what: &'static str,
        /// The driver error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A log entry that is not `"<token> <writer>"`, or whose token is
    /// not the one the helper checked.
    #[error("unexpected log entry: {0}")]
    Answer(String),
}

fn config<E: std::error::Error + Send + Sync + 'static>(
    engine: &'static str,
) -> impl Fn(E) -> GuardedError {
    move |err| GuardedError::Config {
        engine,
        source: Box::new(err),
    }
}

/// What the resource said to one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted with this sequence number.
    Accepted(u64),
    /// Refused: the resource has seen this higher token.
    Rejected(u64),
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
    backend: Backend,
    id: String,
    fenced: bool,
}

/// One helper per engine (with the storage whose connection it shares).
#[derive(Debug)]
enum Backend {
    Cassandra(Box<CassandraFence>),
    Dynamo(DynamoFence),
    Valkey {
        fence: Box<ValkeyFence>,
        /// Owns the connection the fence shares.
        _storage: Box<ValkeyStorage>,
    },
    Postgres(PostgresFence, Box<PostgresStorage>),
    Etcd(Box<EtcdFence>),
}

impl Backend {
    /// Connects the helper of `url`'s engine; creates its tables if
    /// `create` (once per run: concurrent schema changes are unsafe on
    /// Cassandra).
    async fn connect(url: &str, create: bool) -> Result<Self, GuardedError> {
        let parsed: StorageUrl = url.parse()?;
        match parsed.engine() {
            Engine::Cassandra => {
                let config =
                    storage_scylla::ScyllaConfig::from_url(url).map_err(config("cassandra"))?;
                let session = scylla::client::session_builder::SessionBuilder::new()
                    .known_nodes(config.contact_points())
                    .connection_timeout(config.connect_timeout())
                    .build()
                    .await
                    .map_err(|err| GuardedError::Db {
                        what: "connecting to Cassandra",
                        source: Box::new(err),
                    })?;
                if create {
                    CassandraFence::create_table(&session, config.keyspace(), TABLE).await?;
                }
                let fence =
                    CassandraFence::new(Arc::new(session), config.keyspace(), TABLE).await?;
                Ok(Backend::Cassandra(Box::new(fence)))
            }
            Engine::DynamoDb => {
                let config =
                    storage_dynamo::DynamoConfig::from_url(url).map_err(config("dynamodb"))?;
                let storage = storage_dynamo::DynamoStorage::connect(config)
                    .await
                    .map_err(|err| GuardedError::Db {
                        what: "connecting to DynamoDB",
                        source: Box::new(err),
                    })?;
                let client = storage.client().clone();
                if create {
                    DynamoFence::create_table(&client, TABLE).await?;
                }
                Ok(Backend::Dynamo(DynamoFence::new(client, TABLE)?))
            }
            Engine::Valkey => {
                let storage = ValkeyStorage::from_url(url).await?;
                Ok(Backend::Valkey {
                    fence: Box::new(ValkeyFence::new(&storage)),
                    _storage: Box::new(storage),
                })
            }
            Engine::Postgres => {
                let storage = PostgresStorage::from_url(url).await?;
                // Idempotent, serialized by an advisory lock.
                let fence = PostgresFence::create(&storage, TABLE).await?;
                Ok(Backend::Postgres(fence, Box::new(storage)))
            }
            Engine::Etcd => {
                let storage = EtcdStorage::from_url(url).await?;
                Ok(Backend::Etcd(Box::new(EtcdFence::new(&storage))))
            }
            _ => Err(GuardedError::Engine(parsed.to_string())),
        }
    }

    /// One fenced append of `value` with `token`.
    async fn append(&self, id: &str, token: u64, value: &[u8]) -> Result<Verdict, GuardedError> {
        use storage_etcd::fence::AppendOutcome as Etcd;
        use storage_postgres::fence::AppendOutcome as Pg;
        use storage_valkey::fence::AppendOutcome as Vk;
        Ok(match self {
            Backend::Cassandra(fence) => from_fence(fence.append(id, token, value).await?),
            Backend::Dynamo(fence) => from_fence(fence.append(id, token, value).await?),
            Backend::Valkey { fence, .. } => match fence.append(id, token, value).await? {
                Vk::Appended { seq } => Verdict::Accepted(seq),
                Vk::Rejected { highest } => Verdict::Rejected(highest),
            },
            Backend::Postgres(fence, storage) => {
                let mut client = storage.pool().get().await.map_err(|err| GuardedError::Db {
                    what: "connecting to PostgreSQL",
                    source: Box::new(err),
                })?;
                let db = |what| {
                    move |err: tokio_postgres::Error| GuardedError::Db {
                        what,
                        source: Box::new(err),
                    }
                };
                let tx = client.transaction().await.map_err(db("BEGIN"))?;
                match fence.append(&tx, id, token, value).await? {
                    Pg::Appended { seq } => {
                        tx.commit().await.map_err(db("COMMIT"))?;
                        Verdict::Accepted(seq)
                    }
                    Pg::Rejected { highest } => Verdict::Rejected(highest),
                }
            }
            Backend::Etcd(fence) => match fence.append(id, token, value).await? {
                Etcd::Appended { seq } => Verdict::Accepted(seq),
                Etcd::Rejected { highest } => Verdict::Rejected(highest),
            },
        })
    }

    /// The log of `id` as `(seq, token the helper checked, value)`, in
    /// accept order.
    async fn log(&self, id: &str) -> Result<Vec<(u64, u64, Vec<u8>)>, GuardedError> {
        Ok(match self {
            Backend::Cassandra(fence) => fence
                .log(id)
                .await?
                .into_iter()
                .map(|e| (e.seq, e.token, e.value))
                .collect(),
            Backend::Dynamo(fence) => fence
                .log(id)
                .await?
                .into_iter()
                .map(|e| (e.seq, e.token, e.value))
                .collect(),
            Backend::Valkey { fence, .. } => fence
                .log(id)
                .await?
                .into_iter()
                .map(|e| (e.seq, e.token, e.value))
                .collect(),
            Backend::Postgres(fence, storage) => {
                let client = storage.pool().get().await.map_err(|err| GuardedError::Db {
                    what: "connecting to PostgreSQL",
                    source: Box::new(err),
                })?;
                fence
                    .log(&client, id)
                    .await?
                    .into_iter()
                    .map(|e| (e.seq, e.token, e.value))
                    .collect()
            }
            Backend::Etcd(fence) => fence
                .log(id)
                .await?
                .into_iter()
                .map(|e| (e.seq, e.token, e.value))
                .collect(),
        })
    }
}

fn from_fence(verdict: AppendVerdict) -> Verdict {
    match verdict {
        AppendVerdict::Appended { seq } => Verdict::Accepted(seq),
        AppendVerdict::Rejected { highest_seen } => Verdict::Rejected(highest_seen),
    }
}

/// Creates the resource's tables if needed (the resource `id` itself
/// needs no setup: its first append creates it).
///
/// # Errors
///
/// A bad URL or a database error.
pub async fn setup(url: &str, _id: &str) -> Result<(), GuardedError> {
    Backend::connect(url, true).await.map(drop)
}

/// Reads the log of resource `id`, in accept order.
///
/// # Errors
///
/// A bad URL, a database error, or an entry that is not `"<token>
/// <writer>"` or whose token disagrees with the one the helper checked.
pub async fn read_log(url: &str, id: &str) -> Result<Vec<LogEntry>, GuardedError> {
    let backend = Backend::connect(url, false).await?;
    backend
        .log(id)
        .await?
        .into_iter()
        .map(|(seq, checked, value)| entry(seq, checked, &value))
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
            backend: Backend::connect(url, false).await?,
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
    pub async fn write(&mut self, token: u64, writer: &str) -> Result<Verdict, GuardedError> {
        let checked = if self.fenced { token } else { UNFENCED_TOKEN };
        let value = format!("{token} {writer}");
        self.backend
            .append(&self.id, checked, value.as_bytes())
            .await
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
