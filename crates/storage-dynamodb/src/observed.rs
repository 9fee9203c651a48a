//! [`crate::ExpiryMode::ObservedLease`]: expiry without comparing clocks
//! across machines, as Amazon's DynamoDB Lock Client does it.
//!
//! Every write stores a fresh random version nonce and the lease length.
//! A reader that sees a version remembers it with the instant (on its own
//! monotonic clock) at which the *answer* arrived, which is after the write
//! was applied. It considers the record expired once it has seen that same
//! version for a full lease. A takeover is a conditional write on
//! "version is still the one I watched expire", so a renewal that lands in
//! between makes the takeover fail. Only clock *rates* matter, never
//! offsets. This instance's own writes start their lease at the instant
//! before sending, which only shortens what the writer believes it holds.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use aws_sdk_dynamodb::{primitives::Blob, types::AttributeValue};
use ttl_storage::{Key, Result, Ttl};

use crate::{
    DynamoDbStorage,
    item::{self, KEY, VALUE, VERSION},
    storage::Condition,
};

/// One record version as this instance saw it.
#[derive(Debug, Clone)]
struct Observation {
    version: String,
    lease: Option<Duration>,
    since: Instant,
}

/// What this instance knows about each key it has touched.
#[derive(Debug, Default)]
pub(crate) struct Observations(Mutex<HashMap<String, Observation>>);

impl Observations {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Observation>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `key` holds `version` as seen at `now`; an unchanged
    /// version keeps its first sighting. Returns true if it has expired.
    pub(crate) fn observe(
        &self,
        key: &str,
        version: &str,
        lease: Option<Duration>,
        now: Instant,
    ) -> bool {
        let mut map = self.map();
        let entry = map
            .entry(key.to_string())
            .and_modify(|o| {
                if o.version != version {
                    *o = Observation {
                        version: version.to_string(),
                        lease,
                        since: now,
                    };
                }
            })
            .or_insert_with(|| Observation {
                version: version.to_string(),
                lease,
                since: now,
            });
        expired(entry, now)
    }

    /// Records this instance's own successful write, sent at `sent`.
    pub(crate) fn wrote(&self, key: &str, version: &str, lease: Option<Duration>, sent: Instant) {
        self.map().insert(
            key.to_string(),
            Observation {
                version: version.to_string(),
                lease,
                since: sent,
            },
        );
    }

    /// Forgets `key` (deleted, or the outcome of our write is unknown).
    pub(crate) fn forget(&self, key: &str) {
        self.map().remove(key);
    }

    /// The version of `key` if this instance has watched it expire by `now`.
    pub(crate) fn expired_version(&self, key: &str, now: Instant) -> Option<String> {
        self.map()
            .get(key)
            .filter(|o| expired(o, now))
            .map(|o| o.version.clone())
    }
}

fn expired(o: &Observation, now: Instant) -> bool {
    o.lease
        .is_some_and(|lease| now.saturating_duration_since(o.since) >= lease)
}

fn new_version() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl DynamoDbStorage {
    pub(crate) async fn insert_observed(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        let version = new_version();
        let record = item::observed_record(key.as_str(), value, ttl, &version, item::now_ms()?);
        let sent = Instant::now();
        let result = match self.observations.expired_version(key.as_str(), sent) {
            // Take over only the version we watched expire.
            Some(old) => {
                self.conditional_put(
                    record,
                    Condition {
                        expression: "#ver = :ver",
                        names: &[("#ver", VERSION)],
                        values: vec![(":ver", AttributeValue::S(old))],
                    },
                    "PutItem (takeover)",
                )
                .await
            }
            None => {
                self.conditional_put(
                    record,
                    Condition {
                        expression: "attribute_not_exists(#k)",
                        names: &[("#k", KEY)],
                        values: vec![],
                    },
                    "PutItem (insert)",
                )
                .await
            }
        };
        match result {
            Ok(true) => {
                self.observations
                    .wrote(key.as_str(), &version, ttl.duration(), sent);
                Ok(true)
            }
            Ok(false) => {
                // A live record (or a newer version): start or continue watching it.
                self.get_observed(key).await?;
                Ok(false)
            }
            Err(err) => {
                self.observations.forget(key.as_str());
                Err(err)
            }
        }
    }

    pub(crate) async fn swap_observed(
        &self,
        key: &Key,
        old: &[u8],
        new: &[u8],
        ttl: Ttl,
    ) -> Result<bool> {
        let sent = Instant::now();
        if self
            .observations
            .expired_version(key.as_str(), sent)
            .is_some()
        {
            return Ok(false);
        }
        let version = new_version();
        let record = item::observed_record(key.as_str(), new, ttl, &version, item::now_ms()?);
        let result = self
            .conditional_put(
                record,
                Condition {
                    expression: "#v = :old",
                    names: &[("#v", VALUE)],
                    values: vec![(":old", AttributeValue::B(Blob::new(old.to_vec())))],
                },
                "PutItem (compare-and-swap)",
            )
            .await;
        match result {
            Ok(true) => {
                self.observations
                    .wrote(key.as_str(), &version, ttl.duration(), sent);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(err) => {
                self.observations.forget(key.as_str());
                Err(err)
            }
        }
    }

    pub(crate) async fn delete_observed(&self, key: &Key, value: &[u8]) -> Result<bool> {
        if self
            .observations
            .expired_version(key.as_str(), Instant::now())
            .is_some()
        {
            return Ok(false);
        }
        let result = self
            .conditional_delete(
                key,
                Condition {
                    expression: "#v = :old",
                    names: &[("#v", VALUE)],
                    values: vec![(":old", AttributeValue::B(Blob::new(value.to_vec())))],
                },
                "DeleteItem (compare-and-delete)",
            )
            .await;
        if !matches!(result, Ok(false)) {
            self.observations.forget(key.as_str());
        }
        result
    }

    pub(crate) async fn get_observed(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        let Some(found) = self.read(key).await? else {
            self.observations.forget(key.as_str());
            return Ok(None);
        };
        let seen_at = Instant::now();
        let record = item::observed(&found)?;
        let expired =
            self.observations
                .observe(key.as_str(), &record.version, record.lease, seen_at);
        Ok((!expired).then_some(record.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Option<Duration> = Some(Duration::from_secs(10));

    #[test]
    fn unchanged_version_expires_after_a_full_lease_from_first_sighting() {
        let obs = Observations::default();
        let t0 = Instant::now();
        assert!(!obs.observe("k", "v1", LEASE, t0));
        // Later sightings of the same version do not restart the clock.
        assert!(!obs.observe("k", "v1", LEASE, t0 + Duration::from_secs(9)));
        assert_eq!(obs.expired_version("k", t0 + Duration::from_secs(9)), None);
        assert!(obs.observe("k", "v1", LEASE, t0 + Duration::from_secs(10)));
        assert_eq!(
            obs.expired_version("k", t0 + Duration::from_secs(10)),
            Some("v1".into())
        );
    }

    #[test]
    fn a_new_version_restarts_the_clock() {
        let obs = Observations::default();
        let t0 = Instant::now();
        obs.observe("k", "v1", LEASE, t0);
        assert!(!obs.observe("k", "v2", LEASE, t0 + Duration::from_secs(8)));
        assert!(!obs.observe("k", "v2", LEASE, t0 + Duration::from_secs(17)));
        assert!(obs.observe("k", "v2", LEASE, t0 + Duration::from_secs(18)));
    }

    #[test]
    fn own_writes_count_from_the_send_instant_and_never_means_never() {
        let obs = Observations::default();
        let t0 = Instant::now();
        obs.wrote("k", "mine", LEASE, t0);
        assert_eq!(
            obs.expired_version("k", t0 + Duration::from_secs(10)),
            Some("mine".into())
        );
        obs.wrote("k", "forever", None, t0);
        assert!(!obs.observe("k", "forever", None, t0 + Duration::from_secs(1 << 30)));
        obs.forget("k");
        assert_eq!(
            obs.expired_version("k", t0 + Duration::from_secs(1 << 30)),
            None
        );
    }
}
