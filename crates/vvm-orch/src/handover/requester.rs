//! The requester's side (an operator's `vvm-host handover`): reads who
//! leads, posts a request addressed to that leadership, follows its state,
//! withdraws it when giving up, and reads the outcome from the store when
//! no answer comes.

use std::time::Duration;

use ttl_storage::{DynTtlStorage, Key, StorageError, Ttl, ValidationError};

use super::{
    REQUEST_TTL,
    record::{self, Addressed, Request, State},
};
use crate::VvmConfig;

/// The requester for one key.
#[derive(Clone)]
pub struct Requester {
    storage: DynTtlStorage,
    lease: Key,
    request: Key,
    bell: Key,
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// What a withdrawal found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Withdrawal {
    /// The request is gone before the leader accepted it: the leader
    /// never acts on it. Nothing happened.
    Withdrawn,
    /// Too late: the leader had accepted (or answered) the request. The
    /// state says what it began, or what happened.
    TooLate(State),
}

/// The outcome of an accepted request as the lease tells it (when no
/// answer was written).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOutcome {
    /// The addressed leadership still holds the lease, or a hand-over
    /// marker does (not taken yet): not finished.
    InProgress,
    /// The accepted candidate leads now.
    HandedOver,
    /// The addressed leadership ended without the accepted candidate
    /// leading: `leader` leads now (`None`: nobody).
    Ended {
        /// The value of whoever leads now.
        leader: Option<Vec<u8>>,
    },
}

impl Requester {
    /// The requester for key `index` of `config`'s keys.
    ///
    /// # Errors
    ///
    /// A key of the layout is not a valid key (a prefix too long).
    pub fn new(
        storage: DynTtlStorage,
        config: &VvmConfig,
        index: u32,
    ) -> Result<Self, ValidationError> {
        let lease = config.key(index)?;
        Ok(Requester {
            storage,
            request: crate::keys::request(&lease)?,
            bell: crate::keys::bell(&lease)?,
            lease,
        })
    }

    /// Who leads the key now: `None` when nobody does (or a hand-over
    /// marker holds it).
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn leader(&self) -> Result<Option<Addressed>, StorageError> {
        Ok(self
            .storage
            .get(&self.lease)
            .await?
            .as_deref()
            .and_then(Addressed::from_record))
    }

    /// Posts `request`, living at least `patience` plus [`REQUEST_TTL`],
    /// and rings the bell. `Ok(false)`: another request is pending (or its
    /// answer is unread): try again later. A pending request addressed to a
    /// leadership that no longer holds the lease is stale (nobody will
    /// serve it) and is cleared first.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn post(&self, request: &Request, patience: Duration) -> Result<bool, StorageError> {
        let lives = patience
            .saturating_add(REQUEST_TTL)
            .min(ttl_storage::MAX_TTL);
        let ttl = Ttl::from_secs(lives.as_secs()).unwrap_or(Ttl::NEVER);
        let mut cleared = false;
        loop {
            if self
                .storage
                .insert_if_not_exists(&self.request, request.as_bytes(), ttl)
                .await?
            {
                break;
            }
            if cleared || !self.clear_stale().await? {
                return Ok(false);
            }
            cleared = true;
        }
        if let Some(ring) = self.storage.get(&self.bell).await? {
            self.storage.compare_and_delete(&self.bell, &ring).await?;
        }
        Ok(true)
    }

    /// Deletes a pending request addressed to a leadership that no longer
    /// leads; true when one was deleted. Deleting pending bytes races only
    /// with an accept of the same bytes: one of them wins.
    async fn clear_stale(&self) -> Result<bool, StorageError> {
        let Some(raw) = self.storage.get(&self.request).await? else {
            return Ok(true);
        };
        let Some(parsed) = record::parse(&raw) else {
            return Ok(false);
        };
        if parsed.state != State::Pending {
            return Ok(false);
        }
        let leads = self.leader().await?;
        if leads.is_some_and(|l| l.nonce == parsed.request.nonce()) {
            return Ok(false);
        }
        self.storage.compare_and_delete(&self.request, &raw).await
    }

    /// The state of `request`.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn state(&self, request: &Request) -> Result<State, StorageError> {
        let raw = self.storage.get(&self.request).await?;
        Ok(record::state_of(raw.as_deref(), request))
    }

    /// Clears `request`'s record once its answer was read, so the next
    /// request need not wait for its expiry (best effort: it expires).
    pub async fn done(&self, request: &Request) {
        if let Ok(Some(raw)) = self.storage.get(&self.request).await
            && matches!(record::state_of(Some(&raw), request), State::Answered(_))
        {
            let _ = self.storage.compare_and_delete(&self.request, &raw).await;
        }
    }

    /// Takes back `request` (a requester that gives up): either it was not
    /// accepted yet, and the leader will never act on it, or it was, and
    /// the state says what the leader began or did.
    ///
    /// # Errors
    ///
    /// The store's error: then the outcome is unknown (read
    /// [`state`](Self::state) again; the withdrawal may have been applied).
    pub async fn withdraw(&self, request: &Request) -> Result<Withdrawal, StorageError> {
        for _ in 0..3 {
            if self
                .storage
                .compare_and_delete(&self.request, request.as_bytes())
                .await?
            {
                return Ok(Withdrawal::Withdrawn);
            }
            match self.state(request).await? {
                // Withdrawn earlier (a delete whose answer was lost), or
                // cleared as stale; never accepted, since an accepted
                // record is only ever replaced by its answer.
                State::Gone => return Ok(Withdrawal::Withdrawn),
                // Still there (changed and back): delete again.
                State::Pending => {}
                state => return Ok(Withdrawal::TooLate(state)),
            }
        }
        Err(StorageError::transient(
            "the request kept changing while it was withdrawn",
        ))
    }

    /// The outcome of `request`, accepted for candidate `to`, as the lease
    /// says (for when the leader's answer does not come).
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn outcome_from_store(
        &self,
        request: &Request,
        to: &str,
    ) -> Result<StoreOutcome, StorageError> {
        let Some(record) = self.storage.get(&self.lease).await? else {
            return Ok(StoreOutcome::Ended { leader: None });
        };
        let Some(now) = Addressed::from_record(&record) else {
            // A marker (or a foreign record): the hand-over is under way.
            return Ok(StoreOutcome::InProgress);
        };
        Ok(if now.nonce == request.nonce() {
            StoreOutcome::InProgress
        } else if now.value == to.as_bytes() {
            StoreOutcome::HandedOver
        } else {
            StoreOutcome::Ended {
                leader: Some(now.value),
            }
        })
    }
}
