//! # elections-sim
//!
//! Deterministic simulation of leader election under faults. Every run is
//! one seed: a single-threaded tokio runtime with **paused time**, a shared
//! in-memory store, 2 to 5 contender processes over their own faulty views
//! of the store, and a chaos driver. Half the seeds use bare
//! [`elections::Elections`] contenders with a work loop; the other half use
//! whole VVMs (`vvm_orch`: Launcher, LeadershipMonitor, a service pipeline
//! that acts while it runs, ordered Shutdown, relaunch on a problem). Nothing reads a real clock or an unseeded random source, so
//! a seed replays exactly (the event log hash proves it).
//!
//! Faults injected while the fault phase lasts (30 leases by default):
//!
//! - per storage call: transient errors, outcome-unknown (applied, not
//!   applied, or applied *later*, up to a lease later, as a delayed packet
//!   would — at the latest when the faults stop, so nothing is in flight in
//!   the calm phase), and answers delayed past the renewal interval after
//!   the write applied. A late write's expiry counts from where the seed's
//!   driver counts it ([`Anchor`], `seed % 3`): the store's apply (mem,
//!   redb, Valkey, PostgreSQL, Cassandra), the lease grant before sending
//!   (etcd) or the client's clock before sending (DynamoDB), each with its
//!   driver's guard against landing on a later write (see `anchor.rs`);
//! - whole-store stalls (every call hangs);
//! - contender pauses longer than the TTL (the process makes no progress:
//!   its work loop and all its storage calls are frozen);
//! - partitions of one contender (every call fails);
//! - crashes (the process ends without releasing; it restarts later as a
//!   new incarnation).
//!
//! Half the seeds of each kind have **priorities** (issue 38; see
//! `preemptions.rs`): bare contenders of priority 0..=2 that stand, vanish
//! and come back (some flap far faster than the hold-down) and preempt
//! through [`elections::Preemption`]; VVMs of distinct priorities whose
//! monitors preempt. Each preemption must come after the leader's minimum
//! tenure, name a strictly higher candidacy that stood for the hold-down
//! (never a flapper's), and after the faults stop a standing candidacy
//! must see its priority or higher lead within the hold-down (or a lower
//! leader's remaining tenure) and a lease; a VVM's preemption marker,
//! asked for by no request, is held to the same rules from the store's
//! ground truth.
//!
//! The **history** records each leadership as the contender lived it: from
//! the moment `acquire_leadership` returned to the moment its work stopped
//! (after its handle fired, plus the time stopping takes), or its killer
//! deadline, or its crash. The **checker** fails a run if two intervals on
//! one key overlap, or if fencing tokens do not increase with start time,
//! or if, once faults stop, some key has no leader within `d + d/20` (TTL
//! plus one retry interval).
//!
//! A pause freezes the contender's own work and storage calls; the tokio
//! timers inside its elections instance still run, so its handle and killer
//! fire on schedule. A real SIGSTOP would delay them to the resume; the
//! checker ends an interval at the killer deadline either way, so the
//! verdict is the same, and the work a real process does between resume
//! and kill is what fencing tokens are for.
//!
//! ```
//! let report = elections_sim::run_seed(42, &elections_sim::SimConfig::default(), false).unwrap();
//! assert!(report.passed(), "{report:?}");
//! ```

mod anchor;
mod contender;
mod groups;
mod history;
mod markers;
mod preemptions;
mod priority;
mod requests;
mod rng;
mod scenario;
mod vvm;
mod world;

pub use anchor::{Anchor, LateWrites};
pub use groups::{Group, size_overlaps};
pub use history::{EndCause, Interval, Verdict, Who, check};
pub use preemptions::{Preempted, PreemptionBug, PreemptionVerdict, Stand};
pub use requests::RequestCounts;
pub use rng::SimRng;
pub use scenario::{ContenderKind, RunReport, SimConfig, run_seed};
pub use world::FaultCounts;
pub use world::OpCounts;
