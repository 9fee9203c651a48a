//! The item layout: attribute names, expiry arithmetic, decoding.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use aws_sdk_dynamodb::{primitives::Blob, types::AttributeValue};
use ttl_storage::{Entry, StorageError, TimeLeft, Ttl};

/// Partition key (String): the storage key.
pub(crate) const KEY: &str = "pk";
/// The value (Binary; may be empty, which DynamoDB allows for non-key attributes).
pub(crate) const VALUE: &str = "val";
/// Expiry in wall-clock milliseconds since the Unix epoch (Number). Absent
/// on records that never expire. This is what every condition compares.
pub(crate) const EXPIRES_MS: &str = "exp_ms";
/// The writer's wall clock (milliseconds since the Unix epoch, Number)
/// when it built the write: the instant its expiry counts from, in
/// wall-clock mode. A swap is refused when it would shorten the expiry of
/// a record anchored after its own (a write that arrives late); see
/// [`crate::wall_clock`].
pub(crate) const ANCHOR_MS: &str = "at_ms";
/// Expiry in whole seconds since the epoch (Number), rounded up: the
/// attribute DynamoDB's own TTL reaper deletes by. Garbage collection only;
/// correctness never depends on it.
pub(crate) const REAPER_TTL: &str = "expires_at";

/// Record version (String): a random nonce rewritten by every write. Only
/// in [`crate::ExpiryMode::ObservedLease`].
pub(crate) const VERSION: &str = "ver";
/// Lease length in milliseconds (Number), absent on records that never
/// expire. Only in [`crate::ExpiryMode::ObservedLease`].
pub(crate) const LEASE_MS: &str = "lease_ms";
/// How long after its lease an abandoned record in observed-lease mode may be
/// reaped by DynamoDB (whose clock is not ours): one day.
const OBSERVED_REAPER_SLACK: Duration = Duration::from_secs(24 * 3600);

/// Milliseconds since the Unix epoch on this machine's wall clock.
pub(crate) fn now_ms() -> Result<u64, StorageError> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| StorageError::permanent("system clock is before 1970"))?;
    u64::try_from(since.as_millis())
        .map_err(|_| StorageError::permanent("system clock is beyond year 500 million"))
}

/// The key and value attributes every record has, with room for the
/// mode's three others.
fn key_and_value(key: &str, value: &[u8]) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::with_capacity(5);
    item.insert(KEY.to_string(), AttributeValue::S(key.to_string()));
    item.insert(
        VALUE.to_string(),
        AttributeValue::B(Blob::new(value.to_vec())),
    );
    item
}

/// The attributes of a record holding `value` written at `now_ms` with `ttl`.
pub(crate) fn record(
    key: &str,
    value: &[u8],
    ttl: Ttl,
    now_ms: u64,
) -> HashMap<String, AttributeValue> {
    let mut item = key_and_value(key, value);
    item.insert(ANCHOR_MS.to_string(), AttributeValue::N(now_ms.to_string()));
    if let Some(ttl) = ttl.duration() {
        let expires_ms = expiry_ms(now_ms, ttl);
        item.insert(
            EXPIRES_MS.to_string(),
            AttributeValue::N(expires_ms.to_string()),
        );
        item.insert(
            REAPER_TTL.to_string(),
            AttributeValue::N(expires_ms.div_ceil(1000).to_string()),
        );
    }
    item
}

/// The attributes of a record in observed-lease mode: no wall-clock expiry,
/// but a fresh version nonce `version` and the lease length.
pub(crate) fn observed_record(
    key: &str,
    value: &[u8],
    ttl: Ttl,
    version: &str,
    now_ms: u64,
) -> HashMap<String, AttributeValue> {
    let mut item = key_and_value(key, value);
    item.insert(VERSION.to_string(), AttributeValue::S(version.to_string()));
    if let Some(ttl) = ttl.duration() {
        let lease_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        item.insert(
            LEASE_MS.to_string(),
            AttributeValue::N(lease_ms.to_string()),
        );
        let reap_ms = expiry_ms(now_ms, ttl + OBSERVED_REAPER_SLACK);
        item.insert(
            REAPER_TTL.to_string(),
            AttributeValue::N(reap_ms.div_ceil(1000).to_string()),
        );
    }
    item
}

/// What an observed-lease reader needs from an item: value, version, lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) value: Vec<u8>,
    pub(crate) version: String,
    pub(crate) lease: Option<Duration>,
}

/// Decodes an item written in observed-lease mode.
pub(crate) fn observed(item: &HashMap<String, AttributeValue>) -> Result<Observed, StorageError> {
    let value = match item.get(VALUE) {
        Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
        _ => return Err(corrupt(VALUE, "a binary value")),
    };
    let version = match item.get(VERSION) {
        Some(AttributeValue::S(v)) => v.clone(),
        _ => {
            return Err(corrupt(
                VERSION,
                "a string (is the table used in wall-clock mode?)",
            ));
        }
    };
    let lease = match item.get(LEASE_MS) {
        None => None,
        Some(n) => Some(Duration::from_millis(
            n.as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| corrupt(LEASE_MS, "a whole number"))?,
        )),
    };
    Ok(Observed {
        value,
        version,
        lease,
    })
}

/// `now_ms + ttl`, saturating (TTLs are at most 20 years, so this never saturates in practice).
pub(crate) fn expiry_ms(now_ms: u64, ttl: Duration) -> u64 {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_add(ttl_ms)
}

/// The value of a record read back, or `None` if it expired at `now_ms`.
pub(crate) fn live_value(
    item: &HashMap<String, AttributeValue>,
    now_ms: u64,
) -> Result<Option<Vec<u8>>, StorageError> {
    Ok(live_entry(item, now_ms)?.map(|entry| entry.value))
}

/// A wall-clock record's expiry (`exp_ms`), `None` if it never expires.
pub(crate) fn expires_ms(
    item: &HashMap<String, AttributeValue>,
) -> Result<Option<u64>, StorageError> {
    item.get(EXPIRES_MS)
        .map(|expires| {
            expires
                .as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| corrupt(EXPIRES_MS, "a whole number"))
        })
        .transpose()
}

/// The record read back with its time left at `now_ms` (the writer's
/// expiry against the reader's wall clock, as every operation judges it),
/// or `None` if it expired.
pub(crate) fn live_entry(
    item: &HashMap<String, AttributeValue>,
    now_ms: u64,
) -> Result<Option<Entry>, StorageError> {
    let time_left = match expires_ms(item)? {
        Some(expires) if expires <= now_ms => return Ok(None),
        Some(expires) => TimeLeft::About(Duration::from_millis(expires - now_ms)),
        None => TimeLeft::Never,
    };
    match item.get(VALUE) {
        Some(AttributeValue::B(blob)) => Ok(Some(Entry {
            value: blob.as_ref().to_vec(),
            time_left,
        })),
        _ => Err(corrupt(VALUE, "a binary value")),
    }
}

fn corrupt(attribute: &str, expected: &str) -> StorageError {
    StorageError::permanent(format!(
        "corrupt record: attribute {attribute:?} is not {expected} (was it written by another program?)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiring_record_has_both_expiry_attributes() {
        let item = record("k", b"v", Ttl::from_secs(3).unwrap(), 1_000_500);
        assert_eq!(item[KEY], AttributeValue::S("k".into()));
        assert_eq!(item[VALUE], AttributeValue::B(Blob::new(b"v".to_vec())));
        assert_eq!(item[EXPIRES_MS], AttributeValue::N("1003500".into()));
        assert_eq!(item[REAPER_TTL], AttributeValue::N("1004".into()));
        assert_eq!(item[ANCHOR_MS], AttributeValue::N("1000500".into()));
    }

    #[test]
    fn never_expiring_record_has_no_expiry() {
        let item = record("k", b"", Ttl::NEVER, 42);
        assert_eq!(item[ANCHOR_MS], AttributeValue::N("42".into()));
        assert!(!item.contains_key(EXPIRES_MS));
        assert!(!item.contains_key(REAPER_TTL));
        assert_eq!(live_value(&item, u64::MAX).unwrap(), Some(vec![]));
    }

    #[test]
    fn expiry_is_exclusive() {
        let item = record("k", b"v", Ttl::from_secs(1).unwrap(), 10_000);
        assert_eq!(live_value(&item, 10_999).unwrap(), Some(b"v".to_vec()));
        assert_eq!(live_value(&item, 11_000).unwrap(), None);
    }

    #[test]
    fn time_left_is_the_expiry_against_the_reader_clock() {
        let item = record("k", b"v", Ttl::from_secs(20).unwrap(), 10_000);
        let entry = live_entry(&item, 12_500).unwrap().unwrap();
        assert_eq!(entry.value, b"v".to_vec());
        assert_eq!(
            entry.time_left,
            TimeLeft::About(Duration::from_millis(17_500))
        );
        assert_eq!(live_entry(&item, 30_000).unwrap(), None);
        let never = record("k", b"v", Ttl::NEVER, 10_000);
        assert_eq!(
            live_entry(&never, 12_500).unwrap().unwrap().time_left,
            TimeLeft::Never
        );
    }

    #[test]
    fn observed_records_round_trip() {
        let item = observed_record("k", b"v", Ttl::from_secs(3).unwrap(), "n1", 1_000);
        assert!(!item.contains_key(EXPIRES_MS));
        assert_eq!(item[REAPER_TTL], AttributeValue::N("86404".into()));
        assert_eq!(
            observed(&item).unwrap(),
            Observed {
                value: b"v".to_vec(),
                version: "n1".into(),
                lease: Some(Duration::from_secs(3)),
            }
        );
        let never = observed_record("k", b"", Ttl::NEVER, "n2", 1_000);
        assert!(!never.contains_key(LEASE_MS) && !never.contains_key(REAPER_TTL));
        assert_eq!(observed(&never).unwrap().lease, None);
        let wall = record("k", b"v", Ttl::from_secs(3).unwrap(), 1_000);
        assert!(observed(&wall).is_err());
    }

    #[test]
    fn corrupt_records_are_permanent_errors() {
        let mut item = record("k", b"v", Ttl::from_secs(1).unwrap(), 0);
        item.insert(VALUE.into(), AttributeValue::S("text".into()));
        assert_eq!(
            live_value(&item, 0).unwrap_err().kind(),
            ttl_storage::ErrorKind::Permanent
        );
        item.insert(EXPIRES_MS.into(), AttributeValue::S("soon".into()));
        assert!(live_value(&item, 0).is_err());
    }
}
