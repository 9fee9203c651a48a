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
//! | Cassandra / ScyllaDB | `storage_cassandra::fence::CassandraFence` | lightweight transaction `UPDATE … IF fence <= ?` (Paxos, SERIAL) |
//! | DynamoDB | `storage_dynamodb::fence::DynamoDbFence` | `UpdateItem` with `ConditionExpression: attribute_not_exists(fence) OR fence <= :t` |
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

mod mem;
mod names;
#[cfg(feature = "suite")]
pub mod suite;

pub use mem::MemFence;
pub use names::{FenceKeys, check_name, signed_token};
/// What every [`Fence`] method returns: [`ttl_storage::Result`], the same
/// alias (and error type) as the storage operations.
pub use ttl_storage::Result;
/// The contract itself lives in `ttl-storage` (so that a driver's
/// [`ttl_storage::Driver`] descriptor can open its fence); this crate is
/// its home for everything else and re-exports it.
pub use ttl_storage::fence::{
    AppendOutcome, DynFence, Fence, FenceOutcome, Fenced, LogEntry, Numbering, OpenOptions,
};
/// What a driver's configuration provides to open its fence (see
/// [`ttl_storage::Driver::with_fence`]).
pub use ttl_storage::{FenceConfig, OpenFenceFuture};
