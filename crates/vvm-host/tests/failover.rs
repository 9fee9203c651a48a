//! The design's manual failover scenario, with real `vvm-host` processes:
//! A leads while B and C wait; stop A and a standby takes over; restart A
//! and it waits; stop the leader and another takes over; and so on, then
//! SIGKILL the leader and watch the lease run out and a standby take over.
//!
//! The commands prove mutual exclusion themselves: each holds an exclusive
//! `flock` on one file for as long as any of its processes lives (the kernel
//! releases it only when the last one is dead), and writes `overlap` to the
//! event log if it ever finds the lock taken. The log also records when
//! each command started and stopped, so the handover gaps are printed
//! (`cargo test -p vvm-host --test failover -- --nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::failover::*;

/// With every default (20 s lease, 1 s retry pause, the shared redb file).
#[test]
fn manual_failover_on_the_default_storage() {
    scenario(None, DEFAULT_LEASE, &[]);
}

/// A standby is woken by the storage when the leader releases, not by its
/// next poll: with an hour between polls, three graceful handovers still
/// happen (each within the test's one-minute limit).
#[test]
fn graceful_handovers_wake_the_standby_without_a_poll() {
    let mut cluster = Cluster::new(None, &["--retry-pause", "1h"]);
    three_handovers(&mut cluster);
    let (_, overlaps) = read_events(&cluster.events());
    assert!(overlaps.is_empty(), "{overlaps:?}");
}

#[test]
#[ignore = "needs Cassandra: run `cargo xtask test-drivers --engine cassandra`"]
fn manual_failover_on_cassandra() {
    let url = std::env::var("SCYLLA_URI").expect("SCYLLA_URI");
    scenario(
        Some(url),
        Duration::from_secs(4),
        &["--leadership-duration", "4s"],
    );
}
