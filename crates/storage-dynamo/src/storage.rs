//! [`DynamoStorage`]: the [`TtlStorage`] implementation.

use std::{future::Future, time::Duration};

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};
use aws_sdk_dynamodb::{Client, config::Credentials, primitives::Blob, types::AttributeValue};
use rand::Rng;
use ttl_storage::{Key, Result, StorageError, Ttl, TtlStorage, check_value};

use crate::{
    ConnectError, DynamoConfig,
    errors::{Op, to_storage},
    item::{self, EXPIRES_MS, KEY, VALUE},
    table,
};

/// Condition of `insert_if_not_exists`: no record, or an expired one.
const INSERT_CONDITION: &str = "attribute_not_exists(#k) OR #e <= :now";
/// Condition of `compare_and_swap` and `compare_and_delete`: a live record holding `:old`.
const MATCH_LIVE_CONDITION: &str = "#v = :old AND (attribute_not_exists(#e) OR #e > :now)";

/// A [`TtlStorage`] on one DynamoDB table.
///
/// Cheap to clone (the SDK client is reference counted). See the crate
/// docs for the guarantees and the clock assumption.
#[derive(Debug, Clone)]
pub struct DynamoStorage {
    client: Client,
    table: String,
    max_attempts: u32,
}

impl DynamoStorage {
    /// Builds the client from `config` (region and credentials from the
    /// config, else from the usual AWS chain), then checks the table, or
    /// creates it when `create_table` is set.
    pub async fn connect(config: DynamoConfig) -> Result<Self, ConnectError> {
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(config.connect_timeout)
            .operation_attempt_timeout(config.request_timeout)
            .operation_timeout(config.request_timeout)
            .build();
        // The SDK would retry timeouts and 500s of conditional writes, turning
        // "applied, answer lost" into a false `false`; retries are ours.
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .timeout_config(timeouts)
            .retry_config(RetryConfig::disabled());
        if let Some(region) = &config.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &config.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(c) = &config.credentials {
            loader = loader.credentials_provider(Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.clone(),
                c.session_token.clone(),
                None,
                "storage-dynamo",
            ));
        }
        let sdk_config = loader.load().await;
        if sdk_config.region().is_none() {
            return Err(ConnectError::MissingRegion);
        }
        let client = Client::new(&sdk_config);
        table::ensure(&client, &config.table, config.create_table).await?;
        Ok(DynamoStorage {
            client,
            table: config.table,
            max_attempts: config.max_attempts,
        })
    }

    /// The table this storage writes to.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The underlying SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs `attempt` until it succeeds, fails for good, or `max_attempts`
    /// transient failures (which prove the request was not applied) pass.
    async fn retrying<T, F, Fut>(&self, what: &'static str, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut tries = 1;
        loop {
            match attempt().await {
                Err(err) if err.is_transient() && tries < self.max_attempts => {
                    let base = 20u64 << tries.min(6);
                    let pause = Duration::from_millis(rand::rng().random_range(base / 2..=base));
                    tracing::debug!(what, tries, ?pause, error = %err, "transient DynamoDB error, retrying");
                    tokio::time::sleep(pause).await;
                    tries += 1;
                }
                result => return result,
            }
        }
    }

    async fn insert_once(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        let now = item::now_ms()?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item::record(key.as_str(), value, ttl, now)))
            .condition_expression(INSERT_CONDITION)
            .expression_attribute_names("#k", KEY)
            .expression_attribute_names("#e", EXPIRES_MS)
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) => to_storage(err, Op::ConditionalWrite, "PutItem (insert)"),
        }
    }

    async fn swap_once(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        let now = item::now_ms()?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item::record(key.as_str(), new, ttl, now)))
            .condition_expression(MATCH_LIVE_CONDITION)
            .expression_attribute_names("#v", VALUE)
            .expression_attribute_names("#e", EXPIRES_MS)
            .expression_attribute_values(":old", AttributeValue::B(Blob::new(old.to_vec())))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) => to_storage(err, Op::ConditionalWrite, "PutItem (compare-and-swap)"),
        }
    }

    async fn delete_once(&self, key: &Key, value: &[u8]) -> Result<bool> {
        let now = item::now_ms()?;
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.as_str().to_string()))
            .condition_expression(MATCH_LIVE_CONDITION)
            .expression_attribute_names("#v", VALUE)
            .expression_attribute_names("#e", EXPIRES_MS)
            .expression_attribute_values(":old", AttributeValue::B(Blob::new(value.to_vec())))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) => to_storage(err, Op::ConditionalWrite, "DeleteItem (compare-and-delete)"),
        }
    }

    async fn get_once(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        let result = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.as_str().to_string()))
            .consistent_read(true)
            .send()
            .await;
        match result {
            Ok(out) => match out.item {
                // The clock is read after the answer: a record that expired
                // while the request was in flight is reported as gone.
                Some(found) => item::live_value(&found, item::now_ms()?),
                None => Ok(None),
            },
            Err(err) => match to_storage(err, Op::Read, "GetItem") {
                Err(err) => Err(err),
                Ok(_) => Err(StorageError::permanent(
                    "GetItem: unexpected condition failure",
                )),
            },
        }
    }
}

#[async_trait]
impl TtlStorage for DynamoStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        self.retrying("insert", || self.insert_once(key, value, ttl))
            .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        self.retrying("compare_and_swap", || self.swap_once(key, old, new, ttl))
            .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        self.retrying("compare_and_delete", || self.delete_once(key, value))
            .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.retrying("get", || self.get_once(key)).await
    }
}
