//! The four operations in [`crate::ExpiryMode::WallClock`]: expiry compares
//! the stored `exp_ms` with the caller's wall clock, inside each condition.
//!
//! # A swap applied late never shortens a later one
//!
//! A write's expiry is `now + ttl` on its writer's clock, read *before*
//! the request is sent. A swap delayed on its way (the first attempt of a
//! renewal whose retry was acknowledged first) would land on the record
//! its retry wrote and move the expiry back to its own `now + ttl`, before
//! the instant the acknowledged renewal promised. So every record stores
//! its writer's clock reading (`at_ms`, [`item::ANCHOR_MS`]), and a swap
//! to an expiring record also requires **`at_ms <= :now OR exp_ms <=
//! :exp`**: the record it replaces was anchored no later than this write,
//! or this write does not shorten it. A late swap fails both (it read its
//! clock before the write it lands on, and asks for an earlier expiry).
//! When it is refused that way while the record holds `old` and `new ==
//! old` (a renewal), the record already lives longer than asked: the
//! answer is `true`, nothing written. Any other refusal of a record that
//! holds `old` is [`ttl_storage::ErrorKind::Transient`] (retried with a
//! fresh clock reading). Records written before `at_ms` existed have none:
//! the first swap is not ordered.

use aws_sdk_dynamodb::{primitives::Blob, types::AttributeValue};
use ttl_storage::{Entry, Key, Result, StorageError, Ttl};

use crate::{
    DynamoDbStorage,
    item::{self, ANCHOR_MS, EXPIRES_MS, KEY, VALUE},
    storage::{Condition, PutOutcome},
};

/// Condition of `insert_if_not_exists`: no record, or an expired one.
const INSERT_CONDITION: &str = "attribute_not_exists(#k) OR #e <= :now";
/// Condition of `compare_and_swap` and `compare_and_delete`: a live record holding `:old`.
const MATCH_LIVE_CONDITION: &str = "#v = :old AND (attribute_not_exists(#e) OR #e > :now)";
/// Condition of a `compare_and_swap` writing an expiring record: live,
/// holding `:old`, and not a late write (see the module docs).
const SWAP_CONDITION: &str = "#v = :old AND (attribute_not_exists(#e) OR #e > :now) \
     AND (attribute_not_exists(#a) OR #a <= :now OR #e <= :exp)";

impl DynamoDbStorage {
    pub(crate) async fn insert_wall(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        let now = item::now_ms()?;
        self.conditional_put(
            item::record(key.as_str(), value, ttl, now),
            Condition {
                expression: INSERT_CONDITION,
                names: &[("#k", KEY), ("#e", EXPIRES_MS)],
                values: vec![(":now", AttributeValue::N(now.to_string()))],
            },
            "PutItem (insert)",
        )
        .await
    }

    pub(crate) async fn swap_wall(
        &self,
        key: &Key,
        old: &[u8],
        new: &[u8],
        ttl: Ttl,
    ) -> Result<bool> {
        let now = item::now_ms()?;
        let mut values = vec![
            (":old", AttributeValue::B(Blob::new(old.to_vec()))),
            (":now", AttributeValue::N(now.to_string())),
        ];
        // A record that never expires cannot expire earlier: no ordering.
        let expires = ttl.duration().map(|ttl| item::expiry_ms(now, ttl));
        let condition = match expires {
            Some(expires) => {
                values.push((":exp", AttributeValue::N(expires.to_string())));
                SWAP_CONDITION
            }
            None => MATCH_LIVE_CONDITION,
        };
        let outcome = self
            .conditional_put_or_old(
                item::record(key.as_str(), new, ttl, now),
                Condition {
                    expression: condition,
                    names: &[("#v", VALUE), ("#e", EXPIRES_MS), ("#a", ANCHOR_MS)]
                        [..names_for(expires)],
                    values,
                },
                "PutItem (compare-and-swap)",
            )
            .await?;
        match outcome {
            PutOutcome::Applied => Ok(true),
            PutOutcome::Refused(found) => refused_swap(found.as_ref(), old, new, expires, now),
        }
    }

    pub(crate) async fn delete_wall(&self, key: &Key, value: &[u8]) -> Result<bool> {
        let now = item::now_ms()?;
        self.conditional_delete(
            key,
            Condition {
                expression: MATCH_LIVE_CONDITION,
                names: &[("#v", VALUE), ("#e", EXPIRES_MS)],
                values: vec![
                    (":old", AttributeValue::B(Blob::new(value.to_vec()))),
                    (":now", AttributeValue::N(now.to_string())),
                ],
            },
            "DeleteItem (compare-and-delete)",
        )
        .await
    }

    pub(crate) async fn get_wall(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        match self.read(key).await? {
            // The clock is read after the answer: a record that expired
            // while the request was in flight is reported as gone.
            Some(found) => item::live_value(&found, item::now_ms()?),
            None => Ok(None),
        }
    }

    /// [`Self::get_wall`] with the time left on the reader's wall clock.
    pub(crate) async fn get_entry_wall(&self, key: &Key) -> Result<Option<Entry>> {
        match self.read(key).await? {
            Some(found) => item::live_entry(&found, item::now_ms()?),
            None => Ok(None),
        }
    }
}

/// How many of the swap's attribute names its condition uses (DynamoDB
/// refuses names a condition does not use).
fn names_for(expires: Option<u64>) -> usize {
    if expires.is_some() { 3 } else { 2 }
}

/// The answer of a swap whose condition failed, from the item as the
/// condition saw it (`found`): `false` when no live record holds `old`;
/// `true` when it holds `old == new` and already lives at least until
/// `expires` (the swap was refused as late: a renewal anchored after it
/// is there); otherwise a transient error (a record holding `old` was
/// written after this swap read its clock; a retry reads it again).
fn refused_swap(
    found: Option<&std::collections::HashMap<String, AttributeValue>>,
    old: &[u8],
    new: &[u8],
    expires: Option<u64>,
    now: u64,
) -> Result<bool> {
    let Some(found) = found else {
        return Ok(false);
    };
    match item::live_value(found, now)? {
        Some(value) if value == old => {}
        _ => return Ok(false),
    }
    let outlives = match (item::expires_ms(found)?, expires) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(stored), Some(asked)) => stored >= asked,
    };
    if old == new && outlives {
        return Ok(true);
    }
    Err(StorageError::transient(
        "PutItem (compare-and-swap): the record was rewritten after this swap read its clock",
    ))
}

#[cfg(test)]
mod tests {
    use ttl_storage::ErrorKind;

    use super::*;

    fn stored(
        value: &[u8],
        at: u64,
        ttl_secs: u64,
    ) -> std::collections::HashMap<String, AttributeValue> {
        item::record("k", value, Ttl::from_secs(ttl_secs).unwrap(), at)
    }

    #[test]
    fn a_refused_renewal_of_a_record_that_lives_longer_is_true() {
        // Stored by a renewal at 10 000 (expiry 15 000); this one read its
        // clock at 8 000 and asked for 13 000.
        let found = stored(b"v", 10_000, 5);
        assert!(refused_swap(Some(&found), b"v", b"v", Some(13_000), 12_000).unwrap());
    }

    #[test]
    fn a_refused_swap_to_another_value_is_transient() {
        let found = stored(b"v", 10_000, 5);
        let err = refused_swap(Some(&found), b"v", b"w", Some(13_000), 12_000).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
        // A renewal asking for more than the record has is not "already done".
        let err = refused_swap(Some(&found), b"v", b"v", Some(16_000), 12_000).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
        // Nor is one to a record that never expires from one that does.
        let err = refused_swap(Some(&found), b"v", b"v", None, 12_000).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
    }

    #[test]
    fn no_live_record_holding_old_is_false() {
        assert!(!refused_swap(None, b"v", b"v", Some(1), 0).unwrap());
        let found = stored(b"x", 10_000, 5);
        assert!(!refused_swap(Some(&found), b"v", b"v", Some(13_000), 12_000).unwrap());
        // Expired at 15 000.
        let found = stored(b"v", 10_000, 5);
        assert!(!refused_swap(Some(&found), b"v", b"v", Some(20_000), 15_000).unwrap());
    }

    #[test]
    fn a_record_that_never_expires_outlives_any_renewal() {
        let found = item::record("k", b"v", Ttl::NEVER, 10_000);
        assert!(refused_swap(Some(&found), b"v", b"v", Some(99_000), 12_000).unwrap());
    }
}
