//! Read-only inspection of an election key: who leads, and the latest
//! fencing token issued. Never takes or extends a lease.

use std::time::Duration;

use ttl_storage::{Key, StorageError, TimeLeft, TtlStorage};

use crate::{Candidate, candidates, fencing, handover, record};

/// The time limit of each candidate slot read.
const CANDIDATE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the storage says about one election key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    /// The election key.
    pub key: Key,
    /// The current leader's value (what it gave to `acquire_leadership`,
    /// without the record's nonce), if a live record exists.
    pub leader: Option<Vec<u8>>,
    /// The highest fencing token issued for the key so far (the current
    /// leader's token, or higher if a later acquisition attempt failed after
    /// taking one); `None` if none was ever issued. Between a new leader's
    /// first write and its taking a token (one store round trip) the record
    /// already names the new leader while this is still the previous
    /// leader's token: wait for it to grow to see the new leader's.
    pub latest_fencing_token: Option<u64>,
    /// How long the leader's record has left, as the store tells it
    /// ([`TimeLeft::Unknown`] where the driver cannot say); `None` without a
    /// leader. A report, not a promise: the leader renews every quarter lease.
    pub time_left: Option<TimeLeft>,
    /// The candidates waiting for the key (announced by
    /// [`crate::Elections::campaign`]), longest-waiting first; never the
    /// leader itself (a record its campaign left behind).
    pub candidates: Vec<Candidate>,
    /// True while a hand-over marker reserves the key for a candidate that
    /// has not taken it yet (`leader` is then `None`).
    pub handing_over: bool,
}

/// Reads the status of `key`: the record, the fencing counter and the
/// [`crate::candidates::MAX_CANDIDATES`] candidate slots (read at once).
/// Nothing is written.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use elections::{Elections, RecordingKiller, inspect};
/// let storage = storage_mem::MemStorage::new();
/// let key = ttl_storage::Key::new("nightly")?;
/// assert_eq!(inspect(&storage, &key).await?.leader, None);
///
/// let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
/// let leadership = elections.acquire_leadership(&key, "node-1", Duration::from_secs(20)).await?;
/// let status = inspect(&storage, &key).await?;
/// assert_eq!(status.leader.as_deref(), Some(&b"node-1"[..]));
/// assert_eq!(status.latest_fencing_token, leadership.map(|l| l.fencing_token()));
/// assert!(matches!(status.time_left, Some(ttl_storage::TimeLeft::About(left)) if left <= Duration::from_secs(20)));
/// assert!(status.candidates.is_empty());
/// # elections.cleanup().await;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// The storage's errors, and a permanent error for a corrupt counter.
pub async fn inspect(storage: &dyn TtlStorage, key: &Key) -> Result<KeyStatus, StorageError> {
    let entry = storage.get_entry(key).await?;
    let handing_over = entry
        .as_ref()
        .is_some_and(|entry| handover::is_marker(&entry.value));
    let entry = entry.filter(|_| !handing_over);
    let time_left = entry.as_ref().map(|entry| entry.time_left);
    let instance = entry
        .as_ref()
        .and_then(|entry| record::instance_of(&entry.value));
    let candidates = candidates::list(storage, key, CANDIDATE_READ_TIMEOUT, instance).await?;
    let leader = entry.map(|entry| record::leader_value(&entry.value).to_vec());
    let counter = fencing::counter_key(key)
        .map_err(|err| StorageError::permanent(format!("fencing counter key: {err}")))?;
    let latest_fencing_token = match storage.get(&counter).await? {
        Some(bytes) => Some(fencing::parse(&counter, &bytes)?),
        None => None,
    };
    Ok(KeyStatus {
        key: key.clone(),
        leader,
        latest_fencing_token,
        time_left,
        candidates,
        handing_over,
    })
}
