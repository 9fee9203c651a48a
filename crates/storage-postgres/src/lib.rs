//! # storage-postgres
//!
//! A [`ttl_storage::TtlStorage`] on **PostgreSQL** (12 or later), with
//! `tokio-postgres` and a `deadpool-postgres` pool. Leadership lives in the
//! database the service already uses.
//!
//! ## How it works
//!
//! One table, created idempotently at connect time (`create_table=true`,
//! the default; concurrent creators serialize on an advisory lock):
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS ttl_records (
//!     key text PRIMARY KEY, value bytea NOT NULL, expires_at timestamptz NULL);
//! ```
//!
//! `expires_at` is `NULL` for [`ttl_storage::Ttl::NEVER`]. Each operation is
//! one statement, hence one atomic transaction:
//!
//! | operation | SQL |
//! |---|---|
//! | `insert_if_not_exists` | `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE expires_at <= now()` |
//! | `compare_and_swap` | `UPDATE ... SET value = $new, expires_at = clock_timestamp() + ttl WHERE key = $1 AND value = $old AND (expires_at IS NULL OR expires_at > now())` |
//! | `compare_and_delete` | `WITH gone AS (DELETE ... WHERE key = $1 AND value = $v AND <live> RETURNING key) SELECT pg_notify(<channel>, key) FROM gone` |
//! | `get` | `SELECT value ... WHERE key = $1 AND <live>` |
//! | `get_entry` (`vvm-host status`) | `SELECT value, expires_at - now() ...` in milliseconds, on the server's clock |
//! | `write_counted` (a take-over and its fencing token) | `WITH rec AS (<insert or swap> RETURNING 1), cnt AS (INSERT <counter> SELECT ... FROM rec ON CONFLICT (key) DO UPDATE SET value = <current + 1, at least the floor>) SELECT ... FROM cnt`: the counter advances under its row lock, from the latest committed value; a counter that cannot advance aborts the statement |
//!
//! The answer of a write is the rows it changed (1 or 0).
//!
//! ## Watching (`TtlStorage::watch`)
//!
//! A waiter wakes as soon as the record may be gone: compare-and-delete
//! notifies the deleted key on the table's channel
//! (`ttl_storage_<hash of the table name>`) in the delete's own statement,
//! so the notification is sent when the delete commits, and each storage
//! keeps one extra connection (outside the pool) listening on it. A watch
//! registers locally, reads the record's remaining life as the server
//! computes it (`expires_at - now()`), and completes when there is no live
//! record, when its delete is notified, or 1 ms after that remaining time
//! (rows do not expire by themselves: expiry is a local timer). While the
//! listener is not listening (connecting, reconnecting after a failure or
//! a failed health check), `watch` answers
//! [`ttl_storage::WatchUnsupported`] and the caller polls; losing it wakes
//! every pending watch.
//!
//! ## Following writes (`TtlStorage::changes`)
//!
//! The writes of a new value notify the same channel in their own
//! statement (`WITH w AS (<insert or swap> RETURNING key, value) SELECT
//! pg_notify(<channel>, key LF count LF hex(value)) FROM w`; a renewal,
//! same value, notifies nothing), so the listener receives them in commit
//! order with the deletes. The counted write notifies its count. A value
//! over 3 600 bytes (the notification must stay under `NOTIFY`'s 8 000
//! bytes) is notified without it: its followers are interrupted and read
//! the record. Followers are armed while the listener listens; expiry is
//! not reported (rows do not expire by themselves).
//!
//! ## Guarantees
//!
//! - **Linearizable on the primary.** Each statement locks the row it
//!   changes; under `READ COMMITTED` a statement that waited for a
//!   concurrent writer re-checks its `WHERE` clause on the row's newest
//!   version, so of two racing inserts or swaps exactly one wins. Reads see
//!   every committed write. Connections are opened with
//!   `target_session_attrs=read-write`, so a hot standby is never used.
//! - **Expiry is judged by the server's clock**: `now()`, the start of the
//!   statement on the server, decides liveness, and a write stores
//!   `expires_at = clock_timestamp() + ttl`, the server's clock when the row
//!   is written (after any wait for another writer's row lock). Client
//!   clocks never matter. A record lives at least its TTL after the
//!   statement started (hence after the call started), with microsecond
//!   precision, and a swap applied late (one that waited behind, or
//!   arrived after, an acknowledged one) never moves the expiry earlier.
//!   Both read the server's wall clock: a step of that clock moves every
//!   lease by the step.
//! - **Errors** are classified: no connection (refused, pool exhausted
//!   past the timeout) is [`ttl_storage::ErrorKind::Transient`], nothing
//!   was sent; an error reply is never applied (the statement's
//!   transaction rolled back), so it is transient for serialization
//!   failures, deadlocks, cancellation by `statement_timeout`, shutdowns,
//!   a read-only standby and resource exhaustion, and permanent otherwise
//!   (missing table, permissions, ...). A write whose answer is lost (the
//!   connection dropped, or no answer within `timeout` + 0.5 s) is
//!   [`ttl_storage::ErrorKind::OutcomeUnknown`]. TLS and authentication
//!   failures are permanent.
//! - **TLS** (rustls) with `sslmode=require`, `verify-ca` or `verify-full`
//!   always verifies the certificate chain and host name, and never falls
//!   back to plaintext; `prefer` and `allow` are refused.
//!
//! ## Failover
//!
//! With synchronous replication (`synchronous_commit = on` or stricter and
//! `synchronous_standby_names` set) a promoted standby has every
//! acknowledged write, leases and fencing counters included. With
//! asynchronous replication a promoted standby can miss the last
//! acknowledged writes: a lease can vanish and the fencing counter can go
//! back (see `docs/guarantees.md`); [`PostgresStorage::connect`] logs a
//! warning when the server has standbys but commits do not wait for one
//! ([`PostgresStorage::replication`] reads it). Give every server of the
//! cluster in the URL (`postgres://u:pw@pg-a:5432,pg-b:5432/db`): the
//! driver connects to the one that accepts writes, the promoted standby
//! after a failover. `synchronous_commit = off` loses
//! acknowledged writes on a crash even without failover: do not use it for
//! the lease table.
//!
//! ## Connection poolers
//!
//! A pooler in **session** mode (PgBouncer's `pool_mode = session`) works:
//! the whole driver suite passes through one (`cargo xtask test-drivers
//! --engine postgres-pgbouncer`). PgBouncer refuses the startup parameter
//! `options`, which carries the driver's `statement_timeout`, unless it is
//! listed in `ignore_startup_parameters`; that refusal is a permanent
//! error naming the setting, and with it ignored the sessions run without
//! the server-side timeout ([`PostgresStorage::statement_timeout`];
//! `connect` warns). **Transaction** and **statement** mode share server
//! sessions between client connections, which breaks `LISTEN` and
//! prepared statements: before it sends anything else, `connect` checks
//! that two of its connections do not share one server session and
//! refuses with a permanent error naming `pool_mode = session`.
//!
//! ## Assumptions
//!
//! - Only this driver writes the table. Expired rows stay until a later
//!   insert of the same key replaces them (one row per election key).
//! - The table has exactly the columns above; [`PostgresStorage::connect`]
//!   checks them and fails with a permanent error otherwise.
//!
//! ## Fencing
//!
//! [`fence::PostgresFence`] guards a resource kept in the same database: a
//! transaction whose fencing token is lower than one already recorded
//! learns it must roll back, before it writes anything.
//!
//! ## Example
//!
//! ```no_run
//! use storage_postgres::PostgresStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo() -> Result<(), ttl_storage::StorageError> {
//! let storage =
//!     PostgresStorage::from_url("postgres://app:s3cret@db.internal/app?sslmode=verify-full").await?;
//! let key = Key::new("vvm/leader/1")?;
//! if storage.insert_if_not_exists(&key, b"node-7", Ttl::from_secs(20)?).await? {
//!     // we lead for 20 s unless we renew:
//!     storage.compare_and_swap(&key, b"node-7", b"node-7", Ttl::from_secs(20)?).await?;
//! }
//! assert_eq!(storage.get(&key).await?.as_deref(), Some(&b"node-7"[..]));
//! # Ok(()) }
//! ```

mod config;
mod driver;
mod error;
pub mod fence;
mod pooler;
mod replication;
mod schema;
mod storage;
mod url;
mod watch;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TABLE, PostgresConfig, PostgresConfigBuilder, SslMode,
};
pub use error::ConfigError;
pub use replication::Replication;
pub use storage::PostgresStorage;

/// This driver, for registries such as `storage-url`: the URL is parsed
/// once, and the parsed configuration is what gets opened.
///
/// ```
/// let parsed = (storage_postgres::DRIVER.parse)("postgres://u:p@db/leases")?;
/// assert_eq!((storage_postgres::DRIVER.endpoint)(&parsed).as_deref(), Some("db:5432"));
/// # Ok::<(), ttl_storage::BoxError>(())
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<PostgresConfig>(
    "postgres",
    &["postgres", "postgresql"],
    "postgres://user:password@host[:port][,host[:port]...]/database[?sslmode=require] (PostgreSQL; several hosts: the one that accepts writes)",
    Some(DEFAULT_PORT),
).with_fence::<PostgresConfig>();
