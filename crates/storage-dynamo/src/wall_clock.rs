//! The four operations in [`crate::ExpiryMode::WallClock`]: expiry compares
//! the stored `exp_ms` with the caller's wall clock, inside each condition.

use aws_sdk_dynamodb::{primitives::Blob, types::AttributeValue};
use ttl_storage::{Entry, Key, Result, Ttl};

use crate::{
    DynamoStorage,
    item::{self, EXPIRES_MS, KEY, VALUE},
};

/// Condition of `insert_if_not_exists`: no record, or an expired one.
const INSERT_CONDITION: &str = "attribute_not_exists(#k) OR #e <= :now";
/// Condition of `compare_and_swap` and `compare_and_delete`: a live record holding `:old`.
const MATCH_LIVE_CONDITION: &str = "#v = :old AND (attribute_not_exists(#e) OR #e > :now)";

impl DynamoStorage {
    pub(crate) async fn insert_wall(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        let now = item::now_ms()?;
        self.conditional_put(
            item::record(key.as_str(), value, ttl, now),
            INSERT_CONDITION,
            &[("#k", KEY), ("#e", EXPIRES_MS)],
            vec![(":now", AttributeValue::N(now.to_string()))],
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
        self.conditional_put(
            item::record(key.as_str(), new, ttl, now),
            MATCH_LIVE_CONDITION,
            &[("#v", VALUE), ("#e", EXPIRES_MS)],
            vec![
                (":old", AttributeValue::B(Blob::new(old.to_vec()))),
                (":now", AttributeValue::N(now.to_string())),
            ],
            "PutItem (compare-and-swap)",
        )
        .await
    }

    pub(crate) async fn delete_wall(&self, key: &Key, value: &[u8]) -> Result<bool> {
        let now = item::now_ms()?;
        self.conditional_delete(
            key,
            MATCH_LIVE_CONDITION,
            &[("#v", VALUE), ("#e", EXPIRES_MS)],
            vec![
                (":old", AttributeValue::B(Blob::new(value.to_vec()))),
                (":now", AttributeValue::N(now.to_string())),
            ],
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
