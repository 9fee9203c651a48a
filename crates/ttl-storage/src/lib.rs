//! # ttl-storage
//!
//! The storage contract that leader election is built on: four conditional,
//! TTL-aware operations on a key-value store.
//!
//! | operation | meaning |
//! |---|---|
//! | [`TtlStorage::insert_if_not_exists`] | write `value` under `key` unless a live record exists |
//! | [`TtlStorage::compare_and_swap`] | replace `old` by `new` and restart the TTL, only if the live record holds `old` |
//! | [`TtlStorage::compare_and_delete`] | delete the record, only if the live record holds `value` |
//! | [`TtlStorage::get`] | read the live record |
//! | [`TtlStorage::watch`] | optional: be woken when a record may have gone (deleted or expired) instead of polling |
//! | [`TtlStorage::write_counted`] | optional: a conditional write and a counter's advance as one durable write |
//!
//! [`Instrumented`] wraps any driver to record metrics (the `metrics`
//! facade) and a tracing span for every operation.
//!
//! Every driver (in-memory, redb, Cassandra/ScyllaDB, DynamoDB, ...) implements
//! [`TtlStorage`] and proves it with the shared `elections-testsuite`.
//!
//! Each driver crate declares itself once as `pub const DRIVER:`
//! [`Driver`] (see [`driver`]); the `storage-url` crate is the list of them.
//! The fencing contract ([`fence::Fence`]) is here too, so that a
//! descriptor can open its driver's fence; the `fence` crate re-exports it.
//!
//! Inputs are validated at the boundary: keys are [`Key`]s, TTLs are [`Ttl`]s,
//! and values pass [`check_value`]. All failures are one [`StorageError`] whose
//! [`kind`](StorageError::kind) tells the caller what it may do next:
//! retry ([`ErrorKind::Transient`]), give up ([`ErrorKind::Permanent`]) or
//! find out what happened ([`ErrorKind::OutcomeUnknown`]).
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo(storage: Arc<dyn TtlStorage>) -> Result<(), ttl_storage::StorageError> {
//! let key = Key::new("leader/1")?;
//! let ttl = Ttl::from_secs(20)?;
//! if storage.insert_if_not_exists(&key, b"10.0.0.7", ttl).await? {
//!     // we hold the record for 20 s unless we renew it
//!     storage.compare_and_swap(&key, b"10.0.0.7", b"10.0.0.7", ttl).await?;
//! }
//! # Ok(()) }
//! ```

pub mod changes;
pub mod counted;
pub mod driver;
mod entry;
mod error;
pub mod fence;
pub mod instrumented;
mod key;
#[cfg(feature = "kit")]
pub mod kit;
mod storage;
mod ttl;
mod value;
pub mod waiters;
mod watch;

pub use changes::{Change, Changes, ChangesUnsupported};
pub use counted::{Counted, CountedWrite};
pub use driver::{
    Driver, DriverConfig, FenceConfig, NoStore, OpenFenceFuture, OpenFuture, ParsedUrl, WrongDriver,
};
pub use entry::{Entry, TimeLeft};
pub use error::{BoxError, ErrorKind, StorageError, ValidationError};
pub use instrumented::Instrumented;
pub use key::{Key, MAX_KEY_LEN};
pub use storage::{DynTtlStorage, TtlStorage};
pub use ttl::{MAX_TTL, Ttl};
pub use value::{MAX_VALUE_LEN, check_value};
pub use watch::{Watch, WatchUnsupported};

/// Result alias for storage operations.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
