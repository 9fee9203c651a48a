//! Where each driver counts a write's expiry from, and what it does with a
//! write that arrives late: the store side of the late-apply fault.
//!
//! A write injected as "applied later" reaches the store `delay` after it
//! was sent. Drivers differ in the instant its expiry counts from:
//!
//! - [`Anchor::Apply`] (`storage-mem`, `storage-redb`, Valkey's `PX` in the
//!   script, PostgreSQL's `clock_timestamp()` at the row write, Cassandra's
//!   coordinator at execution): the store's clock when it applies the write,
//!   so a late write can only lengthen a lease.
//! - [`Anchor::EtcdGrant`]: the lease is granted before the transaction is
//!   sent, so the expiry is `send + ttl`. The driver's guard: a swap applies
//!   only if the key was not written since its grant (`mod_revision <=
//!   grant revision`). An insert needs an absent key; a lease that ran out
//!   before its transaction arrived fails it.
//! - [`Anchor::DynamoClient`]: `exp_ms = now + ttl` on the client before
//!   sending, and the insert's "expired" test uses that clock reading too.
//!   The driver's guard: a swap to an expiring record applies only if the
//!   stored record was anchored no later than it, or would not be
//!   shortened; a renewal refused so answers true and writes nothing. A
//!   write whose expiry passed before it arrived leaves an expired item
//!   (the record is gone).
//!
//! With `guarded == false` the two send-anchored drivers behave as before
//! issue 34's fix (afc8b88): no guard, so a late swap lands on a later
//! renewal and moves the expiry back to `send + ttl`. The checker must
//! catch that: `cargo run -p elections-sim -- --unguarded-late-writes`.
//!
//! The sim's store is a [`MemStorage`], which takes a TTL in whole
//! seconds: a send-anchored expiry is applied as the whole seconds left
//! (rounded down: never later than the real driver's), and less than a
//! second left counts as already expired. The side table [`Written`] keeps
//! what the guards compare (the instant each record was written, its
//! anchor and its expiry), updated by every write through this module.

use std::{collections::HashMap, time::Duration};

use storage_mem::MemStorage;
use tokio::time::Instant;
use ttl_storage::{Key, Result, Ttl, TtlStorage};

/// Where a driver's expiry counts from (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// At the store's apply: mem, redb, Valkey, PostgreSQL, Cassandra.
    Apply,
    /// At the lease grant, before sending: etcd.
    EtcdGrant,
    /// At the client's clock reading, before sending: DynamoDB (wall-clock mode).
    DynamoClient,
}

impl Anchor {
    /// Every anchor, in the order seeds take them (`seed % 3`).
    pub const ALL: [Anchor; 3] = [Anchor::Apply, Anchor::EtcdGrant, Anchor::DynamoClient];

    /// The anchor a seed runs with.
    pub fn for_seed(seed: u64) -> Anchor {
        Anchor::ALL[(seed % 3) as usize]
    }

    /// Its name on the command line and in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Anchor::Apply => "apply",
            Anchor::EtcdGrant => "etcd",
            Anchor::DynamoClient => "dynamodb",
        }
    }
}

/// What became of writes that arrived after the record they found was
/// written (sent before it, applied after it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LateWrites {
    /// Refused by the driver's guard (etcd's revision compare, DynamoDB's
    /// anchor-or-expiry condition).
    pub refused: u64,
    /// Renewals (`v -> v`) that landed and moved the expiry earlier than
    /// the record they replaced: issue 34's case 7. Zero unless the guards
    /// are dropped.
    pub renewals_shortened: u64,
}

impl LateWrites {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &LateWrites) {
        self.refused += other.refused;
        self.renewals_shortened += other.renewals_shortened;
    }
}

/// What the guards know of the record under a key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Written {
    /// When the last write to the key was applied (etcd's `mod_revision`).
    at: Instant,
    /// The instant its expiry counts from (DynamoDB's `at_ms`).
    anchor: Instant,
    /// Its expiry, `None` for a record that never expires.
    expires: Option<Instant>,
}

/// The store as the drivers see it: the map, the side table, the model.
pub(crate) struct Store {
    pub(crate) map: MemStorage,
    anchor: Anchor,
    guarded: bool,
    written: std::sync::Mutex<HashMap<Key, Written>>,
    late: std::sync::Mutex<LateWrites>,
}

/// What a write asks for once it reaches the store.
enum Landing {
    /// Apply it with this TTL (whole seconds, counted from now).
    Ttl(Ttl),
    /// Its expiry has passed: it leaves no live record.
    Expired,
}

impl Store {
    pub(crate) fn new(anchor: Anchor, guarded: bool) -> Self {
        Store {
            map: MemStorage::new(),
            anchor,
            guarded,
            written: std::sync::Mutex::default(),
            late: std::sync::Mutex::default(),
        }
    }

    /// What became of late writes so far.
    pub(crate) fn late_writes(&self) -> LateWrites {
        *self.late()
    }

    fn late(&self) -> std::sync::MutexGuard<'_, LateWrites> {
        self.late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn written(&self, key: &Key) -> Option<Written> {
        self.table().get(key).copied()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Written>> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a write applied now, anchored at `anchor`.
    fn wrote(&self, key: &Key, anchor: Instant, expires: Option<Instant>) {
        let at = Instant::now();
        self.table().insert(
            key.clone(),
            Written {
                at,
                anchor,
                expires,
            },
        );
    }

    /// The instant a write sent at `sent` counts its expiry from.
    fn anchor_of(&self, sent: Instant) -> Instant {
        match self.anchor {
            Anchor::Apply => Instant::now(),
            Anchor::EtcdGrant | Anchor::DynamoClient => sent,
        }
    }

    /// How a write anchored at `anchor` with `ttl` lands now.
    fn landing(anchor: Instant, ttl: Ttl) -> Landing {
        let Some(ttl) = ttl.duration() else {
            return Landing::Ttl(Ttl::NEVER);
        };
        let left = (anchor + ttl).saturating_duration_since(Instant::now());
        match Ttl::new(Duration::from_secs(left.as_secs())) {
            Ok(ttl) if !ttl.is_never() => Landing::Ttl(ttl),
            _ => Landing::Expired,
        }
    }

    /// `insert_if_not_exists`, sent at `sent`.
    pub(crate) async fn insert(
        &self,
        key: &Key,
        value: &[u8],
        ttl: Ttl,
        sent: Instant,
    ) -> Result<bool> {
        let anchor = self.anchor_of(sent);
        if self.anchor == Anchor::DynamoClient
            && self
                .written(key)
                .and_then(|w| w.expires)
                .is_some_and(|expires| expires > sent)
            && self.map.get(key).await?.is_none()
        {
            // Expired by the time it arrives, but not at the writer's
            // clock reading, which the condition compares.
            return Ok(false);
        }
        match Self::landing(anchor, ttl) {
            Landing::Ttl(left) => {
                let inserted = self.map.insert_if_not_exists(key, value, left).await?;
                if inserted {
                    self.wrote(key, anchor, ttl.duration().map(|d| anchor + d));
                }
                Ok(inserted)
            }
            // etcd: the lease ran out, the transaction fails. DynamoDB: an
            // expired item, invisible.
            Landing::Expired => {
                Ok(self.anchor == Anchor::DynamoClient && self.map.get(key).await?.is_none())
            }
        }
    }

    /// `compare_and_swap`, sent at `sent`.
    pub(crate) async fn swap(
        &self,
        key: &Key,
        old: &[u8],
        new: &[u8],
        ttl: Ttl,
        sent: Instant,
    ) -> Result<bool> {
        let anchor = self.anchor_of(sent);
        let expires = ttl.duration().map(|d| anchor + d);
        if self.map.get(key).await?.as_deref() != Some(old) {
            return Ok(false);
        }
        let stored = self.written(key);
        if self.guarded {
            match self.anchor {
                Anchor::Apply => {}
                Anchor::EtcdGrant => {
                    if stored.is_some_and(|w| w.at > sent) {
                        self.late().refused += 1;
                        return Ok(false);
                    }
                }
                Anchor::DynamoClient => {
                    if let (Some(expires), Some(stored)) = (expires, stored) {
                        let later_anchor = stored.anchor > anchor;
                        let shortens = stored.expires.is_none_or(|e| e > expires);
                        if later_anchor && shortens {
                            // A renewal is already done; anything else
                            // is refused (transient, retried by the caller).
                            self.late().refused += 1;
                            return Ok(old == new);
                        }
                    }
                }
            }
        }
        match Self::landing(anchor, ttl) {
            Landing::Ttl(left) => {
                let swapped = self.map.compare_and_swap(key, old, new, left).await?;
                if swapped {
                    self.count_shortened(stored, sent, old == new, expires);
                    self.wrote(key, anchor, expires);
                }
                Ok(swapped)
            }
            Landing::Expired if self.anchor == Anchor::DynamoClient => {
                // Written with an expiry already past: the record is gone.
                let gone = self.map.compare_and_delete(key, old).await?;
                if gone {
                    self.count_shortened(stored, sent, old == new, Some(Instant::now()));
                    self.table().remove(key);
                }
                Ok(gone)
            }
            Landing::Expired => Ok(false),
        }
    }

    /// Counts a late renewal (sent before the record it replaced was
    /// written) that left an earlier expiry than that record's.
    fn count_shortened(
        &self,
        stored: Option<Written>,
        sent: Instant,
        renewal: bool,
        expires: Option<Instant>,
    ) {
        let Some(stored) = stored else { return };
        let earlier = match (stored.expires, expires) {
            (Some(before), Some(now)) => now < before,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        if renewal && stored.at > sent && earlier {
            self.late().renewals_shortened += 1;
        }
    }

    /// `compare_and_delete` (no expiry, no anchor).
    pub(crate) async fn delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        let deleted = self.map.compare_and_delete(key, value).await?;
        if deleted {
            self.table().remove(key);
        }
        Ok(deleted)
    }
}
