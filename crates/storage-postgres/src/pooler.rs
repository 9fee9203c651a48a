//! Connection poolers between the driver and PostgreSQL (PgBouncer and
//! the like): which work, which are refused at connect time, and why.
//!
//! The driver needs a server session of its own per connection: the
//! watch connection's `LISTEN` must stay on one session, and statements
//! are prepared once per connection (`prepare_cached`). A pooler in
//! **session** mode keeps that (one server session per client connection
//! for its whole life) and works. In **transaction** or **statement** mode
//! a client connection's statements run on whichever server session is
//! free: `LISTEN` registers on a session that later serves other clients
//! (its notifications are lost, or reach a stranger), and a prepared
//! statement is missing on the next session (`prepared statement "s3"
//! does not exist`, at random). [`PostgresStorage::connect`] therefore
//! checks, before it sends anything else, that two of its connections do
//! not share one server session ([`PostgresStorage::refuse_shared_sessions`])
//! and refuses with [`ErrorKind::Permanent`] naming the mode it needs.
//!
//! PgBouncer also refuses the startup parameter `options`, which carries
//! the driver's `statement_timeout`, unless its configuration lists it in
//! `ignore_startup_parameters`: that refusal is reported as permanent with
//! the setting to add ([`classify_pooler_refusal`]), and a connection whose
//! `statement_timeout` did not arrive is warned about
//! ([`PostgresStorage::warn_without_statement_timeout`]).

use std::{future::Future, pin::Pin, time::Duration};

use tokio_postgres::{
    Client, SimpleQueryMessage, Socket,
    error::SqlState,
    tls::{MakeTlsConnect, TlsConnect},
};
use ttl_storage::{ErrorKind, Result, StorageError};

use crate::{
    PostgresStorage,
    error::{Op, classify, classify_connect, classify_pool, storage_error},
};

/// One more connection, opened when awaited (its connection task is
/// spawned and ends when the client is dropped).
pub(crate) type Connecting =
    Pin<Box<dyn Future<Output = std::result::Result<Client, tokio_postgres::Error>> + Send>>;

/// A [`Connecting`] for `pg` over `tls`.
pub(crate) fn connect_one<T>(pg: tokio_postgres::Config, tls: T) -> Connecting
where
    T: MakeTlsConnect<Socket> + Send + 'static,
    T::Stream: Send + Sync + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    Box::pin(async move {
        let (client, connection) = pg.connect(tls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    })
}

/// Rounds of the shared-session check: a pooler that hands the probe's
/// second connection another idle session (another client released one
/// in between) is caught by the next round.
const ROUNDS: usize = 3;

/// The refusal of a pooler that shares server sessions between client
/// connections.
fn shared_sessions_refused(url: &str, detail: &str) -> StorageError {
    StorageError::permanent(format!(
        "{url} is a connection pooler in transaction or statement mode ({detail}): \
         storage-postgres needs a server session per connection (LISTEN, prepared \
         statements); use pool_mode = session (PgBouncer) or connect to PostgreSQL directly"
    ))
}

/// If `err` is a pooler refusing the connection for a reason no retry
/// fixes, the permanent error that says what to change; `None` for every
/// other error. PgBouncer reports these with SQLSTATE 08P01 (protocol
/// violation), which would otherwise count as a transient connection
/// failure and be retried for ever:
///
/// - `unsupported startup parameter: options` — add `options` to
///   `ignore_startup_parameters`;
/// - `... authentication failed` — the credentials (PgBouncer's own
///   `auth_file` or `auth_query`).
pub(crate) fn classify_pooler_refusal(err: &tokio_postgres::Error) -> Option<String> {
    let db = err.as_db_error()?;
    if db.code() != &SqlState::PROTOCOL_VIOLATION {
        return None;
    }
    let message = db.message();
    if message.starts_with("unsupported startup parameter") {
        return Some(format!(
            "a connection pooler refused the connection ({message}): storage-postgres sends its \
             statement_timeout in the startup parameter `options`; with PgBouncer add \
             `ignore_startup_parameters = options` (and use pool_mode = session), or connect to \
             PostgreSQL directly"
        ));
    }
    if message.contains("authentication failed") || message.starts_with("no such user") {
        return Some(format!(
            "a connection pooler refused the credentials ({message})"
        ));
    }
    None
}

/// `SELECT pg_backend_pid()` on `client`, by the simple protocol (no
/// prepared statement to lose on a pooled session).
async fn backend_pid(client: &Client) -> std::result::Result<String, tokio_postgres::Error> {
    let messages = client.simple_query("SELECT pg_backend_pid()").await?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap_or_default())
}

impl PostgresStorage {
    /// Refuses a pooler in transaction or statement mode: connection A
    /// reads its server session's pid; connection B (`second`) opens a
    /// transaction, which pins a session, and reads its pid; A reads again.
    /// Directly or through a session-mode pooler, A's pid never changes
    /// and B's is another. Through a transaction-mode pooler B gets the
    /// session A just released (PgBouncer hands out the most recently
    /// used one first) or A moves to another: either shows. A statement-
    /// mode pooler refuses B's transaction. [`ROUNDS`] rounds; nothing is
    /// written and no session state is left behind.
    ///
    /// Errors: permanent naming the mode needed; connection failures as
    /// [`Self::connect`] classifies them.
    pub(crate) async fn refuse_shared_sessions(&self, second: Connecting) -> Result<()> {
        let url = self.config().redacted_url();
        let what = format!("checking {url} for a transaction-mode pooler");
        // The first connections of this storage: their failures (refused,
        // a bad password, a server without TLS) are said as connecting,
        // with the client's own words (not the pool's wrapper).
        let connecting = format!("connecting to {url}");
        let check = async {
            let a = self.pool().get().await.map_err(|err| match err {
                deadpool_postgres::PoolError::Backend(e) => match classify_pooler_refusal(&e) {
                    Some(why) => StorageError::with_source(ErrorKind::Permanent, why, e),
                    None => storage_error(classify_connect(&e), &connecting, e),
                },
                other => storage_error(classify_pool(&other), &connecting, other),
            })?;
            let b = second
                .await
                .map_err(|err| match classify_pooler_refusal(&err) {
                    Some(why) => StorageError::with_source(ErrorKind::Permanent, why, err),
                    None => storage_error(classify_connect(&err), &connecting, err),
                })?;
            let read =
                |err: tokio_postgres::Error| storage_error(classify(&err, Op::Read), &what, err);
            for _ in 0..ROUNDS {
                let first = backend_pid(&a).await.map_err(read)?;
                if let Err(err) = b.simple_query("BEGIN").await {
                    let pooler = err
                        .as_db_error()
                        .is_some_and(|db| db.message().contains("pooling mode"));
                    if pooler {
                        return Err(shared_sessions_refused(
                            &url,
                            "it refused a transaction block",
                        ));
                    }
                    return Err(read(err));
                }
                let pinned = backend_pid(&b).await.map_err(read)?;
                let again = backend_pid(&a).await.map_err(read)?;
                b.simple_query("COMMIT").await.map_err(read)?;
                if pinned == first || again != first {
                    return Err(shared_sessions_refused(
                        &url,
                        &format!(
                            "one connection ran on server sessions {first} then {again}, \
                             another on {pinned}"
                        ),
                    ));
                }
            }
            Ok(())
        };
        let limit =
            self.config().options.connect_timeout + 2 * self.config().options.request_timeout;
        tokio::time::timeout(limit, check)
            .await
            .map_err(|_| StorageError::transient(format!("{what}: no answer within {limit:?}")))?
    }

    /// Warns when the server does not run this driver's sessions with the
    /// `statement_timeout` its startup options set (a pooler that drops
    /// startup options, PgBouncer's `ignore_startup_parameters`): a
    /// statement the server never finishes then ends as outcome unknown
    /// at the client's timeout, instead of as a clean cancellation. Never
    /// fatal.
    pub(crate) async fn warn_without_statement_timeout(&self) {
        let url = self.config().redacted_url();
        let want = self.config().options.request_timeout;
        match tokio::time::timeout(Duration::from_secs(5), self.statement_timeout()).await {
            Ok(Ok(got)) if got == want => {}
            Ok(Ok(got)) => tracing::warn!(
                %url,
                statement_timeout = ?got,
                wanted = ?want,
                "postgres: the server does not run this session with the statement_timeout \
                 sent in the startup options (a pooler that ignores them, such as PgBouncer \
                 with ignore_startup_parameters = options?): a statement the server never \
                 finishes ends as outcome unknown at the client's timeout instead of being \
                 cancelled; set statement_timeout for the role (ALTER ROLE ... SET \
                 statement_timeout)"
            ),
            Ok(Err(err)) => {
                tracing::debug!(%url, %err, "postgres: could not read statement_timeout")
            }
            Err(_) => tracing::debug!(%url, "postgres: reading statement_timeout got no answer"),
        }
    }

    /// The `statement_timeout` the server runs this driver's pooled
    /// sessions with: the configured `timeout` when the startup options
    /// arrived (zero is PostgreSQL's "none"). A pooler that drops startup
    /// options (PgBouncer's `ignore_startup_parameters`) shows as another
    /// value; [`PostgresStorage::connect`] warns then.
    ///
    /// Errors: transient when no connection or answer comes; permanent
    /// when the server refuses the query.
    pub async fn statement_timeout(&self) -> Result<Duration> {
        let what = "reading statement_timeout";
        let client = self
            .pool()
            .get()
            .await
            .map_err(|err| storage_error(classify_pool(&err), what, err))?;
        let rows = client
            .simple_query(
                "SELECT (extract(epoch FROM current_setting('statement_timeout')::interval) \
                 * 1000)::int8",
            )
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), what, err))?;
        let ms = rows
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0).and_then(|v| v.parse::<u64>().ok()),
                _ => None,
            })
            .ok_or_else(|| StorageError::permanent(format!("{what}: no number in the answer")))?;
        Ok(Duration::from_millis(ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_session_mode() {
        let err = shared_sessions_refused("postgres://u@h/db", "x");
        assert_eq!(err.kind(), ErrorKind::Permanent);
        assert!(err.to_string().contains("pool_mode = session"), "{err}");
    }
}
