//! Settings: sizes, caps and the liveness probe of the broadcast channel.

use std::time::Duration;

use crate::error::{Error, Result};

/// Largest payload [`EventsConfig::max_payload`] accepts.
pub const MAX_PAYLOAD_LIMIT: usize = 16 << 20;

/// Settings of [`crate::Events`]. Every limit is a cap on what a pod holds
/// or accepts, so neither local callers nor what arrives from Valkey can
/// grow it without bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventsConfig {
    /// Largest event payload, in bytes (default 64 KiB; at most 16 MiB).
    /// `publish` refuses larger ones; larger messages from Valkey are
    /// dropped as malformed.
    pub max_payload: usize,
    /// Notices buffered per destination for this pod's subscribers
    /// (default 1024). A subscriber further behind misses the oldest and
    /// is told so by a [`crate::Gap`].
    pub buffer: usize,
    /// Destinations this pod may have local subscribers for at once
    /// (default 10 000).
    pub max_destinations: usize,
    /// Local subscribers this pod may hold at once, over all destinations
    /// (default 100 000).
    pub max_subscribers: usize,
    /// How often the pod checks that its broadcast connection answers
    /// (default 1 s). A connection that does not answer within
    /// [`EventsConfig::probe_timeout`] counts as lost: subscribers are told
    /// ([`crate::Notice::Interrupted`]) and the connection is re-opened.
    pub probe_interval: Duration,
    /// How long a probe may take (default 1 s).
    pub probe_timeout: Duration,
    /// How long `subscribe` waits for the destination's first mark to come
    /// back over the broadcast channel (default 5 s).
    pub subscribe_timeout: Duration,
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            max_payload: 64 << 10,
            buffer: 1024,
            max_destinations: 10_000,
            max_subscribers: 100_000,
            probe_interval: Duration::from_secs(1),
            probe_timeout: Duration::from_secs(1),
            subscribe_timeout: Duration::from_secs(5),
        }
    }
}

impl EventsConfig {
    /// Checks every range; [`crate::Events`] calls it.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.max_payload == 0 || self.max_payload > MAX_PAYLOAD_LIMIT {
            return bad(format!(
                "max_payload must be within 1..={MAX_PAYLOAD_LIMIT}, got {}",
                self.max_payload
            ));
        }
        if !(1..=1 << 20).contains(&self.buffer) {
            return bad(format!(
                "buffer must be within 1..=1048576, got {}",
                self.buffer
            ));
        }
        if self.max_destinations == 0 || self.max_subscribers == 0 {
            return bad("max_destinations and max_subscribers must be positive".into());
        }
        for (name, d) in [
            ("probe_interval", self.probe_interval),
            ("probe_timeout", self.probe_timeout),
            ("subscribe_timeout", self.subscribe_timeout),
        ] {
            if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
                return bad(format!("{name} must be within 10 ms..=1 h, got {d:?}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bounds_are_enforced() {
        assert!(EventsConfig::default().validate().is_ok());
        for broken in [
            EventsConfig {
                max_payload: 0,
                ..EventsConfig::default()
            },
            EventsConfig {
                max_payload: MAX_PAYLOAD_LIMIT + 1,
                ..EventsConfig::default()
            },
            EventsConfig {
                buffer: 0,
                ..EventsConfig::default()
            },
            EventsConfig {
                max_subscribers: 0,
                ..EventsConfig::default()
            },
            EventsConfig {
                probe_timeout: Duration::ZERO,
                ..EventsConfig::default()
            },
        ] {
            assert!(
                matches!(broken.validate(), Err(Error::InvalidConfig(_))),
                "{broken:?}"
            );
        }
    }
}
