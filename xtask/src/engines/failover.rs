//! Failovers of the replicated engines (`etcd-3`, `postgres-ha`,
//! `valkey-sentinel`) while `cargo xtask chaos` runs: the leader member or
//! the primary is SIGKILLed during leadership, the engine fails over, and
//! the victim comes back (as a follower or replica) where the engine allows.

use std::time::{Duration, Instant};

/// What the failovers of one chaos run did.
#[derive(Debug, Default)]
pub(crate) struct FailoverReport {
    /// Leader members or primaries SIGKILLed.
    pub(crate) kills: u32,
    /// Slowest time from a kill until the engine accepted writes again
    /// (a new etcd leader, a promoted standby or replica).
    pub(crate) slowest_failover: Duration,
    /// Victims brought back (as followers or replicas).
    pub(crate) rejoined: u32,
}

impl std::fmt::Display for FailoverReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "failovers: {} SIGKILL of the leader/primary (engine writable again within {:.1}s), {} rejoined",
            self.kills,
            self.slowest_failover.as_secs_f64(),
            self.rejoined
        )
    }
}

/// Prints a fault with the wall time (ms since the epoch, as the chaos
/// harness's event lines).
pub(crate) fn fault_line(engine: &str, what: &str) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    println!("[{engine}] {ms} failover: {what}");
}

/// Sleeps `time` in small steps; true as soon as `stop` says so.
pub(crate) fn hold_for(time: Duration, stop: &mut dyn FnMut() -> bool) -> bool {
    let until = Instant::now() + time;
    while Instant::now() < until {
        if stop() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop()
}
