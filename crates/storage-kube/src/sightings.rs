//! Expiry by observed time: when this storage first saw each version of
//! each Lease, on its own monotonic clock.
//!
//! A Lease's `resourceVersion` changes with every write (a renewal writes
//! a new `renewTime`). A record is expired for this storage once it has
//! seen the **same version** for a whole `leaseDurationSeconds`: no one
//! wrote it for that long, whatever any wall clock says. The instant
//! counted from is when the answer showing that version arrived (after
//! the write was applied), or, for this storage's own write, just before
//! it was sent. Only clock *rates* matter, never offsets or steps: the
//! rule client-go's elector uses, and the DynamoDB driver's
//! `observed_lease` mode. A takeover is a write at the version watched
//! expire, so a renewal that lands first makes it fail (`409`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

/// One version of one Lease as this storage first saw it.
#[derive(Debug, Clone)]
struct Seen {
    version: String,
    since: Instant,
}

/// What this storage has seen, by Lease name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sightings(Arc<Mutex<HashMap<String, Seen>>>);

impl Sightings {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When this storage first saw `version` of `name`: `now` for a
    /// version it had not seen (which it remembers from then on).
    pub(crate) fn since(&self, name: &str, version: &str, now: Instant) -> Instant {
        let mut map = self.map();
        match map.get(name) {
            Some(seen) if seen.version == version => seen.since,
            _ => {
                map.insert(
                    name.to_owned(),
                    Seen {
                        version: version.to_owned(),
                        since: now,
                    },
                );
                now
            }
        }
    }

    /// This storage wrote `version` of `name` with a request sent at `sent`.
    pub(crate) fn wrote(&self, name: &str, version: &str, sent: Instant) {
        self.map().insert(
            name.to_owned(),
            Seen {
                version: version.to_owned(),
                since: sent,
            },
        );
    }

    /// `name` is gone (deleted, or not found).
    pub(crate) fn forget(&self, name: &str) {
        self.map().remove(name);
    }
}

/// Until when a record first seen at `since` with `lease` (`None`:
/// never expires) is live; `None` for never.
pub(crate) fn live_until(since: Instant, lease: Option<Duration>) -> Option<Instant> {
    lease.map(|lease| since + lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Option<Duration> = Some(Duration::from_secs(10));

    #[test]
    fn a_version_counts_from_its_first_sighting_and_a_new_one_restarts() {
        let seen = Sightings::default();
        let t0 = Instant::now();
        assert_eq!(seen.since("k", "1", t0), t0);
        // Seen again later: still from the first sighting.
        assert_eq!(seen.since("k", "1", t0 + Duration::from_secs(9)), t0);
        assert_eq!(live_until(t0, LEASE), Some(t0 + Duration::from_secs(10)));
        let t1 = t0 + Duration::from_secs(12);
        assert_eq!(seen.since("k", "2", t1), t1);
        assert_eq!(seen.since("other", "1", t1), t1);
    }

    #[test]
    fn own_writes_count_from_their_send_and_forgotten_names_start_again() {
        let seen = Sightings::default();
        let t0 = Instant::now();
        seen.wrote("k", "5", t0);
        assert_eq!(seen.since("k", "5", t0 + Duration::from_secs(3)), t0);
        seen.forget("k");
        let later = t0 + Duration::from_secs(4);
        assert_eq!(seen.since("k", "5", later), later);
        assert_eq!(live_until(t0, None), None);
    }
}
