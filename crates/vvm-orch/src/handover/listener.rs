//! The leader's side: keeps the bell up, waits for a request addressed to
//! its own leadership, accepts it before acting, answers it after.

use std::time::Duration;

use ttl_storage::{DynTtlStorage, Key, StorageError, Ttl, ValidationError};

use super::{
    REQUEST_TTL,
    record::{self, Answer, Request, State},
};
use crate::VvmConfig;

/// A request the leader must serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Served {
    /// Not accepted yet: refuse it, or accept it and act.
    Pending(Request),
    /// Accepted by this leadership earlier (an accept whose answer was lost
    /// and that was applied): act on it, for this candidate (its value).
    Accepted(Request, String),
}

/// What an accept did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Accept {
    /// The request is accepted: act on it, then answer.
    Accepted,
    /// The request is gone or was changed (the requester withdrew it):
    /// do nothing.
    Withdrawn,
    /// The store did not say: do nothing now; the request is read again.
    Unknown,
}

/// The leader's side of one key's requests.
pub(crate) struct Listener {
    storage: DynTtlStorage,
    request: Key,
    bell: Key,
    ring: Vec<u8>,
    /// The nonce of this leadership's record: only requests naming it are
    /// this leader's to serve.
    nonce: String,
    bell_ttl: Ttl,
    answer_ttl: Ttl,
    poll: Duration,
    limit: Duration,
}

impl Listener {
    pub(crate) fn new(
        storage: DynTtlStorage,
        config: &VvmConfig,
        lease: &Key,
        record: &[u8],
    ) -> Result<Self, ValidationError> {
        let d = config.leadership_duration;
        let nonce = elections::record::nonce(record)
            .and_then(|n| std::str::from_utf8(n).ok())
            .unwrap_or_default()
            .to_owned();
        Ok(Listener {
            storage,
            request: crate::keys::request(lease)?,
            bell: crate::keys::bell(lease)?,
            ring: elections::record::leader_value(record).to_vec(),
            nonce,
            bell_ttl: Ttl::from_secs(d.as_secs().max(1)).unwrap_or(Ttl::NEVER),
            // Long enough for the services to stop and the answer to follow.
            answer_ttl: Ttl::from_secs((REQUEST_TTL + 2 * d).as_secs()).unwrap_or(Ttl::NEVER),
            poll: (d / 4).min(elections::MAX_POLL_INTERVAL),
            limit: d / 4,
        })
    }

    /// The pause between two reads of the request without a bell.
    pub(crate) fn poll(&self) -> Duration {
        self.poll
    }

    /// Waits for the next request addressed to this leadership, pending or
    /// accepted (store errors are logged and retried). Requests addressed
    /// to another leadership (a predecessor's) and answered ones are
    /// ignored.
    ///
    /// On a driver that watches, the bell is refreshed every `d/4` (and put
    /// back after it rang) and the request is read when the bell rings, or
    /// every `d/4` as a fallback: one write and one read per `d/4`, like a
    /// renewal. Without a watch there is no bell, and the request is read
    /// every `min(d/4, 1 s)`.
    pub(crate) async fn next(&self) -> Served {
        let watches = self.storage.watch(&self.bell).is_ok();
        let mut bell_due = watches;
        let mut refreshed = tokio::time::Instant::now();
        loop {
            if watches && (bell_due || refreshed.elapsed() >= self.limit) {
                self.keep_bell().await;
                refreshed = tokio::time::Instant::now();
            }
            match tokio::time::timeout(self.limit, self.storage.get(&self.request)).await {
                Ok(Ok(Some(raw))) => {
                    if let Some(served) = self.ours(&raw) {
                        return served;
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(err)) => tracing::debug!(error = %err, "cannot read hand-over requests"),
                Err(_) => tracing::debug!("reading hand-over requests timed out"),
            }
            bell_due = match self.storage.watch(&self.bell).ok().filter(|_| watches) {
                Some(rung) => {
                    tokio::select! {
                        () = rung => true,
                        () = tokio::time::sleep(self.limit) => false,
                    }
                }
                None => {
                    tokio::time::sleep(self.poll).await;
                    false
                }
            };
        }
    }

    /// The request in `raw`, if it is this leadership's to serve.
    fn ours(&self, raw: &[u8]) -> Option<Served> {
        let parsed = record::parse(raw)?;
        if self.nonce.is_empty() || parsed.request.nonce() != self.nonce {
            tracing::debug!(
                id = parsed.request.id(),
                "a hand-over request addressed to another leadership; ignored"
            );
            return None;
        }
        match parsed.state {
            State::Pending => Some(Served::Pending(parsed.request)),
            State::Accepted { to } => Some(Served::Accepted(parsed.request, to)),
            State::Answered(_) | State::Gone => None,
        }
    }

    /// Accepts `request` for the candidate `to` (its value): after this the
    /// requester can no longer withdraw it.
    pub(crate) async fn accept(&self, request: &Request, to: &str) -> Accept {
        let accepted = request.accepted(to);
        let write = self.storage.compare_and_swap(
            &self.request,
            request.as_bytes(),
            &accepted,
            self.answer_ttl,
        );
        match tokio::time::timeout(self.limit, write).await {
            Ok(Ok(true)) => return Accept::Accepted,
            Ok(Ok(false)) => return Accept::Withdrawn,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "accepting the hand-over request failed; reading it back")
            }
            Err(_) => tracing::warn!("accepting the hand-over request timed out; reading it back"),
        }
        match tokio::time::timeout(self.limit, self.storage.get(&self.request)).await {
            Ok(Ok(raw)) => match record::state_of(raw.as_deref(), request) {
                State::Accepted { to: theirs } if theirs == to => Accept::Accepted,
                State::Pending => Accept::Unknown,
                _ => Accept::Withdrawn,
            },
            _ => Accept::Unknown,
        }
    }

    /// Answers `request`, whose record holds `current` (its pending or
    /// accepted bytes). Best effort, a few tries: a requester that gets no
    /// answer reads the outcome from the lease.
    pub(crate) async fn answer(&self, request: &Request, current: &[u8], answer: &Answer) {
        let answered = request.answered(answer);
        for attempt in 1..=3 {
            let write =
                self.storage
                    .compare_and_swap(&self.request, current, &answered, self.answer_ttl);
            match tokio::time::timeout(self.limit, write).await {
                Ok(Ok(_)) => return,
                Ok(Err(err)) => {
                    tracing::warn!(attempt, error = %err, "cannot answer the hand-over request");
                }
                Err(_) => tracing::warn!(attempt, "answering the hand-over request timed out"),
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Puts the bell up (or refreshes it), best effort.
    async fn keep_bell(&self) {
        let write = async {
            if !self
                .storage
                .compare_and_swap(&self.bell, &self.ring, &self.ring, self.bell_ttl)
                .await?
            {
                self.storage
                    .insert_if_not_exists(&self.bell, &self.ring, self.bell_ttl)
                    .await?;
            }
            Ok::<_, StorageError>(())
        };
        if let Ok(Err(err)) = tokio::time::timeout(self.limit, write).await {
            tracing::debug!(error = %err, "cannot put up the hand-over bell");
        }
    }

    /// Takes the bell down when the leadership ends (best effort).
    pub(crate) async fn close(&self) {
        let _ = tokio::time::timeout(
            self.limit,
            self.storage.compare_and_delete(&self.bell, &self.ring),
        )
        .await;
    }
}
