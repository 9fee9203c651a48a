//! Hand-over requests through the store: another process (an operator's
//! `vvm-host handover`) asks the VVM leading key `index` to hand its
//! leadership to a waiting candidate ([`elections::Leadership::hand_over`]).
//!
//! Two records beside the lease, both short-lived:
//!
//! - the **request** `{prefix}handover/{index}`: `hreq1 <id> <to>` (`to`
//!   empty: any candidate), written by the requester with
//!   insert-if-not-exists, so one request at a time; the leader answers by
//!   swapping it for `hrep1 <id> <answer>` (see [`Answer`]);
//! - the **bell** `{prefix}handover-bell/{index}`: the leader keeps it while
//!   it leads; the requester deletes it after writing the request, which
//!   wakes the leader at once on drivers that watch. Without a watch the
//!   leader reads the request every `min(d/4, 1 s)`.
//!
//! The leader stops its services before the lease moves, as on shutdown:
//! the hand-over is the release's safety argument plus a marker that only
//! the named candidate may take (see `docs/guarantees.md`).

use std::time::Duration;

use ttl_storage::{DynTtlStorage, Key, StorageError, Ttl, ValidationError};

use crate::VvmConfig;

const REQUEST: &str = "hreq1";
const REPLY: &str = "hrep1";

/// The request record of key `index`.
pub fn request_key(config: &VvmConfig, index: u32) -> Result<Key, ValidationError> {
    Key::new(format!("{}handover/{index}", config.key_prefix))
}

/// The bell record of key `index`.
pub fn bell_key(config: &VvmConfig, index: u32) -> Result<Key, ValidationError> {
    Key::new(format!("{}handover-bell/{index}", config.key_prefix))
}

/// A hand-over request, as the leader reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The requester's id (echoed in the answer).
    pub id: String,
    /// The address of the candidate to hand over to; `None`: the one that
    /// has waited longest.
    pub to: Option<String>,
    raw: Vec<u8>,
}

impl Request {
    /// A new request with a random id.
    pub fn new(to: Option<&str>) -> Self {
        let id = format!("{:016x}", rand::random::<u64>());
        let raw = format!("{REQUEST} {id} {}", to.unwrap_or_default()).into_bytes();
        Request {
            id,
            to: to.map(str::to_owned),
            raw,
        }
    }

    /// The record's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// Reads a request record; `None` for anything else (an answer, garbage).
    pub fn parse(raw: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?;
        let rest = text.strip_prefix(REQUEST)?.strip_prefix(' ')?;
        let (id, to) = rest.split_once(' ')?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Request {
            id: id.to_owned(),
            to: (!to.is_empty()).then(|| to.to_owned()),
            raw: raw.to_vec(),
        })
    }
}

/// The leader's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// The lease is reserved for this candidate (its value); it takes the
    /// key within the marker's TTL, or anyone may after.
    HandedOver(String),
    /// No candidate waits (or none with the requested address): the leader
    /// keeps leading.
    NoCandidate,
    /// The hand-over failed after the services stopped: the leadership was
    /// released (anyone may take the key).
    Released(String),
}

impl Answer {
    fn encode(&self, id: &str) -> Vec<u8> {
        let (word, detail) = match self {
            Answer::HandedOver(to) => ("handed-over", to.as_str()),
            Answer::NoCandidate => ("no-candidate", ""),
            Answer::Released(why) => ("released", why.as_str()),
        };
        format!("{REPLY} {id} {word} {detail}").into_bytes()
    }

    /// Reads the answer to request `id` from the request record; `None`
    /// while it is unanswered (or holds something else).
    pub fn parse(raw: &[u8], id: &str) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?;
        let rest = text.strip_prefix(REPLY)?.strip_prefix(' ')?;
        let rest = rest.strip_prefix(id)?.strip_prefix(' ')?;
        let (word, detail) = rest.split_once(' ').unwrap_or((rest, ""));
        match word {
            "handed-over" => Some(Answer::HandedOver(detail.to_owned())),
            "no-candidate" => Some(Answer::NoCandidate),
            "released" => Some(Answer::Released(detail.to_owned())),
            _ => None,
        }
    }
}

/// How long a request and its answer live: a requester that gave up leaves
/// nothing behind for longer.
pub const REQUEST_TTL: Duration = Duration::from_secs(60);

fn request_ttl() -> Ttl {
    Ttl::from_secs(REQUEST_TTL.as_secs()).unwrap_or(Ttl::NEVER)
}

/// The requester's side (an operator's `vvm-host handover`): posts a
/// request for one key, reads the answer, withdraws it on giving up.
#[derive(Clone)]
pub struct Requester {
    storage: DynTtlStorage,
    request: Key,
    bell: Key,
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

impl Requester {
    /// The requester for key `index` of `config`'s keys.
    ///
    /// # Errors
    ///
    /// The request or bell key is not a valid key (a prefix too long).
    pub fn new(
        storage: DynTtlStorage,
        config: &VvmConfig,
        index: u32,
    ) -> Result<Self, ValidationError> {
        Ok(Requester {
            storage,
            request: request_key(config, index)?,
            bell: bell_key(config, index)?,
        })
    }

    /// Posts `request` and rings the bell. `Ok(false)`: another request is
    /// pending (or its answer is unread): try again later.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn post(&self, request: &Request) -> Result<bool, StorageError> {
        if !self
            .storage
            .insert_if_not_exists(&self.request, request.as_bytes(), request_ttl())
            .await?
        {
            return Ok(false);
        }
        if let Some(ring) = self.storage.get(&self.bell).await? {
            self.storage.compare_and_delete(&self.bell, &ring).await?;
        }
        Ok(true)
    }

    /// The answer to `request`, once there is one (`None`: not yet); an
    /// answer read is cleared, so the next request need not wait for its
    /// expiry.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn answer(&self, request: &Request) -> Result<Option<Answer>, StorageError> {
        let Some(raw) = self.storage.get(&self.request).await? else {
            return Ok(None);
        };
        let Some(answer) = Answer::parse(&raw, &request.id) else {
            return Ok(None);
        };
        self.storage.compare_and_delete(&self.request, &raw).await?;
        Ok(Some(answer))
    }

    /// Takes back an unanswered `request` (a requester that gives up).
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn withdraw(&self, request: &Request) -> Result<bool, StorageError> {
        self.storage
            .compare_and_delete(&self.request, request.as_bytes())
            .await
    }
}

/// The leader's side: keeps the bell up and waits for a request.
pub(crate) struct Listener {
    storage: DynTtlStorage,
    request: Key,
    bell: Key,
    ring: Vec<u8>,
    ttl: Ttl,
    poll: Duration,
    limit: Duration,
}

impl Listener {
    pub(crate) fn new(
        storage: DynTtlStorage,
        config: &VvmConfig,
        index: u32,
        value: &str,
    ) -> Result<Self, ValidationError> {
        let d = config.leadership_duration;
        Ok(Listener {
            storage,
            request: request_key(config, index)?,
            bell: bell_key(config, index)?,
            ring: value.as_bytes().to_vec(),
            ttl: Ttl::from_secs(d.as_secs().max(1)).unwrap_or(Ttl::NEVER),
            poll: (d / 4).min(elections::MAX_POLL_INTERVAL),
            limit: d / 4,
        })
    }

    /// Waits for the next request (store errors are logged and retried).
    ///
    /// On a driver that watches, the bell is refreshed every `d/4` (and put
    /// back after it rang) and the request is read when the bell rings, or
    /// every `d/4` as a fallback: one write and one read per `d/4`, like a
    /// renewal. Without a watch there is no bell, and the request is read
    /// every `min(d/4, 1 s)`.
    pub(crate) async fn next(&self) -> Request {
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
                    if let Some(request) = Request::parse(&raw) {
                        return request;
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

    /// Puts the bell up (or refreshes it), best effort.
    async fn keep_bell(&self) {
        let write = async {
            if !self
                .storage
                .compare_and_swap(&self.bell, &self.ring, &self.ring, self.ttl)
                .await?
            {
                self.storage
                    .insert_if_not_exists(&self.bell, &self.ring, self.ttl)
                    .await?;
            }
            Ok::<_, StorageError>(())
        };
        if let Ok(Err(err)) = tokio::time::timeout(self.limit, write).await {
            tracing::debug!(error = %err, "cannot put up the hand-over bell");
        }
    }

    /// Answers `request` (best effort: the requester times out otherwise).
    pub(crate) async fn reply(&self, request: &Request, answer: &Answer) {
        let encoded = answer.encode(&request.id);
        let write = self.storage.compare_and_swap(
            &self.request,
            request.as_bytes(),
            &encoded,
            request_ttl(),
        );
        match tokio::time::timeout(self.limit, write).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "cannot answer the hand-over request"),
            Err(_) => tracing::warn!("answering the hand-over request timed out"),
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

/// The address part of a VVM's leadership value (`address#pid…`): what
/// a hand-over request's `to` names.
pub fn address_of(value: &[u8]) -> &[u8] {
    match value.iter().rposition(|b| *b == b'#') {
        Some(at) => &value[..at],
        None => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_answer_round_trip() {
        let request = Request::new(Some("10.0.0.9:80"));
        let read = Request::parse(request.as_bytes()).unwrap();
        assert_eq!(read, request);
        assert_eq!(read.to.as_deref(), Some("10.0.0.9:80"));
        let any = Request::parse(Request::new(None).as_bytes()).unwrap();
        assert_eq!(any.to, None);
        for answer in [
            Answer::HandedOver("b#pid1-0".into()),
            Answer::NoCandidate,
            Answer::Released("store down".into()),
        ] {
            let raw = answer.encode(&request.id);
            assert_eq!(Answer::parse(&raw, &request.id), Some(answer));
            assert_eq!(Answer::parse(&raw, "0000"), None);
            assert_eq!(Request::parse(&raw), None);
        }
        assert_eq!(Request::parse(b"hreq1 zz x"), None);
        assert_eq!(address_of(b"10.0.0.7#pid12-abcd"), b"10.0.0.7");
        assert_eq!(address_of(b"plain"), b"plain");
    }
}
