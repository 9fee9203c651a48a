//! One etcd lease per TTL for all the records an [`crate::EtcdStorage`]
//! writes, kept alive on demand: a renewal is a keep-alive, not a write.
//!
//! - **Expiry never earlier than asked.** A write or renewal that started
//!   at `t` attaches its record to the shared lease only after a
//!   keep-alive (or grant) *sent at or after* `t` was answered, so the
//!   record lives at least `t + TTL` on the etcd leader's clock.
//!   Keep-alives are coalesced: callers queue on one lock per lease, and a
//!   caller whose start precedes the send of the last answered keep-alive
//!   takes its answer instead of sending another (so under load there is
//!   about one keep-alive per round trip, whatever the number of records).
//! - **A record no one renews still expires.** The lease is kept alive as
//!   long as anything of this storage with that TTL is renewed, so a record
//!   the caller stopped renewing without deleting it (a release whose
//!   delete was lost, a leadership given up) would live on. Each record
//!   attached to the lease is remembered with the start of its last
//!   confirmed write or renewal and, where known, its `mod_revision`. About
//!   once a second, before a keep-alive, records not confirmed for a whole
//!   TTL are deleted (`IF lease = L AND mod_revision = r THEN delete`: a
//!   record written again since is never touched); when that cannot be
//!   done (an unknown revision, an error), the lease is **retired**
//!   instead: a new lease is granted, the old one is never kept alive
//!   again, and live records move to the new one at their next renewal
//!   (one write each). So a forgotten record expires at most two TTLs and
//!   a sweep interval after its last renewal, and at most two leases per
//!   TTL exist while one is retiring.
//! - A lease found gone (expired while this process was paused or cut off:
//!   its records are gone with it) is replaced by a fresh grant.

use std::{collections::HashMap, sync::Arc, time::Duration};

use etcd_client::{Client, Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, Txn, TxnOp};
use tokio::time::Instant;
use ttl_storage::{ErrorKind, Result, StorageError};

use crate::{
    error::{EtcdError, Op, classify, describe},
    unsent,
};

/// How often, at most, the records attached to a lease are checked for
/// ones no one renews.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The shared leases of one storage, one per TTL (in whole seconds).
pub(crate) struct Leases {
    client: Client,
    timeout: Duration,
    slots: std::sync::Mutex<HashMap<i64, Arc<Slot>>>,
    /// Every record attached to a shared lease by this storage.
    attached: std::sync::Mutex<HashMap<String, Attached>>,
}

/// A record on a shared lease, as this storage last confirmed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attached {
    lease: i64,
    /// The lease's TTL in seconds (which slot it belongs to).
    secs: i64,
    /// The start of the last write or renewal that put or found it there.
    since: Instant,
    /// Its `mod_revision` then, when known (a write whose answer was lost
    /// leaves it unknown).
    revision: Option<i64>,
}

struct Slot {
    secs: i64,
    state: tokio::sync::Mutex<SlotState>,
}

/// How a keep-alive or grant ended: the lease, or why not.
type Outcome = std::result::Result<i64, (ErrorKind, String)>;

#[derive(Default)]
struct SlotState {
    /// The lease records are attached to now; `None`: grant one first.
    lease: Option<i64>,
    /// The keep-alive stream of `lease`, opened on first use.
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// The last keep-alive or grant: when it was sent and how it ended.
    last: Option<(Instant, Outcome)>,
    last_sweep: Option<Instant>,
}

impl Leases {
    pub(crate) fn new(client: Client, timeout: Duration) -> Self {
        Leases {
            client,
            timeout,
            slots: std::sync::Mutex::default(),
            attached: std::sync::Mutex::default(),
        }
    }

    fn slot(&self, secs: i64) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(slots.entry(secs).or_insert_with(|| {
            Arc::new(Slot {
                secs,
                state: tokio::sync::Mutex::default(),
            })
        }))
    }

    /// The shared lease of `secs`, after a keep-alive (or grant) sent at or
    /// after `after` was answered: a record attached to it now lives at
    /// least until `after + secs` on the etcd leader's clock. Errors are
    /// never "unknown" (a keep-alive changes no record).
    pub(crate) async fn kept_alive_since(
        &self,
        secs: i64,
        after: Instant,
        what: &str,
    ) -> Result<i64> {
        let slot = self.slot(secs);
        let mut state = slot.state.lock().await;
        if let Some((sent, outcome)) = &state.last
            && *sent >= after
        {
            return answer(outcome, what);
        }
        self.sweep(&slot, &mut state).await;
        let sent = Instant::now();
        let outcome = self.renew_or_grant(&slot, &mut state).await;
        let result = answer(&outcome, what);
        state.last = Some((sent, outcome));
        result
    }

    /// Keeps `state.lease` alive, or grants a new one.
    async fn renew_or_grant(&self, slot: &Slot, state: &mut SlotState) -> Outcome {
        if let Some(lease) = state.lease {
            match self.renew(lease, &mut state.stream).await {
                Ok(true) => return Ok(lease),
                Ok(false) => {
                    tracing::debug!(
                        lease,
                        "the shared lease is gone (expired); granting another"
                    );
                    state.lease = None;
                }
                Err(err) => {
                    state.stream = None;
                    return Err(err);
                }
            }
        }
        let secs = slot.secs;
        let granted = unsent::retry(|| {
            let mut client = self.client.clone();
            async move { client.lease_grant(secs, None).await }
        })
        .await
        .map_err(|err| failure(&err, "lease grant"))?;
        state.lease = Some(granted.id());
        state.stream = None;
        Ok(granted.id())
    }

    /// One keep-alive of `lease` on its stream (opened if needed): `true`
    /// renewed, `false` the lease no longer exists.
    async fn renew(
        &self,
        lease: i64,
        stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    ) -> std::result::Result<bool, (ErrorKind, String)> {
        let Some((keeper, answers)) = stream else {
            // Opening the stream sends the first keep-alive and reads its
            // answer.
            // A member that is down fails the open before anything was
            // sent ("tcp connect error"): sent again, as every request.
            let opened = tokio::time::timeout(
                self.timeout,
                unsent::retry(|| {
                    let mut client = self.client.clone();
                    async move { client.lease_keep_alive(lease).await }
                }),
            )
            .await;
            return match opened {
                Err(_) => Err(timed_out(self.timeout)),
                Ok(Ok(opened)) => {
                    *stream = Some(opened);
                    Ok(true)
                }
                Ok(Err(EtcdError::LeaseKeepAliveError(message)))
                    if message.contains("lease not found") =>
                {
                    Ok(false)
                }
                Ok(Err(err)) => Err(failure(&err, "lease keep-alive")),
            };
        };
        let answered = tokio::time::timeout(self.timeout, async {
            keeper.keep_alive().await?;
            answers.message().await
        })
        .await;
        match answered {
            Err(_) => Err(timed_out(self.timeout)),
            Ok(Ok(Some(answer))) => Ok(answer.ttl() > 0),
            Ok(Ok(None)) => Err((
                ErrorKind::Transient,
                "lease keep-alive: the stream ended".to_string(),
            )),
            Ok(Err(err)) => Err(failure(&err, "lease keep-alive")),
        }
    }

    /// Deletes the records attached to this slot's lease that no one
    /// confirmed for a whole TTL, or retires the lease when one of them
    /// cannot be deleted for certain.
    async fn sweep(&self, slot: &Slot, state: &mut SlotState) {
        let Some(lease) = state.lease else { return };
        let now = Instant::now();
        if state
            .last_sweep
            .is_some_and(|at| now.duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        state.last_sweep = Some(now);
        let ttl = Duration::from_secs(u64::try_from(slot.secs).unwrap_or(0));
        let forgotten: Vec<(String, Attached)> = {
            let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
            // Records on this TTL's retired leases lapse with them: no
            // bookkeeping needed.
            attached.retain(|_, a| a.secs != slot.secs || a.lease == lease);
            attached
                .iter()
                .filter(|(_, a)| a.lease == lease && now.duration_since(a.since) > ttl)
                .map(|(k, a)| (k.clone(), *a))
                .collect()
        };
        if forgotten.is_empty() {
            return;
        }
        let mut retire = false;
        for (key, seen) in &forgotten {
            let Some(revision) = seen.revision else {
                retire = true;
                break;
            };
            let txn = Txn::new()
                .when([
                    Compare::lease(key.clone(), CompareOp::Equal, lease),
                    Compare::mod_revision(key.clone(), CompareOp::Equal, revision),
                ])
                .and_then([TxnOp::delete(key.clone(), None)]);
            let sent = unsent::retry(|| {
                let mut client = self.client.clone();
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })
            .await;
            match sent {
                Ok(_) => {
                    tracing::debug!(key, "deleted a record no one renewed for a whole TTL");
                    self.forget_if(key, seen);
                }
                Err(err) => {
                    tracing::debug!(key, err = %describe(&err), "deleting a forgotten record failed");
                    retire = true;
                    break;
                }
            }
        }
        if retire {
            tracing::debug!(
                lease,
                "retiring the shared lease: a record no one renews is on it; a new lease for the others"
            );
            state.lease = None;
            state.stream = None;
        }
    }

    /// Remembers that a write attaching `key` to `lease` starts at `since`
    /// (revision unknown until it is answered). Returns what was
    /// remembered before, for [`Leases::undo`].
    pub(crate) fn pending(
        &self,
        key: &str,
        (secs, lease, since): (i64, i64, Instant),
    ) -> Option<Attached> {
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        attached.insert(
            key.to_string(),
            Attached {
                lease,
                secs,
                since,
                revision: None,
            },
        )
    }

    /// A write announced with [`Leases::pending`] certainly did not apply:
    /// what was remembered before comes back.
    pub(crate) fn undo(
        &self,
        key: &str,
        (secs, lease, since): (i64, i64, Instant),
        before: Option<Attached>,
    ) {
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        let ours = Attached {
            lease,
            secs,
            since,
            revision: None,
        };
        if attached.get(key) == Some(&ours) {
            match before {
                Some(before) => attached.insert(key.to_string(), before),
                None => attached.remove(key),
            };
        }
    }

    /// `key` is on `lease` at `revision`, as of a write or renewal that
    /// started at `since`.
    pub(crate) fn confirm(
        &self,
        key: &str,
        (secs, lease, since): (i64, i64, Instant),
        revision: i64,
    ) {
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        let confirmed = Attached {
            lease,
            secs,
            since,
            revision: Some(revision),
        };
        let entry = attached.entry(key.to_string()).or_insert(confirmed);
        if since >= entry.since || entry.lease != lease {
            *entry = Attached {
                lease,
                secs,
                since,
                revision: Some(revision),
            };
        }
    }

    /// `key` was seen at `revision` holding another record than the one
    /// asked for: `seen` is that record's `mod_revision` (`None`: no record).
    /// What this storage remembers of the key is forgotten only if it was
    /// replaced by then: a write applied later (racing the call that looked)
    /// and a write whose answer has not come are kept, and so is the record
    /// that was seen if it is this storage's own (another value it wrote).
    /// Each is on the lease; forgetting it would keep it alive with the
    /// lease, never swept.
    pub(crate) fn forget(&self, key: &str, seen: Option<i64>, revision: i64) {
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        let replaced = attached
            .get(key)
            .is_some_and(|a| a.revision.is_some_and(|r| r <= revision && Some(r) != seen));
        if replaced {
            attached.remove(key);
        }
    }

    fn forget_if(&self, key: &str, seen: &Attached) {
        let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        if attached.get(key) == Some(seen) {
            attached.remove(key);
        }
    }
}

fn answer(outcome: &Outcome, what: &str) -> Result<i64> {
    match outcome {
        Ok(lease) => Ok(*lease),
        Err((kind, message)) => Err(match kind {
            ErrorKind::Permanent => StorageError::permanent(format!("{what}: {message}")),
            _ => StorageError::transient(format!("{what}: {message}")),
        }),
    }
}

/// A keep-alive or grant that failed: it changes no record, so never
/// "unknown".
fn failure(err: &EtcdError, what: &str) -> (ErrorKind, String) {
    let kind = match classify(err, Op::Read) {
        ErrorKind::Permanent => ErrorKind::Permanent,
        _ => ErrorKind::Transient,
    };
    (kind, format!("{what} failed: {}", describe(err)))
}

fn timed_out(after: Duration) -> (ErrorKind, String) {
    (
        ErrorKind::Transient,
        format!("lease keep-alive: no answer within {after:?}"),
    )
}
