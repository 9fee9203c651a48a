//! [`observe`](super::observe) on a store that reports its writes
//! ([`TtlStorage::changes`](ttl_storage::TtlStorage::changes)): every
//! leadership is reported, even one that begins and ends between two reads,
//! with the token its write took when the store tells it.
//!
//! While the feed is armed, a new leader is known only from the feed, in
//! the store's order; reads (on the driver's watch, or the pause) are for
//! what the feed may not report: expiry, and store trouble. A read that
//! finds another record than the feed's is not reported at once (the
//! feed's report of it is on its way), but only if it still stands a
//! second later with no report (a writer the feed does not carry). While the feed is not armed (being made, or
//! interrupted) the key is polled as without one, and the first read after
//! it is armed again is reported as it is.

use futures::StreamExt;
use ttl_storage::{Change, Changes, TimeLeft};

use super::{Observation, Reads, Seen, State, TOKEN_WAIT_MIN, new_token, read};
use crate::{fencing::timed, handover, record};

/// The feed of an observed key.
pub(super) struct Follow {
    /// `None` once it ended: subscribed again at the next step.
    changes: Option<Changes>,
    /// An [`Change::Armed`] came, and no interruption since.
    armed: bool,
    /// The record as the feed (or the read after arming) last told it.
    current: Option<Vec<u8>>,
    /// A record reads found that the feed has not reported, and since
    /// when: reported from the reads once it stays [`UNREPORTED_GRACE`]
    /// (a writer whose writes the feed does not carry: one without the
    /// right to publish, an older build, another program).
    unreported: Option<(Vec<u8>, tokio::time::Instant)>,
}

/// How long a record the feed does not report may stand before the reads
/// report it.
const UNREPORTED_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Follow {
    pub(super) fn new(changes: Changes) -> Self {
        Follow {
            changes: Some(changes),
            armed: false,
            current: None,
            unreported: None,
        }
    }
}

/// One step of the stream: waits for the feed or the pause, and answers
/// what to report, if anything (the caller drops what repeats the last
/// report).
pub(super) async fn step(state: &mut State) -> Option<(Seen, Observation)> {
    let pause = if state.last.is_some() {
        state.pause.min(state.poll)
    } else {
        std::time::Duration::ZERO
    };
    let follow = state.follow.as_mut()?;
    let Some(changes) = follow.changes.as_mut() else {
        let counter = crate::fencing::counter_key(&state.key).ok();
        match state.storage.changes(&state.key, counter.as_ref()) {
            Ok(changes) => *follow = Follow::new(changes),
            // No feed any more: poll from now on.
            Err(_) => state.follow = None,
        }
        return None;
    };
    if !follow.armed {
        // Poll while the feed is being armed.
        let arming = if state.last.is_none() {
            state.poll
        } else {
            pause
        };
        return match tokio::time::timeout(arming, changes.next()).await {
            Ok(Some(Change::Armed)) => {
                follow.armed = true;
                let (seen, observation) = read(state.reads()).await;
                if let Some(follow) = state.follow.as_mut() {
                    follow.current = match &seen {
                        Seen::Record(record) => Some(record.clone()),
                        Seen::None | Seen::Trouble => None,
                    };
                }
                Some((seen, observation))
            }
            Ok(Some(_)) => None,
            Ok(None) => {
                follow.changes = None;
                None
            }
            Err(_) => Some(read(state.reads()).await),
        };
    }
    let leads = matches!(state.last, Some(Seen::Record(_)));
    let storage = &*state.storage;
    let key = &state.key;
    let timer = async {
        if leads {
            crate::campaign::wait_for_removal(storage, key, pause).await;
        } else {
            tokio::time::sleep(pause).await;
        }
    };
    let change = tokio::select! {
        biased;
        change = changes.next() => Some(change),
        () = timer => None,
    };
    match change {
        Some(Some(Change::Written { value, count })) => {
            follow.current = Some(value.clone());
            follow.unreported = None;
            Some(written(state.reads(), value, count).await)
        }
        Some(Some(Change::Deleted)) => {
            follow.current = None;
            Some((Seen::None, Observation::NoLeader))
        }
        Some(Some(Change::Interrupted)) => {
            follow.armed = false;
            None
        }
        Some(Some(_)) => None,
        Some(None) => {
            follow.changes = None;
            follow.armed = false;
            None
        }
        None => {
            let current = follow.current.clone();
            let (seen, observation) = read(state.reads()).await;
            let follow = state.follow.as_mut()?;
            match &seen {
                Seen::Trouble => Some((seen, observation)),
                Seen::None => {
                    follow.current = None;
                    follow.unreported = None;
                    Some((seen, observation))
                }
                Seen::Record(record) if current.as_deref() == Some(record.as_slice()) => {
                    Some((seen, observation))
                }
                Seen::Record(record) => {
                    let now = tokio::time::Instant::now();
                    match &follow.unreported {
                        // The feed never told it: say what the reads see.
                        Some((seen_before, since))
                            if seen_before == record && now >= *since + UNREPORTED_GRACE =>
                        {
                            follow.current = Some(record.clone());
                            follow.unreported = None;
                            Some((seen, observation))
                        }
                        // The feed's report of it is on its way (as a rule
                        // within milliseconds): read again, less often.
                        Some((seen_before, _)) if seen_before == record => {
                            state.pause = state.pause.saturating_mul(2).min(state.poll);
                            None
                        }
                        _ => {
                            follow.unreported = Some((record.clone(), now));
                            state.pause = state.pause.saturating_mul(2).min(state.poll);
                            None
                        }
                    }
                }
            }
        }
    }
}

/// What to report of a record the feed says was written: a new leadership
/// (with the write's count as its token when the store told it and it is
/// above the last reported, else the counter read until it is), or no
/// leader for a hand-over marker.
async fn written(state: Reads<'_>, value: Vec<u8>, count: Option<u64>) -> (Seen, Observation) {
    if handover::is_marker(&value) {
        return (Seen::None, Observation::NoLeader);
    }
    if state.last == Some(&Seen::Record(value.clone())) {
        // A renewal the store reported: the caller drops it.
        return (Seen::Record(value), Observation::NoLeader);
    }
    let limit = state.poll.max(super::MIN_READ_TIMEOUT);
    let above = state.above(&value);
    let started = tokio::time::Instant::now();
    // The time left, if the record is still there to tell it (a failed
    // read does not hide the leadership the feed reported).
    let time_left = match timed(limit, state.storage.get_entry(state.key)).await {
        Ok(Some(entry)) if entry.value == value => entry.time_left,
        Ok(_) | Err(_) => TimeLeft::Unknown,
    };
    let fencing_token = match count {
        Some(count) if above.is_none_or(|above| count > above) => Some(count),
        _ => {
            let wait = started
                .elapsed()
                .saturating_mul(super::TOKEN_WAIT_READS)
                .clamp(TOKEN_WAIT_MIN, limit);
            new_token(state.storage, state.key, limit, above, wait).await
        }
    };
    let observation = Observation::Leader {
        value: record::leader_value(&value).to_vec(),
        fencing_token,
        time_left,
    };
    (Seen::Record(value), observation)
}
