//! Visible candidates: a contender waiting in [`crate::Elections::campaign`]
//! announces itself in a short-TTL record beside the lease, so that
//! [`crate::inspect`] can list it and a leader can hand over to it
//! ([`crate::Leadership::hand_over`]).
//!
//! The storage contract has no listing, so the records live in a fixed set
//! of [`MAX_CANDIDATES`] slots, `__candidates__/NN/<key>`: a candidate takes
//! the first free slot (insert-if-not-exists, from a random start), renews
//! it while it waits and deletes it when it stops waiting. A slot holds
//! `cand1 <since, ms since the Unix epoch> <candidate id> <value>`; the id
//! (24 hex digits, unique per campaign) is what a hand-over marker names.
//! A candidate with a priority other than 0 ([`crate::Standby::with_priority`])
//! writes `cand2 <since> <id> <priority> <value>` instead (priority 0 keeps
//! the `cand1` form, byte for byte what older versions write and read).
//! Records are untrusted: one that does not parse is skipped, and a
//! malformed priority counts as 0 (with a warning).

use std::{
    fmt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use ttl_storage::{Key, StorageError, Ttl, TtlStorage, ValidationError};

use crate::fencing::timed;

/// Prefix of the reserved keys that hold candidate records.
pub const CANDIDATE_PREFIX: &str = "__candidates__/";

/// Slots per election key: at most this many waiting candidates are visible
/// (more may wait; they are just not listed, and cannot be named).
pub const MAX_CANDIDATES: usize = 16;

const FORMAT: &[u8] = b"cand1 ";
const FORMAT_PRIORITY: &[u8] = b"cand2 ";

/// The id of one campaign's candidacy: what a hand-over marker names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CandidateId(pub(crate) String);

impl CandidateId {
    /// The elections instance part of the id (its first 16 hex digits):
    /// the same as the instance part of the nonce of every record that
    /// instance writes ([`crate::record::instance_of`]).
    pub(crate) fn instance(&self) -> &str {
        self.0.get(..16).unwrap_or(&self.0)
    }
}

impl fmt::Display for CandidateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A waiting candidate, as its record tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The value it campaigns with (its address, say).
    pub value: Vec<u8>,
    /// When it started waiting (its own wall clock; informative only).
    pub since: SystemTime,
    /// Its candidacy id.
    pub id: CandidateId,
    /// Its priority ([`crate::Standby::with_priority`]; 0 by default): a
    /// free key goes to the highest, and a leader hands over to a higher
    /// one that has stood for the hold-down ([`crate::Preemption`]).
    pub priority: i32,
    pub(crate) slot: usize,
    pub(crate) record: Vec<u8>,
}

/// The key of slot `slot` of election key `key`.
pub(crate) fn slot_key(key: &Key, slot: usize) -> Result<Key, ValidationError> {
    Key::new(format!("{CANDIDATE_PREFIX}{slot:02}/{key}"))
}

/// The TTL of a candidate record for leadership duration `d`: half a lease,
/// at least 2 s (whole seconds). A crashed candidate stays listed that long.
pub(crate) fn ttl(d: Duration) -> Ttl {
    let secs = (d.as_secs() / 2).max(2);
    Ttl::from_secs(secs).unwrap_or(Ttl::NEVER)
}

fn encode(id: &CandidateId, since: SystemTime, priority: i32, value: &[u8]) -> Vec<u8> {
    let ms = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut out;
    if priority == 0 {
        out = FORMAT.to_vec();
        out.extend_from_slice(format!("{ms} {id} ").as_bytes());
    } else {
        out = FORMAT_PRIORITY.to_vec();
        out.extend_from_slice(format!("{ms} {id} {priority} ").as_bytes());
    }
    out.extend_from_slice(value);
    out
}

fn decode(slot: usize, record: &[u8]) -> Option<Candidate> {
    let (rest, fields) = match record.strip_prefix(FORMAT) {
        Some(rest) => (rest, 3),
        None => (record.strip_prefix(FORMAT_PRIORITY)?, 4),
    };
    let mut parts = rest.splitn(fields, |b| *b == b' ');
    let ms: u64 = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let id = std::str::from_utf8(parts.next()?).ok()?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let priority = if fields == 4 {
        let raw = parts.next()?;
        match std::str::from_utf8(raw).ok().and_then(|p| p.parse().ok()) {
            Some(priority) => priority,
            None => {
                tracing::warn!(
                    candidate = id,
                    priority = %String::from_utf8_lossy(raw),
                    "a candidate record carries a malformed priority; counted as 0"
                );
                0
            }
        }
    } else {
        0
    };
    let value = parts.next()?.to_vec();
    Some(Candidate {
        value,
        since: UNIX_EPOCH + Duration::from_millis(ms),
        id: CandidateId(id.to_owned()),
        priority,
        slot,
        record: record.to_vec(),
    })
}

/// Every announced candidate of `key`, highest priority first and
/// longest-waiting first among equals, except those
/// of the elections instance `leader` (the leader's own candidacies, left
/// behind when a withdrawal failed: a leader is never its own candidate).
/// Slots that cannot be read are skipped; the first error is returned only
/// when no slot could be read.
pub(crate) async fn list(
    storage: &dyn TtlStorage,
    key: &Key,
    limit: Duration,
    leader: Option<&str>,
) -> Result<Vec<Candidate>, StorageError> {
    let mut reads = Vec::with_capacity(MAX_CANDIDATES);
    for slot in 0..MAX_CANDIDATES {
        let slot_key = slot_key(key, slot).map_err(|err| {
            StorageError::permanent(format!("the candidate slots of {key}: {err}"))
        })?;
        reads.push(async move { (slot, timed(limit, storage.get(&slot_key)).await) });
    }
    let mut candidates = Vec::new();
    let mut first_error = None;
    let mut answered = false;
    for (slot, read) in futures::future::join_all(reads).await {
        match read {
            Ok(Some(record)) => {
                answered = true;
                if let Some(candidate) = decode(slot, &record)
                    && leader.is_none_or(|leader| candidate.id.instance() != leader)
                {
                    candidates.push(candidate);
                }
            }
            Ok(None) => answered = true,
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    if let (false, Some(err)) = (answered, first_error) {
        return Err(err);
    }
    candidates.sort_by_key(|c| (std::cmp::Reverse(c.priority), c.since));
    Ok(candidates)
}

/// This campaign's candidacy: announced in a slot, renewed, withdrawn.
pub(crate) struct Candidacy {
    pub(crate) id: CandidateId,
    pub(crate) priority: i32,
    value: Vec<u8>,
    record: Vec<u8>,
    /// The `since` the record carries.
    since: SystemTime,
    slot: Option<(usize, Key)>,
    ttl: Ttl,
    refreshed: Option<tokio::time::Instant>,
    /// Start of the last write that put the record in its slot: it lives
    /// at most its TTL after that (plus the clock-rate margin).
    written: Option<tokio::time::Instant>,
}

impl Candidacy {
    pub(crate) fn new(instance: u64, counter: u32, value: &[u8], d: Duration) -> Self {
        let id = CandidateId(format!("{instance:016x}{counter:08x}"));
        let since = SystemTime::now();
        let record = encode(&id, since, 0, value);
        Candidacy {
            id,
            priority: 0,
            value: value.to_vec(),
            record,
            since,
            slot: None,
            ttl: ttl(d),
            refreshed: None,
            written: None,
        }
    }

    /// Sets the priority (before the record is first announced).
    pub(crate) fn set_priority(&mut self, priority: i32) {
        self.priority = priority;
        // Not yet announced: the same `since` (a restamp could put it a
        // millisecond ahead of the wall clock).
        self.record = encode(&self.id, self.since, self.priority, &self.value);
    }

    /// A fresh record (`since` now): a candidacy with a priority whose
    /// record vanished announces itself anew, so a leader's hold-down
    /// ([`crate::Preemption`]) restarts even if it missed the gap. The new
    /// `since` is at least a millisecond after the old one, so the bytes
    /// always change (a re-announcement within the same millisecond of the
    /// wall clock, or after the clock stepped back, would otherwise look
    /// unchanged; the deterministic simulation, whose wall clock runs on
    /// its own, would not replay).
    fn restamp(&mut self) {
        let next = self.since + Duration::from_millis(1);
        self.since = SystemTime::now().max(next);
        self.record = encode(&self.id, self.since, self.priority, &self.value);
    }

    /// The slot key held, if any (to watch it: a hand-over to this
    /// candidate deletes it).
    pub(crate) fn slot_key(&self) -> Option<&Key> {
        self.slot.as_ref().map(|(_, key)| key)
    }

    /// Announces (or renews) the record when due: every third of its TTL.
    pub(crate) async fn keep_up(&mut self, storage: &dyn TtlStorage, key: &Key, limit: Duration) {
        let ttl = Duration::from_secs(self.ttl.as_secs());
        if let (Some(at), Some(_)) = (self.refreshed, &self.slot)
            && at.elapsed() < ttl / 3
        {
            return;
        }
        if let Some((_, slot_key)) = &self.slot {
            let start = tokio::time::Instant::now();
            match timed(
                limit,
                storage.compare_and_swap(slot_key, &self.record, &self.record, self.ttl),
            )
            .await
            {
                Ok(true) => {
                    self.refreshed = Some(tokio::time::Instant::now());
                    self.written = Some(start);
                    return;
                }
                // Gone (expired, or deleted by a hand-over): announce again
                // (with a priority, as a new candidacy: its hold-down restarts).
                Ok(false) => {
                    self.slot = None;
                    if self.priority != 0 {
                        self.restamp();
                    }
                }
                Err(err) => {
                    tracing::debug!(%key, error = %err, "could not renew the candidate record");
                    return;
                }
            }
        }
        // Spread candidates over the slots by the counter part of their id
        // (the last 8 hex digits): not by a random draw, nor by the random
        // instance part, so a deterministic simulation replays exactly even
        // for contenders (whole VVMs) whose instance id is random.
        let counter = self.id.0.get(16..).unwrap_or(&self.id.0);
        let start = counter.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        }) % MAX_CANDIDATES;
        for i in 0..MAX_CANDIDATES {
            let slot = (start + i) % MAX_CANDIDATES;
            let Ok(slot_key) = slot_key(key, slot) else {
                return;
            };
            let start = tokio::time::Instant::now();
            match timed(
                limit,
                storage.insert_if_not_exists(&slot_key, &self.record, self.ttl),
            )
            .await
            {
                Ok(true) => {
                    self.slot = Some((slot, slot_key));
                    self.refreshed = Some(tokio::time::Instant::now());
                    self.written = Some(start);
                    return;
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::debug!(%key, error = %err, "could not announce the candidacy");
                    return;
                }
            }
        }
        tracing::warn!(%key, "all {MAX_CANDIDATES} candidate slots are taken; waiting unlisted");
    }

    /// Makes the next [`keep_up`](Self::keep_up) check the record (and
    /// announce again if it is gone) instead of waiting for its refresh.
    pub(crate) fn check_soon(&mut self) {
        self.refreshed = None;
    }

    /// The withdrawal of the announced record, if any (the candidacy no
    /// longer holds a slot afterwards): run it with [`Withdrawal::run`].
    pub(crate) fn withdrawal(&mut self, limit: Duration) -> Option<Withdrawal> {
        let (_, slot) = self.slot.take()?;
        let ttl = Duration::from_secs(self.ttl.as_secs());
        // After this the record has expired, even on a store whose clock
        // runs 20 % slow: nothing is left to withdraw.
        let until = self
            .written
            .map_or_else(tokio::time::Instant::now, |at| at + ttl + ttl / 5);
        Some(Withdrawal {
            slot,
            record: self.record.clone(),
            until,
            limit,
        })
    }
}

/// Deletes a candidate record that is no longer waiting (its campaign won,
/// failed or was dropped). Retried until it succeeds or the record has
/// expired anyway, so a store error does not leave the candidate listed
/// for long (a winner is never listed meanwhile: listings leave out the
/// leader's own candidacies).
pub(crate) struct Withdrawal {
    slot: Key,
    record: Vec<u8>,
    until: tokio::time::Instant,
    limit: Duration,
}

impl Withdrawal {
    /// Runs the withdrawal to its end.
    pub(crate) async fn run(self, storage: &dyn TtlStorage) {
        let pause = (self.limit / 5).max(Duration::from_millis(50));
        loop {
            match timed(
                self.limit,
                storage.compare_and_delete(&self.slot, &self.record),
            )
            .await
            {
                Ok(_) => return,
                Err(err) if tokio::time::Instant::now() >= self.until => {
                    tracing::debug!(slot = %self.slot, error = %err, "candidate record not withdrawn; it has expired by now");
                    return;
                }
                Err(err) => {
                    tracing::debug!(slot = %self.slot, error = %err, "could not withdraw the candidate record; retrying");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let id = CandidateId("0123456789abcdef00000001".into());
        let since = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let record = encode(&id, since, 0, b"10.0.0.7 with spaces");
        assert!(record.starts_with(b"cand1 1700000000123 0123"));
        let c = decode(3, &record).unwrap();
        assert_eq!(c.value, b"10.0.0.7 with spaces");
        assert_eq!(c.since, since);
        assert_eq!(c.id, id);
        assert_eq!(c.priority, 0);
        assert_eq!(c.slot, 3);
        assert!(decode(0, b"garbage").is_none());
        assert!(decode(0, b"cand1 12 zz value").is_none());
    }

    #[test]
    fn priority_round_trip_and_untrusted_priorities() {
        let id = CandidateId("0123456789abcdef00000001".into());
        let since = UNIX_EPOCH + Duration::from_millis(5);
        for priority in [1, -3, i32::MAX, i32::MIN] {
            let c = decode(0, &encode(&id, since, priority, b"a b")).unwrap();
            assert_eq!((c.priority, c.value.as_slice()), (priority, &b"a b"[..]));
        }
        // Malformed priorities count as 0; the candidate is still listed.
        for bad in [
            &b"cand2 5 0123 x9 v"[..],
            b"cand2 5 0123 99999999999 v",
            b"cand2 5 0123  v",
            b"cand2 5 0123 \xff v",
        ] {
            let c = decode(0, bad).unwrap();
            assert_eq!(c.priority, 0, "{}", String::from_utf8_lossy(bad));
        }
        assert!(decode(0, b"cand2 5 0123 7").is_none(), "no value field");
        assert!(decode(0, b"cand2 5").is_none());
    }

    #[test]
    fn a_restamp_always_changes_the_record() {
        let mut c = Candidacy::new(1, 2, b"v", Duration::from_secs(20));
        c.set_priority(3);
        let mut seen = std::collections::HashSet::new();
        // Far faster than the wall clock's milliseconds.
        for _ in 0..100 {
            assert!(
                seen.insert(c.record.clone()),
                "a re-announcement kept its bytes"
            );
            c.restamp();
        }
    }
}
