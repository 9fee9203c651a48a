//! # storage-valkey
//!
//! A [`ttl_storage::TtlStorage`] on **Valkey** and **Redis** (6 or later),
//! with the [`fred`] client. Every coordinator user already runs one.
//!
//! ## How it works
//!
//! Each record is one string key, `<prefix><key>` (prefix `ttl:` by
//! default), holding the value's bytes; the TTL is the key's own expiry,
//! set in milliseconds with `PX`. [`ttl_storage::Ttl::NEVER`] writes no
//! expiry.
//!
//! | operation | command |
//! |---|---|
//! | `insert_if_not_exists` | Lua: `SET key value NX PX ttl_ms`, `PUBLISH <prefix>__deleted key\0\0value` |
//! | `compare_and_swap` | Lua: `GET`, compare, `SET key new PX ttl_ms`, and for a new value `PUBLISH <prefix>__deleted key\0\0new` |
//! | `compare_and_delete` | Lua: `GET`, compare, `DEL key`, `PUBLISH <prefix>__deleted key` |
//! | `get` | `GET key` |
//! | `get_entry` (`vvm-host status`) | a script: `GET key` and `PTTL key` (milliseconds) |
//!
//! Scripts run with `EVALSHA`; a server that answers `NOSCRIPT` (after a
//! restart, a failover or `SCRIPT FLUSH`) gets the script once with `EVAL`.
//!
//! ## Guarantees
//!
//! - **Linearizable on one server.** The server runs commands and scripts
//!   one at a time, so each operation is atomic, and reads see every
//!   acknowledged write. This holds for one primary; see *Failover* below.
//! - **Expiry is judged by the server's clock.** The server counts the TTL
//!   from the moment it applies the write (after the call started), with
//!   millisecond precision, and never returns an expired key (`GET` and
//!   scripts check expiry on access). Client clocks do not matter. The
//!   server computes absolute expiry times from its *wall* clock: a
//!   wall-clock step on the server shortens or lengthens live leases by the
//!   step (NTP slewing is harmless).
//! - **Errors** are classified: no connection (refused, down, reconnecting:
//!   nothing is sent) is [`ttl_storage::ErrorKind::Transient`], as are
//!   server replies that prove the command did not run (`LOADING`, `BUSY`,
//!   `READONLY`, `OOM`, `MASTERDOWN`, ...). A write whose answer is lost
//!   after it was sent (timeout, connection dropped) is
//!   [`ttl_storage::ErrorKind::OutcomeUnknown`]; the client never re-sends
//!   a command by itself. Script errors, `WRONGTYPE`, `NOPERM`, bad
//!   credentials and TLS failures are [`ttl_storage::ErrorKind::Permanent`].
//!
//! ## Failover
//!
//! Valkey/Redis replication is **asynchronous**. If the primary fails and a
//! replica is promoted (Sentinel, a cluster failover, a managed service),
//! writes acknowledged by the old primary but not yet replicated are lost:
//! a lease can vanish (another contender may then acquire it while the old
//! leader still believes it leads, until its next renewal fails), and the
//! fencing counter of `elections` can go back. Fencing still protects a
//! resource against every leader whose token is lower than one the resource
//! has seen; what it cannot order is two leaders handed the *same* token by
//! a counter that went back. Run one primary (no automatic failover) or
//! accept that window; see `docs/guarantees.md`.
//!
//! With Sentinel, name the Sentinels and the service
//! (`redis-sentinel://s1:26379,s2:26379,s3:26379/mymaster`): the driver asks
//! them for the primary and reconnects to the promoted replica after a
//! failover (a lost connection is retried after 100, 200, 400, then every
//! 500 ms, asking a Sentinel each time). The opt-in `wait_replicas=N` (`&wait_timeout=1s`) sends
//! `WAIT N timeout` after every applied write on the same connection; a
//! write fewer than `N` replicas acknowledged in time is
//! [`ttl_storage::ErrorKind::OutcomeUnknown`], never success (it is on the
//! primary, and a failover now could lose it). Pair it with the server's
//! `min-replicas-to-write N` / `min-replicas-max-lag`, so a primary cut
//! off from its replicas refuses writes instead of acknowledging them.
//! `WAIT` narrows the window but is not consensus: Sentinel may still
//! promote a replica that missed a write `WAIT` saw acknowledged by
//! another replica, and `WAIT` holds the connection for up to its timeout
//! while a replica is missing.
//!
//! ## Assumptions
//!
//! - One server or one primary (found directly or through Sentinel).
//!   Redis Cluster is not supported by this driver's URL (each operation
//!   touches one key, so nothing else would stop it).
//! - Only this driver writes keys under its prefix. Another type at a key
//!   (a hash, a list) makes operations on it fail with a permanent
//!   `WRONGTYPE` error.
//! - `maxmemory-policy` must not evict keys (`noeviction`, or a `volatile-*`
//!   policy with room to spare): an evicted record is a lost lease.
//!
//! ## Watching (`TtlStorage::watch`)
//!
//! A waiter wakes as soon as the record may be gone, without server
//! configuration: the compare-and-delete script publishes the deleted key
//! on `<prefix>__deleted` in the same script as the `DEL`, and each storage
//! keeps a second connection subscribed to that channel. A watch registers
//! locally, reads the key's `PTTL`, and completes when the key is absent,
//! when its delete is published, or 1 ms after the `PTTL` (expiry is a
//! local timer from the server's remaining TTL). The subscription counts as
//! live only once a probe published by the storage came back through it
//! (checked again every 15 s); while it is not live, `watch` answers
//! [`ttl_storage::WatchUnsupported`] and the caller polls, and losing it
//! wakes every pending watch. The publish is a `pcall`: a user without the
//! right to publish on the channel still deletes (and polls).
//!
//! ## Following writes (`TtlStorage::changes`)
//!
//! The same channel carries every new value: the insert, a swap to other
//! bytes and the counted write publish `key NUL count NUL value` (count
//! empty for the plain writes) in the same script as the write, so the
//! subscriber receives the writes of every storage in the server's order.
//! A renewal (same value) publishes nothing. Followers are armed when the
//! subscription is proven and interrupted while it is down; expiry is not
//! reported (a follower reads or watches for it).
//!
//! ## Fencing
//!
//! [`fence::ValkeyFence`] guards a resource kept in the same server: a
//! write carrying a fencing token lower than one already seen is refused,
//! atomically, in one script.
//!
//! ## Example
//!
//! ```no_run
//! use storage_valkey::ValkeyStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo() -> Result<(), ttl_storage::StorageError> {
//! let storage = ValkeyStorage::from_url("rediss://app:s3cret@cache.internal:6380/0").await?;
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
mod replication;
mod scripts;
mod storage;
mod url;
mod watch;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT, TlsSettings,
    ValkeyConfig, ValkeyConfigBuilder,
};
pub use error::ConfigError;
pub use replication::{
    DEFAULT_SENTINEL_PORT, DEFAULT_WAIT_TIMEOUT, SentinelSettings, WaitReplicas,
};
pub use storage::ValkeyStorage;

/// This driver, for registries such as `storage-url`: the URL is parsed
/// once, and the parsed configuration is what gets opened.
///
/// ```
/// let parsed = (storage_valkey::DRIVER.parse)("rediss://app:pw@cache.internal/2")?;
/// assert_eq!((storage_valkey::DRIVER.endpoint)(&parsed).as_deref(), Some("cache.internal:6379"));
/// # Ok::<(), ttl_storage::BoxError>(())
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<ValkeyConfig>(
    "valkey",
    &[
        "redis",
        "rediss",
        "valkey",
        "valkeys",
        "redis-sentinel",
        "rediss-sentinel",
        "valkey-sentinel",
        "valkeys-sentinel",
    ],
    "redis://[user:password@]host[:port][/db] (Valkey, Redis; rediss:// for TLS); redis-sentinel://host[:port][,host[:port]...]/service[/db] (the primary found through Sentinels); ?wait_replicas=N: a write counts once N replicas have it",
    Some(DEFAULT_PORT),
)
.with_fence::<ValkeyConfig>();
