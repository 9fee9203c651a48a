//! # storage-redb
//!
//! The embedded, durable default driver of the [`ttl_storage`] contract: a
//! [`TtlStorage`](ttl_storage::TtlStorage) kept in one [redb](https://www.redb.org)
//! file. It plays the role bbolt plays in the original design.
//!
//! Two handles over the same file format:
//!
//! | type | who uses the file | cost of a durable write | watch |
//! |---|---|---|---|
//! | [`RedbStorage`] | one process owns it (a second opener is refused) | one fsync, shared by a group commit | no |
//! | [`SharedRedbStorage`] | **any number of processes on one host** at once | redb's multi-writer commit (two-phase, several fsyncs): about 5–15x more | yes (inotify) |
//!
//! Pick [`SharedRedbStorage`] whenever more than one process may elect over
//! the file (several `vvm-host`s on one machine); [`RedbStorage`] when one
//! process owns it and write latency matters. Both modes must not be mixed
//! on one file at the same time: each refuses a file the other holds, with
//! [`OpenError::AlreadyOpen`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use storage_redb::RedbStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! let dir = tempfile::tempdir()?;
//! let storage = RedbStorage::open(dir.path().join("leases.redb")).await?;
//!
//! let key = Key::new("leader/1")?;
//! let ttl = Ttl::from_secs(20)?;
//! assert!(storage.insert_if_not_exists(&key, b"10.0.0.7", ttl).await?);
//! assert!(!storage.insert_if_not_exists(&key, b"10.0.0.8", ttl).await?);
//! assert!(storage.compare_and_swap(&key, b"10.0.0.7", b"10.0.0.7", ttl).await?);
//! assert_eq!(storage.get(&key).await?, Some(b"10.0.0.7".to_vec()));
//! assert!(storage.compare_and_delete(&key, b"10.0.0.7").await?);
//!
//! // Releases the file at once; dropping the last clone releases it shortly
//! // after, from a blocking thread.
//! storage.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - **Atomic conditional writes.** Each write reads the record and writes it
//!   in one redb write transaction, and redb runs one write transaction at a
//!   time, so of racing `insert_if_not_exists` on an absent key exactly one
//!   wins. (The original bbolt driver checked and wrote in two transactions.)
//! - **Durability.** A write that returns `Ok(true)` was committed with
//!   [`redb::Durability::Immediate`] (fsync) before the call returned; it
//!   survives a crash of the process or of the machine. Concurrent writes are
//!   *group-committed*: queued writes are applied in order in one transaction
//!   and share one fsync, and none is answered before that commit. A write
//!   that changes nothing (`Ok(false)`) is answered without a commit.
//! - **Reads** use a read transaction on the latest commit, so they see every
//!   acknowledged write and never block writers.
//! - **Errors.** A failed commit is [`ErrorKind::OutcomeUnknown`](ttl_storage::ErrorKind)
//!   (the write may or may not be on disk). Other I/O errors that may clear
//!   (interrupted, timed out, disk full) are transient and leave nothing
//!   applied; corruption, permission and other I/O errors are permanent. After
//!   a failed write redb refuses further writes until the file is reopened.
//! - **Single-process ownership** ([`RedbStorage`]). One [`RedbStorage`]
//!   (and its clones) owns the file: redb locks it, and a second open, from
//!   another process or this one, fails at once with
//!   [`OpenError::AlreadyOpen`] naming the file. Share the handle between
//!   tasks by cloning it; share the file between processes with
//!   [`SharedRedbStorage`] (see [Shared mode](#shared-mode)).
//! - **The store's identity is part of every operation.** A handle keeps
//!   the device and inode of the file it opened; every read and every write
//!   batch first checks (one `stat`) that the path still names that file.
//!   Once the file is deleted, renamed away or replaced (`rm`, `mv`, a backup
//!   restored with `cp` + `mv`), a process that opens the path elects over
//!   another store, so this handle's operations fail with a permanent error
//!   naming the file: the store is lost (a leader on it stops, as on any
//!   store that fails) and the handle must be reopened.
//! - **Bad files are reported, never replaced.** A missing file is created; an
//!   empty one is initialised; a file that is not a redb database
//!   ([`OpenError::NotRedb`]), a corrupt one ([`OpenError::Corrupted`], every
//!   page checksum is verified on open by default) or a redb database of
//!   another program ([`OpenError::ForeignDatabase`]) is left untouched.
//!   A missing parent directory is created (or reported, see
//!   [`RedbStorageBuilder::create_parent_dirs`]).
//!
//! # Expiry and clocks
//!
//! Each record stores its absolute expiry in Unix milliseconds of the **wall
//! clock** (`SystemTime`), computed when the write transaction applying it
//! starts (after the call began, a few milliseconds before the commit that
//! makes it visible). A record is live while `now < expiry`; expired records
//! are invisible to every operation from that millisecond on. They are
//! reclaimed when a write touches their key, and by a background sweep that
//! deletes at most [`sweep_limit`](RedbStorageBuilder::sweep_limit) records
//! per pass every [`sweep_interval`](RedbStorageBuilder::sweep_interval),
//! oldest expiry first, through an expiry index, so the file does not grow
//! under churn. [`RedbStorage::sweep_now`] runs a pass on demand.
//!
//! The wall clock is used, not a monotonic one, so that expiries mean the same
//! thing after a restart. Consequences:
//!
//! - **Restart.** Records keep their absolute expiry: a lease written before a
//!   crash or a restart is still held until its expiry, then expires (the
//!   sweep or the next write reclaims it).
//! - **Wall-clock jumps.** A backward jump of `d` extends every live lease by
//!   `d`; a forward jump shortens them by `d` (possibly expiring them at
//!   once). Elections assume the clock moves at real-time rate and does not
//!   jump by more than a small fraction of the TTL (keep NTP slewing, not
//!   stepping, on hosts that use this driver); a forward jump can let a second
//!   candidate take a lease its holder still believes it holds, which is what
//!   fencing tokens in `elections` guard against.
//! - There is only one clock: the file is used by processes of one machine,
//!   which all read the same wall clock.
//!
//! # Shared mode
//!
//! [`SharedRedbStorage`] lets several processes of one host elect over one
//! file (the default storage of `vvm-host`, so that two or three of them on
//! one machine fail over to each other):
//!
//! - **How.** Every process opens the file in redb's multi-writer mode
//!   ([`redb::ConcurrencyMode::MultiWriter`], redb ≥ 4.5): redb serialises
//!   the write transactions of all processes with OS byte-range locks on the
//!   file, and readers see every commit. Each conditional write still reads
//!   and writes its record in one write transaction, so the contract's
//!   atomicity holds across processes (tested with racing processes). Opens
//!   take turns under an exclusive `flock` of `<path>.events`, so no process
//!   sees another's half-created file.
//! - **Durability.** A write returns `Ok(true)` only after its commit is
//!   durable (two-phase commit, fsync); SIGKILL of any process mid-write
//!   loses no acknowledged write, and the other processes go on (tested with
//!   several writer processes killed at random moments).
//! - **Expiry** is judged, as in [`RedbStorage`], by the wall-clock expiry
//!   stored in each record: every process on the host reads the same clock,
//!   so they agree on it (up to their reading of the clock a few
//!   milliseconds apart). Each write batch also deletes up to
//!   [`sweep_limit`](SharedRedbStorageBuilder::sweep_limit) expired records
//!   in its transaction; there is no background sweep.
//! - **File systems.** Byte-range and `flock` locks are reliable on local
//!   file systems only. On NFS, SMB/CIFS, 9P, CephFS, FUSE and the like
//!   (detected with `statfs`) the open fails with
//!   [`OpenError::UnreliableLocks`], naming the file and the file system,
//!   unless [`allow_unreliable_locks`](SharedRedbStorageBuilder::allow_unreliable_locks)
//!   is set. Processes of one user share the data directory as is; processes
//!   of several users need group read-write permission on the file and on
//!   `<path>.events`.
//! - **Watch.** [`TtlStorage::watch`](ttl_storage::TtlStorage::watch) is
//!   supported on Linux: a committed delete writes to `<path>.events`, every
//!   process watches that file with inotify and wakes its waiters; a timer
//!   at the record's stored expiry covers expiry. A graceful release thus
//!   wakes standbys in other processes at once.
//! - **Cost.** Every durable commit of the multi-writer mode takes several
//!   fsyncs (see `cargo bench -p storage-redb --bench renew` and the
//!   crate's README for figures): milliseconds, against a fraction of a
//!   millisecond for [`RedbStorage`]. An election writes once per TTL/4, so
//!   either is far below the load it needs.

mod driver;
mod error;
mod exclusive;
mod file_options;
mod fs_check;
mod handle;
mod identity;
mod open_checks;
mod ops;
mod record;
mod schema;
mod shared;
mod url;
mod watch;
mod writer;

pub use error::{CloseError, ConfigError, OpenError};
pub use exclusive::{RedbStorage, RedbStorageBuilder};
pub use shared::{SharedRedbStorage, SharedRedbStorageBuilder};
pub use url::{RedbConfig, RedbMode};

/// This driver, for registries such as `storage-url`:
/// `redb:///path/file.redb[?mode=shared|exclusive]`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttl_storage::BoxError> {
/// let dir = tempfile::tempdir()?;
/// let url = format!("redb://{}/leases.redb?mode=exclusive", dir.path().display());
/// let parsed = (storage_redb::DRIVER.parse)(&url)?;
/// let storage = (storage_redb::DRIVER.open)(&parsed).await?;
/// # drop(storage);
/// # Ok(()) }
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<RedbConfig>(
    "redb",
    &["redb"],
    "redb:///path/file.redb[?mode=exclusive] (an embedded file, shared by the processes of one host; exclusive: one process, faster)",
    None,
);
