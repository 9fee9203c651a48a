//! [`Elections::observe`]: a read-only stream of who leads a key.

use std::{
    fmt,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, stream};
use ttl_storage::{Key, StorageError, TimeLeft, TtlStorage};

mod follow;

use crate::{
    Elections,
    campaign::MAX_POLL_INTERVAL,
    fencing::{self, timed},
    handover, record,
};

/// One observation of an election key, as [`Elections::observe`] reports it.
///
/// A view, not a promise: by the time it arrives, leadership may have
/// moved. Act on the leader's behalf only with its fencing token, at a
/// resource that checks it (see `docs/guarantees.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observation {
    /// A leader holds the key.
    Leader {
        /// The leader's value (what it gave to `acquire_leadership`).
        value: Vec<u8>,
        /// The highest fencing token issued for the key when the leadership
        /// was first seen: the leader's own, or higher when a later
        /// acquisition attempt failed after taking one. Always above the
        /// token of the leadership reported before it (the counter is read
        /// again while the new leader is between its write and its token,
        /// for up to 8 times the read that found it, at least 100 ms);
        /// `None` if the counter could not be read, or did not grow in that
        /// time (a record written without taking a token).
        fencing_token: Option<u64>,
        /// How long the leader's record had left when first seen, as the
        /// store tells it. Not updated by renewals (they are not changes).
        time_left: TimeLeft,
    },
    /// Nobody holds the key (no record, or a hand-over in progress: a
    /// marker reserves the key for a candidate that has not yet taken it).
    NoLeader,
    /// The store could not be read; reported once per outage.
    Unknown {
        /// The store's error, as text.
        error: String,
    },
}

/// What identifies a change: the record's exact bytes (so a new leadership
/// with the same value is a change), absence, or store trouble.
#[derive(PartialEq, Eq)]
enum Seen {
    Record(Vec<u8>),
    None,
    Trouble,
}

/// The stream [`Elections::observe`] returns. Ends never; drop it to stop.
pub struct Observer {
    inner: Pin<Box<dyn Stream<Item = Observation> + Send>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Stream for Observer {
    type Item = Observation;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Observation>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Observer {
    /// The next observation (a change since the previous one).
    pub async fn next(&mut self) -> Option<Observation> {
        futures::StreamExt::next(&mut self.inner).await
    }
}

impl Elections {
    /// Observes who leads `key`, without ever writing: see [`observe`].
    pub fn observe(&self, key: &Key) -> Observer {
        observe(self.inner_storage(), key, MAX_POLL_INTERVAL)
    }
}

/// A stream of [`Observation`]s of `key` on `storage`: the first one at
/// once, then one per change (a new leadership, even with the same value;
/// no leader; store trouble; recovery from it). Each change is reported
/// once; renewals and the passing of time are not changes.
///
/// It only reads (`get_entry`, and `get` of the fencing counter when the
/// leadership changes).
///
/// **On a store that reports its writes** ([`TtlStorage::changes`]: etcd,
/// Valkey, PostgreSQL, storage-mem) every leadership is reported from that
/// feed, in the store's order, even one that begins and ends before any
/// read could see it, with the token its counted write took; reads then
/// tell expiry and store trouble, and a record the feed does not report
/// within a second of a read finding it (written by a writer the feed does
/// not carry: one without the right to publish, an older build) is
/// reported from the reads. While the feed is being armed or is
/// interrupted, the key is polled as below; a leadership that comes and
/// goes while the feed is down may be missed, and one written while the
/// first read after arming is out may be reported after the state that
/// read found.
///
/// **Otherwise** it polls. While a leader holds the key it waits on the
/// driver's watch ([`TtlStorage::watch`]), which reports the record's
/// removal at once, and re-reads every `poll` whatever happens (a new
/// leader, a hand-over or a stolen lease change the record without
/// removing it, and are seen at the next read). Without a watch (or with no
/// leader) it reads every `poll`. After each change it reads again within
/// 10 ms, backing off to `poll` (a release is usually followed by a
/// standby's acquisition within milliseconds: that is reported when it
/// happened, not a polling interval later). [`Elections::observe`] uses
/// [`MAX_POLL_INTERVAL`] (1 s). A change that comes and goes between two
/// reads may be missed; the stream reports states, not every write. A read
/// that takes longer than `poll` (at least 2 s) counts as store trouble.
///
/// ```
/// use std::time::Duration;
/// use elections::{Elections, Observation, RecordingKiller};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), elections::ElectionsError> {
/// let storage = storage_mem::MemStorage::new();
/// let key = ttl_storage::Key::new("cron-leader")?;
/// let elections = Elections::with_killer(storage, RecordingKiller::new());
/// let mut leaders = elections.observe(&key);
/// assert_eq!(leaders.next().await, Some(Observation::NoLeader));
///
/// let leadership = elections.acquire_leadership(&key, "10.0.0.7", Duration::from_secs(20)).await?;
/// let Some(Observation::Leader { value, fencing_token, .. }) = leaders.next().await else {
///     panic!("expected a leader");
/// };
/// assert_eq!(value, b"10.0.0.7");
/// assert_eq!(fencing_token, leadership.as_ref().map(|l| l.fencing_token()));
///
/// elections.release_leadership(&key).await;
/// assert_eq!(leaders.next().await, Some(Observation::NoLeader));
/// # elections.cleanup().await;
/// # Ok(()) }
/// ```
pub fn observe(storage: Arc<dyn TtlStorage>, key: &Key, poll: Duration) -> Observer {
    let counter = fencing::counter_key(key).ok();
    let follow = storage
        .changes(key, counter.as_ref())
        .ok()
        .map(follow::Follow::new);
    let state = State {
        storage,
        key: key.clone(),
        poll,
        last: None,
        pause: poll,
        reported: None,
        follow,
    };
    let inner = stream::unfold(state, |mut state| async move {
        loop {
            let step = if state.follow.is_some() {
                follow::step(&mut state).await
            } else {
                Some(poll_step(&mut state).await)
            };
            let Some((seen, observation)) = step else {
                continue;
            };
            if state.last.as_ref() == Some(&seen) {
                state.pause = state.pause.saturating_mul(2).min(state.poll);
                continue;
            }
            if let (
                Observation::Leader {
                    fencing_token: Some(token),
                    ..
                },
                Seen::Record(record),
            ) = (&observation, &seen)
            {
                let highest = state
                    .reported
                    .as_ref()
                    .map_or(*token, |(t, _)| (*t).max(*token));
                state.reported = Some((highest, record.clone()));
            }
            state.last = Some(seen);
            state.pause = SETTLE;
            return Some((observation, state));
        }
    });
    Observer {
        inner: Box::pin(inner),
    }
}

/// What the stream of [`observe`] works with.
struct State {
    storage: Arc<dyn TtlStorage>,
    key: Key,
    poll: Duration,
    last: Option<Seen>,
    /// The pause before the next read: [`SETTLE`] after a change,
    /// doubling up to `poll` while nothing changes.
    pause: Duration,
    /// The largest fencing token reported so far, and the record of
    /// the last leadership reported: another leadership's token must
    /// exceed it.
    reported: Option<(u64, Vec<u8>)>,
    /// The store's feed of the record's writes, while there is one.
    follow: Option<follow::Follow>,
}

impl State {
    /// What a read needs of the state.
    fn reads(&self) -> Reads<'_> {
        Reads {
            storage: &*self.storage,
            key: &self.key,
            poll: self.poll,
            last: self.last.as_ref(),
            reported: self.reported.as_ref(),
        }
    }
}

/// What a read needs of the [`State`]: its parts that may be shared across
/// threads while the read is out (the feed may not be).
#[derive(Clone, Copy)]
struct Reads<'a> {
    storage: &'a dyn TtlStorage,
    key: &'a Key,
    poll: Duration,
    last: Option<&'a Seen>,
    reported: Option<&'a (u64, Vec<u8>)>,
}

impl Reads<'_> {
    /// The token another leadership's must exceed: the highest reported,
    /// unless `record` is the leadership reported last.
    fn above(&self, record: &[u8]) -> Option<u64> {
        self.reported
            .filter(|(_, reported)| *reported != *record)
            .map(|(token, _)| *token)
    }
}

/// Without a feed: waits (on the driver's watch while a leader holds the
/// key, else for the pause), then reads.
async fn poll_step(state: &mut State) -> (Seen, Observation) {
    if let Some(last) = &state.last {
        let pause = state.pause.min(state.poll);
        if matches!(last, Seen::Record(_)) {
            crate::campaign::wait_for_removal(&*state.storage, &state.key, pause).await;
        } else {
            tokio::time::sleep(pause).await;
        }
    }
    read(state.reads()).await
}

/// Each read is bounded by this, or by the polling interval if longer.
const MIN_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The first pause after a change. A change is often followed by another
/// within milliseconds (a release by a standby's acquisition, a hand-over
/// marker by the successor's record): reading again soon, then backing off
/// to the polling interval, reports the second change when it happened
/// instead of up to a polling interval later (a gap that never was).
const SETTLE: Duration = Duration::from_millis(10);

/// The pause between reads of the fencing counter while a new leader has
/// not yet taken its token.
const TOKEN_RETRY: Duration = Duration::from_millis(5);

/// How long a new leader's token is waited for: this many times the read
/// that found its record (the token follows the record by two round trips),
/// at least [`TOKEN_WAIT_MIN`]. A record written without a token (a stolen
/// one) is then reported without a token.
const TOKEN_WAIT_READS: u32 = 8;

/// The least time a new leader's token is waited for.
const TOKEN_WAIT_MIN: Duration = Duration::from_millis(100);

async fn read(state: Reads<'_>) -> (Seen, Observation) {
    let (storage, key) = (state.storage, state.key);
    let limit = state.poll.max(MIN_READ_TIMEOUT);
    let started = tokio::time::Instant::now();
    let entry = match timed(limit, storage.get_entry(key)).await {
        Ok(entry) => entry,
        Err(err) => return trouble(key, &err),
    };
    let Some(entry) = entry else {
        return (Seen::None, Observation::NoLeader);
    };
    if handover::is_marker(&entry.value) {
        return (Seen::None, Observation::NoLeader);
    }
    // The leadership reported last (seen again after store trouble) needs
    // no newer token; any other does.
    let above = state.above(&entry.value);
    let wait = started
        .elapsed()
        .saturating_mul(TOKEN_WAIT_READS)
        .clamp(TOKEN_WAIT_MIN, limit);
    let fencing_token = new_token(storage, key, limit, above, wait).await;
    let observation = Observation::Leader {
        value: record::leader_value(&entry.value).to_vec(),
        fencing_token,
        time_left: entry.time_left,
    };
    (Seen::Record(entry.value), observation)
}

/// The token of a leadership just seen. A new leader's record is written
/// before it takes its token, so a counter not `above` the token of the
/// leadership reported before is still the previous leader's: it is read
/// again until it grows, for at most `wait` (then `None`: a token that
/// could not be seen is not guessed).
async fn new_token(
    storage: &dyn TtlStorage,
    key: &Key,
    limit: Duration,
    above: Option<u64>,
    wait: Duration,
) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match latest_token(storage, key, limit).await {
            Ok(token) if above.is_none() || token > above => return token,
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(%key, error = %err, "observe: could not read the fencing counter");
                return None;
            }
        }
        if tokio::time::Instant::now() + TOKEN_RETRY > deadline {
            tracing::debug!(%key, "observe: the new leader's fencing token did not appear");
            return None;
        }
        tokio::time::sleep(TOKEN_RETRY).await;
    }
}

fn trouble(key: &Key, err: &StorageError) -> (Seen, Observation) {
    tracing::debug!(%key, error = %err, "observe: the store could not be read");
    (
        Seen::Trouble,
        Observation::Unknown {
            error: err.to_string(),
        },
    )
}

async fn latest_token(
    storage: &dyn TtlStorage,
    key: &Key,
    limit: Duration,
) -> Result<Option<u64>, StorageError> {
    let counter = fencing::counter_key(key)
        .map_err(|err| StorageError::permanent(format!("fencing counter key: {err}")))?;
    match timed(limit, storage.get(&counter)).await? {
        Some(bytes) => fencing::parse(&counter, &bytes).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::RecordingKiller;

    /// Leaderships that begin and end with no time passing, so that no
    /// read can ever see them: each is reported from the store's feed, in
    /// order, with the token its write took (polling saw none of them).
    #[tokio::test(start_paused = true)]
    async fn leaderships_no_read_could_see_are_reported_with_their_tokens() {
        let storage = storage_mem::MemStorage::new();
        let key = Key::new("job").unwrap();
        let a = Elections::with_killer(storage.clone(), RecordingKiller::new());
        let b = Elections::with_killer(storage.clone(), RecordingKiller::new());
        let mut leaders = a.observe(&key);
        assert_eq!(leaders.next().await, Some(Observation::NoLeader));
        let mut held = Vec::new();
        for (i, elections) in [&a, &b, &a, &b].into_iter().enumerate() {
            let value = format!("node-{i}");
            let leadership = elections
                .acquire_leadership(&key, value.as_str(), Duration::from_secs(20))
                .await
                .unwrap()
                .expect("the key is free");
            held.push((value, leadership.fencing_token()));
            elections.release_leadership(&key).await;
        }
        for (value, token) in held {
            let seen = tokio::time::timeout(Duration::from_secs(30), leaders.next()).await;
            match seen {
                Ok(Some(Observation::Leader {
                    value: seen,
                    fencing_token,
                    ..
                })) => {
                    assert_eq!(seen, value.as_bytes());
                    assert_eq!(fencing_token, Some(token), "{value}");
                }
                other => panic!("{value} was not reported: {other:?}"),
            }
            let gone = tokio::time::timeout(Duration::from_secs(30), leaders.next()).await;
            assert_eq!(gone, Ok(Some(Observation::NoLeader)), "after {value}");
        }
        a.cleanup().await;
        b.cleanup().await;
    }

    /// A store whose feed is armed and then tells nothing: the writes of
    /// a writer it does not carry (one without the right to publish, an
    /// older build, another program).
    struct SilentFeed(storage_mem::MemStorage);

    #[async_trait::async_trait]
    impl TtlStorage for SilentFeed {
        async fn insert_if_not_exists(
            &self,
            key: &Key,
            value: &[u8],
            ttl: ttl_storage::Ttl,
        ) -> Result<bool, StorageError> {
            self.0.insert_if_not_exists(key, value, ttl).await
        }
        async fn compare_and_swap(
            &self,
            key: &Key,
            old: &[u8],
            new: &[u8],
            ttl: ttl_storage::Ttl,
        ) -> Result<bool, StorageError> {
            self.0.compare_and_swap(key, old, new, ttl).await
        }
        async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool, StorageError> {
            self.0.compare_and_delete(key, value).await
        }
        async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, StorageError> {
            self.0.get(key).await
        }
        async fn get_entry(&self, key: &Key) -> Result<Option<ttl_storage::Entry>, StorageError> {
            self.0.get_entry(key).await
        }
        fn changes(
            &self,
            _: &Key,
            _: Option<&Key>,
        ) -> Result<ttl_storage::Changes, ttl_storage::ChangesUnsupported> {
            let armed = stream::once(async { ttl_storage::Change::Armed });
            Ok(Box::pin(futures::StreamExt::chain(
                armed,
                stream::pending(),
            )))
        }
    }

    /// A leader the feed never reports is still reported, from the reads,
    /// about a second after they first find it (before, the follower
    /// waited for the feed forever, re-reading every 10 ms).
    #[tokio::test(start_paused = true)]
    async fn a_leader_the_feed_does_not_carry_is_reported_from_the_reads() {
        let storage = storage_mem::MemStorage::new();
        let key = Key::new("job").unwrap();
        let mut leaders = observe(
            Arc::new(SilentFeed(storage.clone())),
            &key,
            MAX_POLL_INTERVAL,
        );
        assert_eq!(leaders.next().await, Some(Observation::NoLeader));
        let writer = Elections::with_killer(storage, RecordingKiller::new());
        let started = tokio::time::Instant::now();
        writer
            .acquire_leadership(&key, "unpublished", Duration::from_secs(20))
            .await
            .unwrap()
            .expect("the key is free");
        let seen = tokio::time::timeout(Duration::from_secs(30), leaders.next()).await;
        match seen {
            Ok(Some(Observation::Leader { value, .. })) => assert_eq!(value, b"unpublished"),
            other => panic!("the leader was not reported: {other:?}"),
        }
        let after = started.elapsed();
        assert!(after <= Duration::from_secs(3), "reported after {after:?}");
        writer.cleanup().await;
    }
}
