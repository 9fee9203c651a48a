//! Fencing tokens, built on the storage contract itself so every driver
//! gets them for free.
//!
//! For each election key `k` a never-expiring counter record lives under
//! [`FENCING_PREFIX`]`k`, holding a decimal `u64`. A new leader advances it
//! by compare-and-swap *after* its insert succeeded and *before* the
//! confirming write that starts its lease. So the token of a leadership is
//! taken while its lease is held, and a later leader (who could only insert
//! after this lease ended) takes a strictly larger one. A contender paused
//! between its insert and its increment fails the confirming write and never
//! uses its token. A driver that can apply the record's write and the
//! counter's advance as one ([`ttl_storage::TtlStorage::write_counted`])
//! takes the token in the same atomic write that makes the record, and the
//! lease counts from that write's start: no confirming write is needed, as
//! no pause can fall between the two. Tokens survive record expiry and restarts because the
//! counter never expires; gaps are possible (a failed acquisition may have
//! advanced the counter), order is what matters.
//!
//! **Tokens never repeat across a re-created store.** A store wiped,
//! re-created, or restored from an older backup has lost (or rolled back)
//! its counters; a counter starting again at 1 would hand out tokens that
//! leaders of the old store already used. So every advance takes at least
//! the [`floor`]: the wall clock in nanoseconds since the Unix epoch (the
//! next token is `max(counter + 1, floor)`; a new counter starts at the
//! floor). A token handed out before the store was re-created is at most
//! the floor of its time plus the number of tokens taken since, so a later
//! store's first token is larger **assuming** the clock of the node that
//! takes it is not behind the clocks of the nodes that took the old tokens
//! by more than the time between the two (NTP-synchronised clocks and a
//! re-creation that takes longer than their skew), and that no more than
//! one token per nanosecond was taken. Tokens stay below `i64::MAX` (until
//! the year 2262), so resources that store them as a signed 64-bit integer
//! (PostgreSQL `bigint`, Cassandra `bigint`, DynamoDB numbers) keep them
//! exactly.
//!
//! A resource protected by fencing accepts a write only with a token at
//! least as high as any it has seen (see `docs/guarantees.md`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ttl_storage::{ErrorKind, Key, StorageError, Ttl, TtlStorage};

/// Prefix of the reserved keys that hold fencing counters.
pub const FENCING_PREFIX: &str = "__fencing__/";

/// Attempts to advance a counter before giving up with a transient error.
const MAX_TRIES: u32 = 16;

/// The largest token handed out: tokens fit a signed 64-bit integer.
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// The least token a counter may hand out now: the wall clock in
/// nanoseconds since the Unix epoch (1 for a clock before it; at most
/// [`MAX_TOKEN`]). See the [module docs](self) for what it protects and
/// the assumption it makes.
pub fn floor() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(MAX_TOKEN)
        })
        .clamp(1, MAX_TOKEN)
}

/// The key of the fencing counter for election key `key`.
pub fn counter_key(key: &Key) -> Result<Key, ttl_storage::ValidationError> {
    Key::new(format!("{FENCING_PREFIX}{key}"))
}

/// True when `key` lies in the reserved namespace.
pub(crate) fn is_reserved(key: &Key) -> bool {
    key.as_str().starts_with(FENCING_PREFIX)
}

/// Advances the counter of `key` and returns the new value.
///
/// Outcome-unknown writes are resolved by reading again: if the write was
/// applied the next compare-and-swap advances past it, leaving a gap.
pub(crate) async fn next_token(
    storage: &dyn TtlStorage,
    counter: &Key,
    call_timeout: Duration,
    pause: Duration,
) -> Result<u64, StorageError> {
    let mut last_error = None;
    for _ in 0..MAX_TRIES {
        match try_advance(storage, counter, call_timeout).await {
            Ok(Some(token)) => return Ok(token),
            Ok(None) => continue, // lost a race with another writer: read again
            Err(err) if err.kind() == ErrorKind::Permanent => return Err(err),
            Err(err) => {
                tracing::debug!(%counter, error = %err, "fencing counter write failed; retrying");
                last_error = Some(err);
                tokio::time::sleep(pause).await;
            }
        }
    }
    Err(match last_error {
        Some(err) => StorageError::with_source(
            ErrorKind::Transient,
            format!("could not advance fencing counter {counter}"),
            err,
        ),
        None => StorageError::transient(format!(
            "fencing counter {counter} stayed contended for {MAX_TRIES} attempts"
        )),
    })
}

async fn try_advance(
    storage: &dyn TtlStorage,
    counter: &Key,
    call_timeout: Duration,
) -> Result<Option<u64>, StorageError> {
    let current = timed(call_timeout, storage.get(counter)).await?;
    let floor = floor();
    match current {
        None => {
            let won = timed(
                call_timeout,
                storage.insert_if_not_exists(counter, floor.to_string().as_bytes(), Ttl::NEVER),
            )
            .await?;
            Ok(won.then_some(floor))
        }
        Some(bytes) => {
            let n = parse(counter, &bytes)?;
            let next = n
                .checked_add(1)
                .filter(|&next| next <= MAX_TOKEN)
                .ok_or_else(|| {
                    StorageError::permanent(format!(
                        "fencing counter {counter} is exhausted (at {n}, tokens stay below 2^63)"
                    ))
                })?
                .max(floor);
            let won = timed(
                call_timeout,
                storage.compare_and_swap(counter, &bytes, next.to_string().as_bytes(), Ttl::NEVER),
            )
            .await?;
            Ok(won.then_some(next))
        }
    }
}

pub(crate) fn parse(counter: &Key, bytes: &[u8]) -> Result<u64, StorageError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            StorageError::permanent(format!(
                "fencing counter {counter} holds {bytes:?}, not a decimal u64: the record was written by something else"
            ))
        })
}

/// Runs a storage call with a time limit; a call that overruns it has an
/// unknown outcome.
pub(crate) async fn timed<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    timed_from(tokio::time::Instant::now(), limit, call).await
}

/// [`timed`] for a call that started at `start` (the caller read the
/// clock already).
pub(crate) async fn timed_from<T>(
    start: tokio::time::Instant,
    limit: Duration,
    call: impl Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    match tokio::time::timeout_at(start + limit, call).await {
        Ok(result) => result,
        Err(_) => Err(StorageError::outcome_unknown(format!(
            "storage call did not answer within {limit:?}"
        ))),
    }
}
