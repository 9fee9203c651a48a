//! Shared claims: a record that every leader of one group holds with the
//! same value, beside its lease, and renews **with** its lease.
//!
//! `vvm-orch` uses one for the cluster size: every leader of a cluster
//! started with `--cluster-size N` holds the claim `N`; a node started
//! with another size finds it and cannot lead. For that to hold, the claim
//! must never lapse while a leader of its group acts. So it is part of the
//! leadership, not a side job:
//!
//! - **Acquisition**: after the confirming write that starts the lease, the
//!   claim is read; absent, it is inserted; holding our value, it is
//!   refreshed (compare-and-swap `v -> v` with the lease's TTL); holding
//!   another value, the lease is withdrawn (nothing ran under it) and the
//!   acquisition fails with [`crate::ElectionsError::ClaimConflict`].
//! - **Renewal**: every renewal round refreshes the claim after the lease,
//!   with the same attempts, retry pause, call timeout and killer caps. The
//!   round counts as renewed (and moves the killer to `start + 0.8 d`, where
//!   `start` is the start of the lease write, earlier than the claim's)
//!   only when both writes succeeded. A round whose claim writes all fail
//!   is a loss ([`crate::EndReason::StoreUnavailable`]), exactly like a
//!   failed lease renewal; a claim found gone or holding another value is a
//!   loss too ([`crate::EndReason::ClaimLost`]).
//!
//! Why it is safe: each leader's killer deadline is at most `0.8 d` after
//! the start of its last successful claim write, and the claim lives at
//! least `d` after each such write. So while any leader of the group may
//! still act, the claim is live and holds the group's value, and a
//! contender of another group cannot take it. The claim is not deleted on
//! release (other leaders of the group may hold it); it expires `d` after
//! the last leader's last write.

use std::time::Duration;

use ttl_storage::{ErrorKind, Key, StorageError, Ttl, TtlStorage};

use crate::fencing::timed;

/// A shared claim: its key and the value every leader of the group holds.
/// Attach it to a [`crate::Standby`] with [`crate::Standby::with_claim`].
///
/// The key must be one no leadership uses as its lease (for example one in
/// the reserved namespace, as `vvm-orch`'s `__vvm__/size/…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedClaim {
    key: Key,
    value: Vec<u8>,
}

impl SharedClaim {
    /// The claim of `value` on `key`.
    pub fn new(key: Key, value: impl Into<Vec<u8>>) -> Self {
        SharedClaim {
            key,
            value: value.into(),
        }
    }

    /// The claim's key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The value the group holds.
    pub fn value(&self) -> &[u8] {
        &self.value
    }
}

/// What a write of the claim found.
#[derive(Debug)]
pub(crate) enum Found {
    /// The claim holds our value, written now.
    Ours,
    /// The claim holds another value (`None`: it is gone; only possible
    /// on a refresh).
    Other(Option<Vec<u8>>),
}

/// Rounds of read-then-write one claim write makes before it gives up.
const ROUNDS: u32 = 3;

impl SharedClaim {
    /// Takes the claim at acquisition: inserts it when absent, refreshes it
    /// when it holds our value. `Found::Other` when another value holds it.
    pub(crate) async fn take(
        &self,
        storage: &dyn TtlStorage,
        ttl: Ttl,
        limit: Duration,
        pause: Duration,
    ) -> Result<Found, StorageError> {
        let mut last = None;
        for round in 0..ROUNDS {
            if round > 0 {
                tokio::time::sleep(pause).await;
            }
            let written = match timed(limit, storage.get(&self.key)).await {
                Ok(None) => {
                    timed(
                        limit,
                        storage.insert_if_not_exists(&self.key, &self.value, ttl),
                    )
                    .await
                }
                Ok(Some(found)) if found == self.value => {
                    timed(
                        limit,
                        storage.compare_and_swap(&self.key, &self.value, &self.value, ttl),
                    )
                    .await
                }
                Ok(Some(found)) => return Ok(Found::Other(Some(found))),
                Err(err) => Err(err),
            };
            match written {
                Ok(true) => return Ok(Found::Ours),
                // Changed between the read and the write: read again.
                Ok(false) => {}
                Err(err) if err.kind() == ErrorKind::Permanent => return Err(err),
                // Unknown or failed: the next round reads what is there.
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| {
            StorageError::transient(format!("the claim {} kept changing", self.key))
        }))
    }

    /// One refresh attempt while leading: `v -> v`. `Ok(Ours)` refreshed;
    /// `Ok(Other(found))` the claim is gone or holds another value (a
    /// loss); `Err` a failed attempt (retry, as a failed renewal).
    pub(crate) async fn refresh(
        &self,
        storage: &dyn TtlStorage,
        ttl: Ttl,
        limit: Duration,
    ) -> Result<Found, StorageError> {
        let swapped = timed(
            limit,
            storage.compare_and_swap(&self.key, &self.value, &self.value, ttl),
        )
        .await;
        match swapped {
            Ok(true) => Ok(Found::Ours),
            Ok(false) => match timed(limit, storage.get(&self.key)).await? {
                // Ours again (changed and back in between): not refreshed
                // by this attempt; the caller retries.
                Some(found) if found == self.value => Err(StorageError::transient(format!(
                    "the claim {} changed during its refresh",
                    self.key
                ))),
                found => Ok(Found::Other(found)),
            },
            Err(err) => Err(err),
        }
    }
}
