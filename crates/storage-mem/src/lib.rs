//! # storage-mem
//!
//! A concurrent, in-memory [`TtlStorage`](ttl_storage::TtlStorage) driver. Useful for tests, for
//! single-process programs, and as the reference implementation of the
//! contract: every other driver must behave exactly like it.
//!
//! - **Atomicity**: each operation runs under one short lock, so conditional
//!   writes are linearizable.
//! - **Time**: expiry uses [`tokio::time::Instant`], so tests that pause and
//!   advance tokio's clock (`#[tokio::test(start_paused = true)]`) control
//!   expiry exactly. Expiry is exact (no granularity): a record written with
//!   TTL `t` at instant `a` is live for `now < a + t` and gone at `a + t`.
//! - **Expired records** are invisible to every operation and are reclaimed
//!   on touch, plus a full sweep once the map has grown by half since the
//!   last one, so memory stays bounded by the live records.
//! - **Watch** ([`TtlStorage::watch`](ttl_storage::TtlStorage::watch)) is supported: the future completes
//!   when a record is deleted (any delete wakes every waiter: spurious wake-ups
//!   are allowed), at the record's expiry on tokio's clock, or at once when
//!   the key holds no live record.
//! - Nothing survives the process; clones share one map.
//!
//! ```
//! use storage_mem::MemStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), ttl_storage::StorageError> {
//! let storage = MemStorage::new();
//! let key = Key::new("leader")?;
//! assert!(storage.insert_if_not_exists(&key, b"me", Ttl::from_secs(5)?).await?);
//! assert!(!storage.insert_if_not_exists(&key, b"you", Ttl::from_secs(5)?).await?);
//! assert_eq!(storage.get(&key).await?, Some(b"me".to_vec()));
//! # Ok(()) }
//! ```
//!
//! ## Options and URL
//!
//! [`MemConfig`] caps the number of records (off by default), so a
//! process that stores keys it does not choose cannot grow without bound;
//! the registry crate `storage-url` opens it from `mem` or
//! `mem://?max_records=N` through [`MemConfig::from_url`].
//!
//! ```
//! use storage_mem::{MemConfig, MemStorage};
//! use ttl_storage::{ErrorKind, Key, Ttl, TtlStorage};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let storage = MemStorage::with_config(MemConfig::from_url("mem://?max_records=1")?);
//! let ttl = Ttl::from_secs(5)?;
//! assert!(storage.insert_if_not_exists(&Key::new("a")?, b"1", ttl).await?);
//! let full = storage.insert_if_not_exists(&Key::new("b")?, b"2", ttl).await.unwrap_err();
//! assert_eq!(full.kind(), ErrorKind::Permanent);
//! # Ok(()) }
//! ```

mod config;
mod driver;
mod error;
mod storage;
mod url;

pub use config::MemConfig;
pub use error::ConfigError;
pub use storage::MemStorage;

/// This driver, for registries such as `storage-url`: `mem` and
/// `mem://?max_records=N`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttl_storage::BoxError> {
/// let parsed = (storage_mem::DRIVER.parse)("mem://?max_records=10")?;
/// let storage = (storage_mem::DRIVER.open)(&parsed).await?;
/// # let _ = storage;
/// # Ok(()) }
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<MemConfig>(
    "mem",
    &["mem"],
    "mem[://?max_records=N] (this process only)",
    None,
);
