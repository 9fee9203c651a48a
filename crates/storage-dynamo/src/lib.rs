//! # storage-dynamo
//!
//! A [`ttl_storage::TtlStorage`] driver on Amazon DynamoDB (and DynamoDB
//! Local), so a cluster's leadership can live in a table it already has.
//!
//! ```no_run
//! use storage_dynamo::{DynamoConfig, DynamoStorage};
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config: DynamoConfig =
//!     "dynamodb://leases?region=eu-west-1&endpoint=http://127.0.0.1:8000&create_table=true"
//!         .parse()?;
//! let storage = DynamoStorage::connect(config).await?;
//! let key = Key::new("leader/cluster-1")?;
//! if storage
//!     .insert_if_not_exists(&key, b"node-7", Ttl::from_secs(20)?)
//!     .await?
//! {
//!     // we lead for 20 s unless we renew
//!     storage
//!         .compare_and_swap(&key, b"node-7", b"node-7", Ttl::from_secs(20)?)
//!         .await?;
//! }
//! # Ok(()) }
//! ```
//!
//! ## Guarantees
//!
//! - **Every write is one atomic conditional request**; nothing is read
//!   and then written (two racers could both win that way):
//!
//!   | operation | request | condition |
//!   |---|---|---|
//!   | `insert_if_not_exists` | `PutItem` | `attribute_not_exists(pk) OR exp_ms <= now` |
//!   | `compare_and_swap` | `PutItem` (whole new item) | `val = :old AND (attribute_not_exists(exp_ms) OR exp_ms > now)`, and for an expiring new record `AND (attribute_not_exists(at_ms) OR at_ms <= now OR exp_ms <= :new_exp)` |
//!   | `compare_and_delete` | `DeleteItem` | `val = :old AND (attribute_not_exists(exp_ms) OR exp_ms > now)` |
//!   | `get` | `GetItem`, `ConsistentRead` | expired records filtered on read |
//!
//!   DynamoDB applies conditional writes on one item atomically and in
//!   order, and strongly consistent reads see every acknowledged write, so
//!   the four operations are linearizable.
//! - **A swap applied late never moves the expiry earlier.** Its expiry is
//!   its writer's `now + TTL`, read before sending; one that lands after a
//!   later-anchored write (`at_ms`, the writer's clock reading, is stored
//!   with every record) and would shorten it is refused. A renewal refused
//!   that way answers `true` (the record already lives longer, nothing is
//!   written, from the condition's `ALL_OLD` item); a swap to another value
//!   is `Transient`, retried with a fresh clock reading. In observed-lease
//!   mode a late write is a new version, which every observer counts a
//!   full lease from when it sees it: later, never earlier.
//! - **Expired records are invisible** to every operation: a failed
//!   condition (`ConditionalCheckFailedException`) is `Ok(false)`, and
//!   `compare_and_delete` of an expired record returns `false` and leaves it
//!   for the next insert to overwrite (or for DynamoDB's reaper).
//!   DynamoDB's own TTL deletion is lazy (it may take days) and is used only
//!   as garbage collection, on the attribute `expires_at` (seconds).
//! - **Values** are Binary attributes; empty values round-trip (DynamoDB
//!   allows empty binary values in non-key attributes). Records written
//!   with [`ttl_storage::Ttl::NEVER`] carry no expiry attribute at all.
//! - **Errors**: a failed condition is `Ok(false)`; throttling, `503
//!   ServiceUnavailable`, any `5xx` on a read, and failures before a
//!   connection was made (refused, DNS, connect timeout) are
//!   [`Transient`](ttl_storage::ErrorKind::Transient) and are retried
//!   here up to [`DynamoConfig::max_attempts`] times; on a conditional
//!   write, timeouts, broken connections, unreadable responses and the other
//!   `5xx` (DynamoDB documents that a `500 InternalServerError` may or may
//!   not have been applied) are
//!   [`OutcomeUnknown`](ttl_storage::ErrorKind::OutcomeUnknown);
//!   validation, authentication and missing-table errors are
//!   [`Permanent`](ttl_storage::ErrorKind::Permanent). The SDK's own retries
//!   are disabled: it would retry a timed-out conditional write, and the retry
//!   would fail its condition against our own first write and report `false`.
//!
//! ## The clock assumption
//!
//! DynamoDB has no server-side "now" usable in conditions, so expiry
//! compares **wall clocks of the clients**: a write stores
//! `exp_ms = writer's clock (ms since the epoch, read just before sending) + TTL`,
//! and every condition and read compares `exp_ms` with the caller's own
//! wall clock. If a contender's clock runs `δ` ahead of the holder's, it
//! sees the holder's lease expire `δ` early. With the elections' schedule
//! (the holder stops its services 0.8 × TTL after the start of its last
//! successful renewal), a takeover stays safe only while
//! **`δ` + the holder's stop time < 0.2 × TTL** for every pair of nodes:
//! with a 20 s TTL, skew must stay well under 4 s. NTP-synchronised hosts
//! (skew in milliseconds) are far inside that; hosts without time
//! synchronisation are not supported. A clock running behind only delays
//! takeovers. DynamoDB's TTL reaper uses AWS's clock, with the same bound
//! (it deletes nothing before `expires_at`, and in practice much later).
//!
//! ## Clock-skew-independent mode
//!
//! [`ExpiryMode::ObservedLease`] (`expiry=observed_lease` in the URL) drops
//! the wall-clock assumption, the way Amazon's DynamoDB Lock Client does:
//! every write stores a fresh random version nonce (`ver`) and the lease
//! length (`lease_ms`) instead of an expiry instant. An instance that reads
//! a record notes, on its own monotonic clock, when the answer showing that
//! version arrived (necessarily after the write was applied); once it has
//! seen the same version for a full lease, the record is expired *for that
//! instance*, and it takes over with a `PutItem` conditioned on
//! `ver = <the version it watched>`, so a renewal that lands first makes the
//! takeover fail. Only clock rates matter, not offsets. The trade-offs:
//! expiry is per observer (an instance that first looks at a record late
//! waits a full lease from that first look, so a takeover can take up to
//! twice the TTL after the holder's last renewal, and two instances may
//! disagree about an expiring record in `get`); an insert that finds a live
//! record costs a second request (the read that starts the watch); and all
//! clients of one table must use the same mode. Wall-clock mode is the
//! default and the one the shared test suite checks.
//!
//! ## Table
//!
//! One item per key: `pk` (S, the partition key), `val` (B), `at_ms` (N,
//! the writer's clock), and for expiring records `exp_ms` (N) and
//! `expires_at` (N) (observed-lease mode, no `at_ms`:
//! `ver` (S), and `lease_ms` (N) plus `expires_at` one day after the lease
//! for expiring records). With
//! `create_table=true`, [`DynamoStorage::connect`] creates a missing table
//! with on-demand billing and enables TTL on `expires_at`; an existing
//! table must have the single HASH key `pk` of type S, or connecting fails
//! with [`ConnectError::WrongSchema`].
//!
//! ## Credentials and region
//!
//! From the configuration when given, else from the usual AWS chain
//! (environment, shared config and credentials files, web identity,
//! `credential_process`, ECS and EC2 instance metadata; SSO profiles with
//! the `sso` feature). DynamoDB Local accepts any credentials, but its access
//! key id must be alphanumeric.

mod classify;
mod config;
mod driver;
mod error;
pub mod fence;
mod item;
mod observed;
mod storage;
mod table;
mod url;
mod wall_clock;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_ATTEMPTS, DEFAULT_REQUEST_TIMEOUT, DynamoConfig,
    DynamoConfigBuilder, ExpiryMode, StaticCredentials,
};
pub use error::ConfigError;
pub use storage::DynamoStorage;
pub use table::ConnectError;

/// This driver, for registries such as `storage-url`: the URL is parsed
/// once, and the parsed configuration is what gets opened.
///
/// ```
/// let parsed = (storage_dynamo::DRIVER.parse)("dynamodb://leases?region=eu-west-1&endpoint=http://127.0.0.1:8000")?;
/// assert_eq!((storage_dynamo::DRIVER.endpoint)(&parsed).as_deref(), Some("127.0.0.1:8000"));
/// # Ok::<(), ttl_storage::BoxError>(())
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<DynamoConfig>(
    "dynamodb",
    &["dynamodb"],
    "dynamodb://TABLE?region=R[&endpoint=URL] (DynamoDB)",
    None,
);

/// This driver's fence, opened from a URL [`DRIVER`] parsed (see
/// [`::fence::FenceDriver`]; [`fence::open`] does the work).
pub const FENCE: ::fence::FenceDriver = ::fence::FenceDriver::new::<DynamoConfig>();
