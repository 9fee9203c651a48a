//! Settings of a [`Member`](super::Member).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::address::MemberAddress;
use crate::error::{Error, Result};
use crate::ids::MemberId;
use crate::keys::DEFAULT_PREFIX;
use crate::strategy::{DynStrategy, LeastLoaded};

/// Per-destination concurrency cap and fan-out trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaturationConfig {
    /// Calls per destination that run at once on this pod (default 64);
    /// more wait in a FIFO queue.
    pub max_concurrent: usize,
    /// When the queue of a destination stays non-empty this long (default
    /// 1 s), the pod fans the destination out to a live peer picked by
    /// [`MemberConfig::fan_out_strategy`] (the least-loaded by default).
    pub queue_threshold: Duration,
}

impl Default for SaturationConfig {
    fn default() -> Self {
        Self {
            max_concurrent: 64,
            queue_threshold: Duration::from_secs(1),
        }
    }
}

/// Settings of a resource pod's membership.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// The key prefix `P` (default `coordinator`).
    pub prefix: String,
    /// This pod's id.
    pub id: MemberId,
    /// This pod's dialable address, written to `P:member:<id>`.
    pub address: MemberAddress,
    /// TTL of the member record (default 30 s).
    pub ttl: Duration,
    /// Heartbeat period (default 10 s); must be below `0.8 × ttl`, the
    /// ownership fence's lease ([`Member::lease_deadline`](super::Member::lease_deadline)).
    pub heartbeat_interval: Duration,
    /// TTL of lock records (default 30 s), refreshed by each heartbeat while
    /// the lock is held; must exceed `heartbeat_interval`.
    pub lock_ttl: Duration,
    /// Concurrency cap and fan-out.
    pub saturation: SaturationConfig,
    /// Picks the peer a saturated destination fans out to, among the live
    /// peers not yet in its set ([`PickPurpose::FanOut`](crate::strategy::PickPurpose::FanOut)).
    /// Default [`LeastLoaded`] (ties broken round-robin). The pod's own: the
    /// coordinators' strategies live in their processes.
    pub fan_out_strategy: DynStrategy,
    /// Destinations whose newest assignment epoch the ownership fence
    /// remembers (default 65 536; least recently seen forgotten first).
    pub fence_capacity: NonZeroUsize,
}

impl MemberConfig {
    /// Defaults for `id` at `address`.
    pub fn new(id: MemberId, address: MemberAddress) -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            id,
            address,
            ttl: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            lock_ttl: Duration::from_secs(30),
            saturation: SaturationConfig::default(),
            fan_out_strategy: Arc::new(LeastLoaded::new()),
            fence_capacity: NonZeroUsize::new(65_536).unwrap_or(NonZeroUsize::MIN),
        }
    }

    /// Checks the bounds: TTLs in 100 ms..=1 day, interval in 10 ms..TTL,
    /// `lock_ttl > heartbeat_interval`, cap >= 1, threshold >= 1 ms.
    pub fn validate(&self) -> Result<()> {
        let ttl_ok =
            |d: Duration| d >= Duration::from_millis(100) && d <= Duration::from_secs(86_400);
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if !ttl_ok(self.ttl) || !ttl_ok(self.lock_ttl) {
            return bad(format!(
                "ttl {:?} and lock_ttl {:?} must be within 100 ms..=1 day",
                self.ttl, self.lock_ttl
            ));
        }
        if self.heartbeat_interval < Duration::from_millis(10)
            || self.heartbeat_interval >= self.ttl
        {
            return bad(format!(
                "heartbeat_interval {:?} must be at least 10 ms and below ttl {:?}",
                self.heartbeat_interval, self.ttl
            ));
        }
        if self.heartbeat_interval >= self.ttl.mul_f64(super::LEASE_FRACTION) {
            // the ownership fence's lease would run out between heartbeats
            return bad(format!(
                "heartbeat_interval {:?} must be below 0.8 × ttl {:?} (a third of it is usual)",
                self.heartbeat_interval, self.ttl
            ));
        }
        if self.lock_ttl <= self.heartbeat_interval {
            return bad(format!(
                "lock_ttl {:?} must exceed heartbeat_interval {:?}",
                self.lock_ttl, self.heartbeat_interval
            ));
        }
        if self.saturation.max_concurrent == 0
            || self.saturation.max_concurrent > tokio::sync::Semaphore::MAX_PERMITS
        {
            return bad(format!(
                "saturation.max_concurrent must be within 1..={}",
                tokio::sync::Semaphore::MAX_PERMITS
            ));
        }
        if self.saturation.queue_threshold < Duration::from_millis(1) {
            return bad("saturation.queue_threshold must be at least 1 ms".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> MemberConfig {
        MemberConfig::new(
            MemberId::new("p").unwrap(),
            MemberAddress::parse("http://127.0.0.1:1").unwrap(),
        )
    }

    #[test]
    fn defaults_are_valid() {
        assert!(cfg().validate().is_ok());
    }

    #[test]
    fn inconsistent_timings_are_rejected() {
        let mut c = cfg();
        c.heartbeat_interval = c.ttl;
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.heartbeat_interval = c.ttl.mul_f64(0.8);
        assert!(c.validate().is_err(), "the fence's lease would lapse");
        let mut c = cfg();
        c.lock_ttl = Duration::from_secs(5);
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.ttl = Duration::from_millis(10);
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.saturation.max_concurrent = 0;
        assert!(c.validate().is_err());
    }
}
