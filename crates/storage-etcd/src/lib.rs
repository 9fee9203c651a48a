//! # storage-etcd
//!
//! A [`ttl_storage::TtlStorage`] on **etcd** (v3 API, 3.4 or later), with
//! the `etcd-client` crate.
//!
//! ## How it works
//!
//! Each record is one key, `<prefix><key>` (prefix `ttl/` by default). The
//! TTL is an etcd **lease**, **one per TTL for all the records a storage
//! holds** (an [`EtcdStorage`] and its clones), kept alive on demand: a
//! renewal is a keep-alive of that lease and a read, not a write, so a
//! process holding many records costs etcd about one keep-alive per round
//! trip and one read-only transaction per 128 renewals. When the lease
//! expires, etcd deletes its keys. [`ttl_storage::Ttl::NEVER`] writes
//! without a lease.
//!
//! | operation | requests |
//! |---|---|
//! | `insert_if_not_exists` | keep-alive; `IF create_revision(key) = 0 THEN put(key, value, lease)` |
//! | `compare_and_swap` renewal (`old == new`) | keep-alive; a batched read: the record must hold the value on this lease. On another lease (written by another storage): keep-alive, then `IF value = old AND mod_revision <= the read's revision THEN put(key, value, lease)` |
//! | `compare_and_swap` | read; keep-alive; `IF value(key) = old AND mod_revision(key) <= the read's revision THEN put(key, new, lease) ELSE get(key)` |
//! | `compare_and_delete` | `IF value(key) = value THEN delete(key)` |
//! | `get` | a linearizable range read |
//! | `get_entry` (`vvm-host status`) | the same read, then `LeaseTimeToLive` of the key's lease (whole seconds; no lease: never expires) |
//! | `watch` | a read, then an etcd watch of the key from the next revision, delete events only |
//!
//! Keep-alives are coalesced: a caller waits for the one in flight and
//! takes the next one's answer. A record attached to the lease lives at
//! least its TTL after the call that wrote or renewed it started, because
//! it is attached only after a keep-alive sent after that start was
//! answered. It can live longer: a crashed process's records all expire a
//! TTL after its **last** keep-alive, up to one renewal interval (`d/4`
//! for `elections`) after a record's own last renewal. A record the caller
//! stops renewing without deleting it (a release whose delete was lost) is
//! deleted by the storage once no one renewed it for a whole TTL (`IF lease
//! = L AND mod_revision = r THEN delete`), or, when that cannot be done for
//! certain, the lease is retired: a new one is granted, live records move
//! to it at their next renewal (one write each) and the old one lapses. So
//! such a record expires at most two TTLs and a sweep interval (1 s) after
//! its last renewal (measured: 6.1–6.6 s at a 3 s TTL for a record left by
//! a lost answer), and a storage holds one lease per TTL (two while one is
//! retiring). Nothing is
//! revoked: another storage's lease is never touched.
//!
//! **Upgrading** from earlier builds, which granted a lease per write:
//! those revoke the lease of a record they replace, which would now be a
//! whole process's shared lease. Do not run the two
//! versions against the same keys at once (stop the old processes first,
//! or give the new ones another `prefix=`).
//!
//! **Following writes** (`TtlStorage::changes`): an etcd watch of the key
//! reports every put of a new value (with the count, read from the counter
//! at the put's revision when the same transaction advanced it) and every
//! delete, expiry included (the lease deletes the key). A lost stream is
//! watched again from the revision after the last event, so nothing is
//! missed unless etcd compacted that revision (then the follower is
//! interrupted and reads again).
//!
//! ## Guarantees
//!
//! - **Linearizable**: transactions and default reads go through Raft.
//! - **Expiry is judged by the etcd leader's clock** (a monotonic timer
//!   started when the lease is granted, after the call started). Client
//!   clocks never matter. A new leader *restarts* the remaining leases
//!   with their full TTL, so a leader change only lengthens leases. etcd
//!   enforces a minimum TTL of 1.5 election timeouts (rounded up to whole
//!   seconds: 2 s with the default 1 s election timeout), and deletes an
//!   expired lease's keys through Raft, typically within half a second
//!   after expiry.
//! - **A swap applied late never moves the expiry earlier.** A lease's
//!   TTL restarts at its keep-alive, before the transaction is sent; a
//!   delayed transaction (a renewal's first attempt landing after its
//!   retry, two transactions reordered by follower forwarding) would
//!   otherwise attach a lease kept alive before the record it replaces
//!   was written. A swap reads the record first and compares its
//!   `mod_revision` with that read's revision, so it only replaces a record
//!   written before its keep-alive; when the record was rewritten since
//!   with the value it expects (a concurrent same-value swap), it reads
//!   again, at most three times. A renewal of a record already on the
//!   lease writes nothing, so nothing of it can land late.
//! - **Errors** are classified: requests refused before proposal (no
//!   leader, too many requests) are [`ttl_storage::ErrorKind::Transient`];
//!   a write whose answer is lost (deadline exceeded, "request timed out",
//!   connection lost) is [`ttl_storage::ErrorKind::OutcomeUnknown`];
//!   authentication, permission and TLS failures are
//!   [`ttl_storage::ErrorKind::Permanent`].
//! - **TLS** (`etcds://`, rustls) verifies the members' certificates
//!   against a CA file or the system's roots, and never falls back to
//!   plaintext.
//!
//! - **Watch** ([`ttl_storage::TtlStorage::watch`]) is supported: it
//!   completes on the key's delete event (a release, or its lease
//!   expiring), so a standby takes over at once after a release instead of
//!   at its next poll. It completes at once when the key is empty, and after
//!   200 ms on an error (a spurious wake-up; callers read again).
//!
//! ## Failover
//!
//! Raft replicates synchronously to a quorum: a new leader has every
//! acknowledged write, so leases and fencing counters survive member
//! failures as long as a quorum does. List every member in the URL
//! (`etcd://m1:2379?endpoint=m2:2379&endpoint=m3:2379`): a request the
//! client's balancer routed to a member that is down fails before it is
//! sent ("tcp connect error"), and the driver sends it again (it never
//! left, so writes too), up to 8 times, so one dead member costs a
//! failed connection attempt, not an error.
//!
//! ## Fencing
//!
//! [`fence::EtcdFence`] guards a resource kept in etcd with the leader's
//! fencing token: one transaction that refuses a token lower than the
//! highest seen, for a plain write or an append to a log.
//!
//! ## Example
//!
//! ```no_run
//! use storage_etcd::EtcdStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo() -> Result<(), ttl_storage::StorageError> {
//! let storage = EtcdStorage::from_url("etcd://10.0.0.1:2379?endpoint=10.0.0.2:2379").await?;
//! let key = Key::new("vvm/leader/1")?;
//! if storage.insert_if_not_exists(&key, b"node-7", Ttl::from_secs(20)?).await? {
//!     // we lead for 20 s unless we renew:
//!     storage.compare_and_swap(&key, b"node-7", b"node-7", Ttl::from_secs(20)?).await?;
//! }
//! # Ok(()) }
//! ```

mod changes;
mod config;
mod driver;
mod error;
pub mod fence;
mod lease;
mod reads;
mod storage;
mod unsent;
mod url;
mod watch;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT, EtcdConfig,
    EtcdConfigBuilder,
};
pub use error::ConfigError;
pub use storage::EtcdStorage;

/// This driver, for registries such as `storage-url`: the URL is parsed
/// once, and the parsed configuration is what gets opened.
///
/// ```
/// let parsed = (storage_etcd::DRIVER.parse)("etcd://m1:2379")?;
/// assert_eq!((storage_etcd::DRIVER.endpoint)(&parsed).as_deref(), Some("m1:2379"));
/// # Ok::<(), ttl_storage::BoxError>(())
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<EtcdConfig>(
    "etcd",
    &["etcd", "etcds"],
    "etcd://host[:port][?endpoint=host:port...] (etcd v3, every member in endpoint=; etcds:// for TLS)",
    Some(DEFAULT_PORT),
).with_fence::<EtcdConfig>();
