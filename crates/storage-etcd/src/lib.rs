//! # storage-etcd
//!
//! A [`ttl_storage::TtlStorage`] on **etcd** (v3 API, 3.4 or later), with
//! the `etcd-client` crate.
//!
//! ## How it works
//!
//! Each record is one key, `<prefix><key>` (prefix `ttl/` by default). The
//! TTL is an etcd **lease**: every expiring write grants a fresh lease of
//! the TTL and attaches the key to it; when the lease expires, etcd deletes
//! the key. [`ttl_storage::Ttl::NEVER`] writes without a lease. Every
//! write is one transaction:
//!
//! | operation | transaction |
//! |---|---|
//! | `insert_if_not_exists` | `IF create_revision(key) = 0 THEN put(key, value, lease)` |
//! | `compare_and_swap` | `IF value(key) = old AND mod_revision(key) <= grant revision THEN put(key, new, new lease) ELSE get(key)` |
//! | `compare_and_delete` | `IF value(key) = value THEN delete(key)` |
//! | `get` | a linearizable range read |
//! | `get_entry` (`vvm-host status`) | the same read, then `LeaseTimeToLive` of the key's lease (whole seconds; no lease: never expires) |
//! | `watch` | a read, then an etcd watch of the key from the next revision, delete events only |
//!
//! The lease a write replaced (or a lease granted for a write that did not
//! apply) is revoked in the background; one that is not expires by itself.
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
//!   TTL starts at its grant, before the transaction is sent; a delayed
//!   transaction (a renewal's first attempt landing after its retry, two
//!   transactions reordered by follower forwarding) would otherwise attach
//!   a lease older than the record it replaces. The swap compares the
//!   key's `mod_revision` with the revision in its grant's answer, so it
//!   only replaces a record written before its lease started; when the
//!   record was rewritten since with the value it expects (a concurrent
//!   same-value swap), it grants again, at most three times.
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

mod config;
mod driver;
mod error;
pub mod fence;
mod storage;
mod unsent;
mod url;

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
);

/// This driver's fence, opened from a URL [`DRIVER`] parsed (see
/// [`::fence::FenceDriver`]; [`fence::open`] does the work).
pub const FENCE: ::fence::FenceDriver = ::fence::FenceDriver::new::<EtcdConfig>();
