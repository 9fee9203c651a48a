//! # fence
//!
//! A fencing token protects a resource only if the resource checks it.
//! This crate is the **contract** of that check, the same for every
//! database a driver talks to: the [`Fence`] trait, its outcome types, and
//! the behaviour suite (`fence::suite!`, feature `suite`) each
//! implementation runs against its real engine. The implementations live
//! beside their drivers
//! (`storage_x::fence`), and programs open one from a storage URL with
//! `storage_url::open_fence`.
//!
//! Every leader gets a token that grows with each new leadership
//! (`elections::Leadership::fencing_token`, or `VVM_HOST_FENCING_TOKEN`
//! under `vvm-host`). A **guarded write** carries it and is applied only if
//! the token is at least the highest token the resource has seen, the
//! comparison and the write being one atomic step of the database (never a
//! read followed by a write). A deposed leader that wakes from a pause and
//! writes with its old token is refused, whatever the timing.
//!
//! Each resource (a name) has a *fenced register* — the highest token seen
//! and the value written with it ([`Fence::write`], [`Fence::read`]) — and
//! a *fenced log* sharing the same highest token: [`Fence::append`] checks
//! and raises the token and numbers the entry in accept order, and
//! [`Fence::log`] reads the entries back in that order. No stale leader's
//! entry can follow a newer leader's.
//!
//! | driver | type | atomic check |
//! |---|---|---|
//! | Cassandra / ScyllaDB | `storage_scylla::fence::CassandraFence` | lightweight transaction `UPDATE … IF fence <= ?` (Paxos, SERIAL) |
//! | DynamoDB | `storage_dynamo::fence::DynamoFence` | `UpdateItem` with `ConditionExpression: attribute_not_exists(fence) OR fence <= :t` |
//! | Valkey / Redis | `storage_valkey::fence::ValkeyFence` | one Lua script |
//! | PostgreSQL | `storage_postgres::fence::PostgresFence` | `INSERT … ON CONFLICT … WHERE token <= $2`, in a transaction |
//! | etcd | `storage_etcd::fence::EtcdFence` | one transaction comparing the stored token |
//!
//! ```
//! use fence::{AppendOutcome, Fence, FenceOutcome, MemFence};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ttl_storage::StorageError> {
//! // Any driver's fence; `MemFence` keeps its registers in this process.
//! let fence: &dyn Fence = &MemFence::default();
//! assert_eq!(fence.write("report", 7, b"done").await?, FenceOutcome::Accepted);
//! // A deposed leader (token 6) is refused and learns the newer token.
//! assert_eq!(
//!     fence.write("report", 6, b"stale").await?,
//!     FenceOutcome::Rejected { highest: 7 }
//! );
//! assert!(matches!(fence.append("report", 7, b"sent").await?, AppendOutcome::Appended { .. }));
//! assert_eq!(fence.read("report").await?.map(|r| r.value), Some(b"done".to_vec()));
//! # Ok(()) }
//! ```
//!
//! ## Errors
//!
//! Every method returns [`ttl_storage::StorageError`], classified as the
//! drivers classify their own operations: after an error of kind
//! [`ErrorKind::OutcomeUnknown`](ttl_storage::ErrorKind::OutcomeUnknown) a
//! write or append may have been applied (read the register or the log,
//! or repeat the write with the same token: an equal token is accepted);
//! [`Transient`](ttl_storage::ErrorKind::Transient) and
//! [`Permanent`](ttl_storage::ErrorKind::Permanent) errors changed nothing.
//! A token the engine cannot store (above `i64::MAX` for the engines that
//! store a signed 64-bit integer) is a permanent error, never truncated.

mod driver;
mod mem;
mod names;
mod options;
mod outcome;
#[cfg(feature = "suite")]
pub mod suite;

use std::{fmt, sync::Arc};

use async_trait::async_trait;

pub use driver::{FenceConfig, FenceDriver, OpenFenceFuture};
pub use mem::MemFence;
pub use names::{check_name, signed_token};
pub use options::OpenOptions;
pub use outcome::{AppendOutcome, FenceOutcome, Fenced, LogEntry, Numbering};
/// What every [`Fence`] method returns: [`ttl_storage::Result`], the same
/// alias (and error type) as the storage operations.
pub use ttl_storage::Result;

/// Fenced registers and logs of one database: the one contract every
/// driver's fence implements.
///
/// Object safe (through `async_trait`, as [`ttl_storage::TtlStorage`]):
/// programs hold a [`DynFence`] and never name a driver.
#[async_trait]
pub trait Fence: Send + Sync + fmt::Debug {
    /// Guarded write: writes `value` as `resource`'s register value if
    /// `token` is at least the highest token the resource has seen (equal
    /// tokens are accepted), and records `token`; or changes nothing and
    /// returns the higher token. One atomic step of the database.
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome>;

    /// The register of `resource` (the highest token seen and the value the
    /// last accepted write carried), or `None` if nothing was ever written
    /// or appended. The value is empty when only appends raised the token.
    async fn read(&self, resource: &str) -> Result<Option<Fenced>>;

    /// Fenced append: appends `value` to `resource`'s log if `token` is at
    /// least the highest token the resource has seen (the same token as
    /// [`write`](Self::write)'s), records `token` and returns the entry's
    /// sequence number (see [`numbering`](Self::numbering)); or appends
    /// nothing and returns the higher token.
    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome>;

    /// `resource`'s log, in accept order (empty if never appended to).
    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>>;

    /// How this fence numbers the entries of a log.
    fn numbering(&self) -> Numbering;
}

/// A shared fence of any driver, as `storage_url::open_fence` returns it.
pub type DynFence = Arc<dyn Fence>;
