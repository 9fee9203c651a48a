//! # chaos
//!
//! Real processes against real engines (Apache Cassandra / ScyllaDB,
//! DynamoDB, Valkey / Redis, PostgreSQL, etcd, each opened through
//! `storage-url`): a harness that runs
//! several contender processes (each a [`vvm_orch::Vvm`] whose service
//! pipeline is the guarded writer, with the production elections killer)
//! against a real database, and while they
//! contend SIGKILLs the leader, SIGSTOPs it for `1.5 d`, and cuts its path
//! to the database for `1.5 d` through a TCP [`proxy::FaultProxy`] (one per
//! contender). Each leader writes to a [`guarded`] resource in the same
//! database every 100 ms with its fencing token; the resource accepts a
//! write only with a token at least as high as any it has seen. The
//! resource is the project's public fencing helpers' fenced log (see
//! [`guarded`]): chaos tests the helpers users call.
//!
//! One contender slot runs **zombies** on purpose (no killer, and they keep
//! writing with their old token for `2 d` after a loss): the deposed leader
//! fencing exists for. Their late writes must all be refused once a newer
//! token reached the resource. `--unfenced` turns the resource's check off
//! as a negative control: the run must then fail.
//!
//! With a server clock fault ([`server_clock`], `cargo xtask chaos
//! --server-clock step:+30s|step:-30s|strobe`) the engine server's wall
//! clock is stepped or strobed mid-run as well.
//!
//! Coordinator chaos (`cargo xtask chaos --engine coordinator`) is the
//! [`fleet`] module: pod and coordinator processes of the `coordinator`
//! crate on one Valkey, checked for destinations served by two pods at
//! once.
//!
//! ## What the run checks ([`check`])
//!
//! - no stale write accepted (the resource's log never shows a token lower
//!   than an earlier one);
//! - acquisitions carry strictly increasing tokens;
//! - no write is accepted that started past the writer's killer deadline,
//!   no write starts after a reported loss, and a lost leadership ends
//!   (released, or the killer fired) by its deadline plus `0.2 d`;
//! - no leader acts after another process acquired a higher token
//!   ([`check::overlap`]; a forward step of the store server's clock,
//!   [`server_clock`], may cause one, counted against its stated bound);
//! - after each kill, another process acquires within `d + 1 s + d/20 + 1 s`
//!   of the victim's last successful write start (plus `d/2` with
//!   `--direct`, a cluster whose nodes are faulted meanwhile: one
//!   acquisition attempt that waits on a cut-off or frozen replica fails
//!   only at the call budget, `d/4`, and its read-back, `d/4`).
//!
//! ## Assumptions
//!
//! Without `--direct` ([`harness::HarnessConfig::direct`]), the engine is
//! a single node reached through one address (each
//! contender connects to its own proxy; the `scylla` driver addresses the
//! node it connected to by that address, so it never bypasses the proxy;
//! DynamoDB is one HTTP endpoint; Valkey, PostgreSQL and etcd one TCP
//! address each, with no discovery of other members). With `--direct`
//! (a cluster, e.g. `cargo xtask chaos --engine cassandra-3`) contenders
//! connect straight to every node and the proxy cut is skipped: the
//! caller faults the engine's nodes instead. Processes run on one machine, so their
//! wall clocks agree and event timestamps (ms since the epoch) compare.
//!
//! Run it with `cargo xtask chaos`, which starts the engine. The checker
//! runs on any history:
//!
//! ```
//! use std::time::Duration;
//! use chaos::{check::{check, Bounds}, event::{Event, Record, WriteOutcome}, guarded::LogEntry};
//!
//! let rec = |t_ms, proc: &str, event| Record { t_ms, proc: proc.into(), event };
//! let history = vec![
//!     rec(1_000, "a", Event::Acquired { token: 2 }),
//!     rec(1_100, "a", Event::Write { start_ms: 1_050, token: 2, outcome: WriteOutcome::Accepted { seq: 1 } }),
//! ];
//! // The log shows a later write with a lower token: a stale write was accepted.
//! let log = vec![
//!     LogEntry { seq: 1, token: 2, writer: "a".into() },
//!     LogEntry { seq: 2, token: 1, writer: "b".into() },
//! ];
//! let bounds = Bounds { stop_slack: Duration::from_millis(800), takeover_bound: Duration::from_secs(6) };
//! let report = check(&history, &log, bounds, 2_000);
//! assert_eq!(report.stale_accepted, 1);
//! assert!(!report.ok());
//! ```

pub mod check;
pub mod clock;
pub mod contender;
pub mod event;
pub mod fleet;
pub mod guarded;
pub mod harness;
mod observer;
pub mod process;
pub mod proxy;
pub mod server_clock;
#[cfg(test)]
mod test_support;
