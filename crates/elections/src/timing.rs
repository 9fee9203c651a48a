//! The timing constants of a leadership, all derived from its duration.

use std::time::Duration;

use ttl_storage::{Ttl, ValidationError};

/// Renewal attempts per renewal round (one try and two retries), as in the design.
pub const RENEWAL_ATTEMPTS: u32 = 3;

/// The timing of one leadership, derived from its duration `d` (the TTL of
/// the record) exactly as the design prescribes:
///
/// | constant | value | default (d = 20 s) |
/// |---|---|---|
/// | [`renew_interval`](Self::renew_interval) | d / 4 | 5 s |
/// | [`retry_interval`](Self::retry_interval) | d / 20 | 1 s |
/// | attempts per renewal | [`RENEWAL_ATTEMPTS`] | 3 |
/// | [`kill_after_success`](Self::kill_after_success) | 0.8 d after a successful write *started* | 16 s |
/// | [`kill_before_write`](Self::kill_before_write) | 0.75 d after a renewal attempt starts (a cap, never an extension) | 15 s |
/// | [`call_timeout`](Self::call_timeout) | d / 4: one storage call longer than this counts as outcome unknown | 5 s |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    duration: Duration,
    ttl: Ttl,
}

impl Timing {
    /// Validates a leadership duration: a whole number of seconds, at least 1 s.
    pub fn new(duration: Duration) -> Result<Self, ValidationError> {
        let ttl = Ttl::expiring(duration)?;
        Ok(Timing { duration, ttl })
    }

    /// The leadership duration (the record's TTL).
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The record's TTL.
    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// Time between renewals, counted from the start of the last successful one.
    pub fn renew_interval(&self) -> Duration {
        self.duration / 4
    }

    /// Pause between failed renewal attempts.
    pub fn retry_interval(&self) -> Duration {
        self.duration / 20
    }

    /// The killer deadline after a successful write, counted from the write's start.
    pub fn kill_after_success(&self) -> Duration {
        self.duration * 4 / 5
    }

    /// The killer cap set before each renewal attempt, counted from the attempt's start.
    pub fn kill_before_write(&self) -> Duration {
        self.duration * 3 / 4
    }

    /// How late a renewal round may finish (after its scheduled start)
    /// before the elections shed new acquisitions ([`crate::load`]): d/10.
    pub fn overload_lag(&self) -> Duration {
        self.duration / 10
    }

    /// How long one storage call may take before its outcome is treated as unknown.
    pub fn call_timeout(&self) -> Duration {
        self.duration / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_constants() {
        let t = Timing::new(Duration::from_secs(20)).unwrap();
        assert_eq!(t.renew_interval(), Duration::from_secs(5));
        assert_eq!(t.retry_interval(), Duration::from_secs(1));
        assert_eq!(t.kill_after_success(), Duration::from_secs(16));
        assert_eq!(t.kill_before_write(), Duration::from_secs(15));
        assert!(Timing::new(Duration::ZERO).is_err());
        assert!(Timing::new(Duration::from_millis(1500)).is_err());
    }
}
