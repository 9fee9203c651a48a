//! # elections
//!
//! Leader election over any [`ttl_storage::TtlStorage`]: the Rust version of
//! the design's `IElections`, with fencing tokens and a few safety fixes.
//!
//! [`Elections::lead`] is the entry point: it waits until this process
//! leads, runs the work, and ends in the only safe order (on a loss the work
//! is cancelled and waited for, bounded by the killer deadline, before the
//! lease is released). Typed [`EndReason`]s say why a leadership ended.
//!
//! ```
//! use std::time::Duration;
//! use elections::{Elections, LeadError, RecordingKiller};
//! use storage_mem::MemStorage;
//! use ttl_storage::Key;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let storage = MemStorage::new();
//! // Production code uses Elections::new, whose killer exits the process.
//! let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
//! let key = Key::new("cron-leader")?;
//!
//! let result = elections
//!     .lead(&key, "10.0.0.7:pid-4242", Duration::from_secs(20), |leader| async move {
//!         println!("leading with fencing token {}", leader.fencing_token());
//!         // The work: here one run, stopped early if leadership ends.
//!         tokio::select! {
//!             () = tokio::time::sleep(Duration::from_secs(30)) => "done",
//!             _ = leader.cancelled() => "interrupted",
//!         }
//!     })
//!     .await;
//! match result {
//!     Ok(outcome) => assert_eq!(outcome, "done"),
//!     Err(LeadError::Ended { reason, .. }) => println!("leadership ended first: {reason}"),
//!     Err(err) => return Err(err.into()),
//! }
//! // Released once the work returned: the next contender gets in at once.
//! let other = Elections::with_killer(storage, RecordingKiller::new());
//! assert!(other.acquire_leadership(&key, "10.0.0.8", Duration::from_secs(20)).await?.is_some());
//! # other.cleanup().await;
//! # Ok(()) }
//! ```
//!
//! The lower-level calls: [`Elections::acquire_leadership`] (one try),
//! [`Elections::campaign`] (wait, as a visible candidate),
//! [`Leadership::spawn`] (work a release waits for),
//! [`Leadership::release`], [`Leadership::hand_over`] (to a named
//! [`Candidate`]), and [`Elections::observe`] / [`inspect`] for those who
//! only need to know who leads.
//!
//! ## Metrics
//!
//! Elections record a leader gauge, acquisitions, losses by cause,
//! renewal failures, renewal latency and the slack left before the killer
//! deadline through the `metrics` facade: see [`telemetry`].
//!
//! ## Protocol
//!
//! With leadership duration `d` (the record's TTL):
//!
//! 1. **Acquire**: `insert_if_not_exists(key, value, d)`; on success advance
//!    the key's fencing counter ([`fencing`]); then a confirming
//!    `compare_and_swap(key, value, value, d)`. The lease counts from the
//!    *start* of that confirming write; the killer is armed at `start + 0.8 d`.
//! 2. **Renew** every `d / 4` with `compare_and_swap(value, value, d)`. On an
//!    error, retry up to twice, `d / 20` apart. Before each attempt the killer
//!    deadline is capped at `attempt start + 0.75 d`; after a success it moves
//!    to `attempt start + 0.8 d`.
//! 3. **Loss**: a swap that returns `false`, or three failed attempts, ends
//!    the leadership: the handle fires with the loss's [`EndReason`]
//!    ([`EndReason::Stolen`], [`EndReason::Expired`],
//!    [`EndReason::StoreUnavailable`]). The record is
//!    *not* deleted and the killer stays armed, because the owner's work may
//!    still be running: deleting the record would let the next leader in
//!    while this one is still working.
//! 4. **Release** (by the owner): fire the handle, wait for the work spawned
//!    with [`Leadership::spawn`], stop renewal, disarm the killer,
//!    compare-and-delete the record.
//! 5. **Hand-over** ([`Leadership::hand_over`]): as a release, but the
//!    record is swapped for a short-TTL marker only the named candidate may
//!    take (see [`candidates`]).
//!
//! ## Outcome-unknown errors
//!
//! - On **insert**: read the record back; our value means we hold it
//!   (continue), another value or none means we don't; if the read fails too,
//!   delete best-effort and return the error.
//! - On **renewal**: the swap `v -> v` is idempotent, so read back: our value
//!   means the attempt may be retried (it counts as a failed attempt); another
//!   value or none means the lease is lost, whatever happened to our write.
//! - Every storage call is bounded by `d / 4`; one that overruns it has an
//!   unknown outcome.
//!
//! ## Guarantees and assumptions
//!
//! If the storage is linearizable and keeps a record live at least its TTL
//! after the write, and the clocks of this process and the storage run at
//! rates within 20 % of each other, then a process that stops acting when its
//! handle fires, or is killed by the killer, never acts as leader while
//! another process holds the lease. Pauses longer than the killer deadline
//! are caught by the killer as soon as the process runs again; work already
//! issued before a pause is caught by [`Leadership::fencing_token`] at the
//! guarded resource.

mod campaign;
pub mod candidates;
pub mod claim;
mod elections;
mod end;
mod error;
pub mod fencing;
mod handover;
mod inspect;
pub mod keys;
pub mod killer;
mod lead;
mod leadership;
mod live_count;
pub mod load;
mod observe;
mod preemption;
pub mod record;
mod renewal;
pub mod telemetry;
mod timing;

pub use crate::elections::{Elections, ElectionsBuilder};
pub use campaign::{MAX_POLL_INTERVAL, Standby};
pub use candidates::{Candidate, CandidateId};
pub use claim::SharedClaim;
pub use end::EndReason;
pub use error::ElectionsError;
pub use handover::HandOverError;
pub use inspect::{KeyStatus, inspect};
pub use killer::{ArmEvent, ArmReason, Kill, Killer, ProcessKiller, RecordingKiller};
pub use lead::{LeadError, LeaderContext};
pub use leadership::Leadership;
pub use load::RenewalLag;
pub use observe::{Observation, Observer, observe};
pub use preemption::Preemption;
pub use timing::{RENEWAL_ATTEMPTS, Timing};
