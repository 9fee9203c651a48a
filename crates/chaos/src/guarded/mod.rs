//! The guarded resource: accepts a write only with a fencing token at least
//! as high as any it has seen, decided atomically by the database, and
//! keeps an append-only log of the writes it accepted, in accept order, so
//! a run can be checked independently of what the writers reported.
//!
//! - Cassandra / ScyllaDB (`cassandra.rs`): a lightweight transaction.
//! - DynamoDB (`dynamo.rs`): a conditional `UpdateItem`.

mod cassandra;
mod dynamo;

use cassandra::CassandraGuarded;
use dynamo::DynamoGuarded;

/// A guarded-resource error.
#[derive(Debug, thiserror::Error)]
pub enum GuardedError {
    /// The URL is not a valid `scylla://` URL.
    #[error("bad scylla:// URL: {0}")]
    Url(#[from] storage_scylla::ConfigError),
    /// The URL is not a valid `dynamodb://` URL.
    #[error("bad dynamodb:// URL: {0}")]
    DynamoUrl(#[from] storage_dynamo::ConfigError),
    /// The URL's scheme is neither `scylla` nor `dynamodb`.
    #[error("unsupported store URL {0:?}: use scylla:// or dynamodb://")]
    Scheme(String),
    /// The database did not answer or refused a statement.
    #[error("{what}: {source}")]
    Db {
        /// What was being done.
        what: &'static str,
        /// The driver error, as text.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An answer without the expected fields.
    #[error("unexpected answer: {0}")]
    Answer(String),
}

pub(crate) fn db<E: std::error::Error + Send + Sync + 'static>(
    what: &'static str,
) -> impl Fn(E) -> GuardedError {
    move |err| GuardedError::Db {
        what,
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
    fenced: bool,
}

#[derive(Debug)]
enum Backend {
    Cassandra(Box<CassandraGuarded>),
    Dynamo(DynamoGuarded),
}

enum Scheme {
    Scylla,
    Dynamo,
}

/// The engine of `url`, as the storage registry reads it.
fn scheme(url: &str) -> Result<Scheme, GuardedError> {
    let parsed: storage_url::StorageUrl = url
        .parse()
        .map_err(|_| GuardedError::Scheme(url.to_string()))?;
    match parsed.engine() {
        storage_url::Engine::Cassandra => Ok(Scheme::Scylla),
        storage_url::Engine::DynamoDb => Ok(Scheme::Dynamo),
        _ => Err(GuardedError::Scheme(parsed.to_string())),
    }
}

/// Creates the resource's tables if needed and its record `id` with token 0.
///
/// # Errors
///
/// A bad URL or a database error.
pub async fn setup(url: &str, id: &str) -> Result<(), GuardedError> {
    match scheme(url)? {
        Scheme::Scylla => cassandra::setup(url, id).await,
        Scheme::Dynamo => dynamo::setup(url, id).await,
    }
}

/// Reads the log of resource `id`, in accept order.
///
/// # Errors
///
/// A bad URL or a database error.
pub async fn read_log(url: &str, id: &str) -> Result<Vec<LogEntry>, GuardedError> {
    match scheme(url)? {
        Scheme::Scylla => cassandra::read_log(url, id).await,
        Scheme::Dynamo => dynamo::read_log(url, id).await,
    }
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
        let backend = match scheme(url)? {
            Scheme::Scylla => {
                Backend::Cassandra(Box::new(CassandraGuarded::connect(url, id).await?))
            }
            Scheme::Dynamo => Backend::Dynamo(DynamoGuarded::connect(url, id).await?),
        };
        Ok(Guarded { backend, fenced })
    }

    /// Writes with fencing `token` as `writer`: accepted if `token` is at
    /// least the highest token the resource has seen. An accepted write is
    /// in the log before this returns.
    ///
    /// # Errors
    ///
    /// A database error: the outcome is then unknown.
    pub async fn write(&mut self, token: u64, writer: &str) -> Result<Verdict, GuardedError> {
        // The highest token seen that still lets the write in.
        let limit = if self.fenced {
            token
        } else {
            i64::MAX.unsigned_abs()
        };
        match &mut self.backend {
            Backend::Cassandra(g) => g.write(token, writer, limit).await,
            Backend::Dynamo(g) => g.write(token, writer, limit).await,
        }
    }
}
