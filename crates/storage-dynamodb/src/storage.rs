//! [`DynamoDbStorage`]: the [`TtlStorage`] implementation.

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};
use aws_sdk_dynamodb::{
    Client,
    config::Credentials,
    error::SdkError,
    operation::put_item::{PutItemError, builders::PutItemFluentBuilder},
    types::{AttributeValue, ReturnValuesOnConditionCheckFailure},
};
use backon::{ExponentialBuilder, Retryable};
use ttl_storage::{Entry, Key, Result, StorageError, Ttl, TtlStorage, check_value};

use crate::{
    ConnectError, DynamoDbConfig, ExpiryMode,
    classify::{Op, to_storage},
    item::KEY,
    observed::Observations,
    table,
};

/// A [`TtlStorage`] on one DynamoDB table.
///
/// Cheap to clone (the SDK client is reference counted). See the crate
/// docs for the guarantees and the clock assumption.
#[derive(Debug, Clone)]
pub struct DynamoDbStorage {
    client: Client,
    table: String,
    max_attempts: u32,
    pub(crate) mode: ExpiryMode,
    /// Versions seen per key ([`ExpiryMode::ObservedLease`] only), shared by clones.
    pub(crate) observations: Arc<Observations>,
}

impl DynamoDbStorage {
    /// Builds the client from `config` (region and credentials from the
    /// config, else from the usual AWS chain), then checks the table, or
    /// creates it when `create_table` is set.
    pub async fn connect(config: DynamoDbConfig) -> Result<Self, ConnectError> {
        let create = config.create_table;
        Self::open(config, create).await
    }

    /// Connects like [`connect`](Self::connect) but never creates the
    /// table (nor changes its TTL setting), whatever `create_table` says:
    /// a missing table is [`ConnectError::TableNotFound`].
    pub async fn connect_existing(config: DynamoDbConfig) -> Result<Self, ConnectError> {
        Self::open(config, false).await
    }

    async fn open(config: DynamoDbConfig, create: bool) -> Result<Self, ConnectError> {
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
                "storage-dynamodb",
            ));
        }
        let sdk_config = loader.load().await;
        if sdk_config.region().is_none() {
            return Err(ConnectError::MissingRegion);
        }
        let client = Client::new(&sdk_config);
        if let Err(err) = table::ensure(&client, &config.table, create).await {
            return Err(plaintext_endpoint(&config, err).await);
        }
        Ok(DynamoDbStorage {
            client,
            table: config.table,
            max_attempts: config.max_attempts,
            mode: config.expiry_mode,
            observations: Arc::default(),
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
    async fn retrying<T, F, Fut>(&self, what: &'static str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        attempt
            .retry(retry_policy(self.max_attempts))
            .when(StorageError::is_transient)
            .notify(|err, pause| {
                tracing::debug!(what, ?pause, error = %err, "transient DynamoDB error, retrying");
            })
            .await
    }

    /// The PutItem request of `item` under `condition`.
    fn put_request(
        &self,
        item: HashMap<String, AttributeValue>,
        condition: Condition<'_>,
    ) -> PutItemFluentBuilder {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition.expression)
            .set_expression_attribute_names(Some(names_map(condition.names)))
            .set_expression_attribute_values(values_map(condition.values))
    }

    /// A PutItem of `item` under `condition`: `Ok(false)` if it failed.
    pub(crate) async fn conditional_put(
        &self,
        item: HashMap<String, AttributeValue>,
        condition: Condition<'_>,
        what: &str,
    ) -> Result<bool> {
        let result = self.put_request(item, condition).send().await;
        match result {
            Ok(_) => Ok(true),
            Err(err) => to_storage(err, Op::Write, what),
        }
    }

    /// A PutItem of `item` under `condition` that, when the condition
    /// fails, returns the item as the condition saw it
    /// (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so the caller
    /// can tell *why* without a second request.
    pub(crate) async fn conditional_put_or_old(
        &self,
        item: HashMap<String, AttributeValue>,
        condition: Condition<'_>,
        what: &str,
    ) -> Result<PutOutcome> {
        let result = self
            .put_request(item, condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(PutOutcome::Applied),
            Err(SdkError::ServiceError(service))
                if matches!(
                    service.err(),
                    PutItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                let found = match service.into_err() {
                    PutItemError::ConditionalCheckFailedException(failed) => failed.item,
                    _ => None,
                };
                Ok(PutOutcome::Refused(found))
            }
            Err(err) => to_storage(err, Op::Write, what).map(|_| PutOutcome::Refused(None)),
        }
    }

    /// A DeleteItem of `key` under `condition`: `Ok(false)` if it failed.
    pub(crate) async fn conditional_delete(
        &self,
        key: &Key,
        condition: Condition<'_>,
        what: &str,
    ) -> Result<bool> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.as_str().to_string()))
            .condition_expression(condition.expression)
            .set_expression_attribute_names(Some(names_map(condition.names)))
            .set_expression_attribute_values(values_map(condition.values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) => to_storage(err, Op::Write, what),
        }
    }

    /// A strongly consistent GetItem of `key`.
    pub(crate) async fn read(&self, key: &Key) -> Result<Option<HashMap<String, AttributeValue>>> {
        let result = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(KEY, AttributeValue::S(key.as_str().to_string()))
            .consistent_read(true)
            .send()
            .await;
        match result {
            Ok(out) => Ok(out.item),
            Err(err) => match to_storage(err, Op::Read, "GetItem") {
                Err(err) => Err(err),
                Ok(_) => Err(StorageError::permanent(
                    "GetItem: unexpected condition failure",
                )),
            },
        }
    }
}

/// A request's condition: its expression, with the attribute names and
/// values the expression's placeholders (`#k`, `:now`) stand for.
pub(crate) struct Condition<'a> {
    /// The condition expression.
    pub(crate) expression: &'a str,
    /// `#name` placeholders and the attributes they name.
    pub(crate) names: &'a [(&'a str, &'a str)],
    /// `:value` placeholders and their values (none: sent without).
    pub(crate) values: Vec<(&'a str, AttributeValue)>,
}

/// What a conditional PutItem did.
#[derive(Debug)]
pub(crate) enum PutOutcome {
    /// The item was written.
    Applied,
    /// The condition failed; the item as it was then, if there was one.
    Refused(Option<HashMap<String, AttributeValue>>),
}

fn names_map(names: &[(&str, &str)]) -> HashMap<String, String> {
    names
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// DynamoDB rejects an empty ExpressionAttributeValues map: `None` then.
fn values_map(values: Vec<(&str, AttributeValue)>) -> Option<HashMap<String, AttributeValue>> {
    (!values.is_empty()).then(|| {
        values
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    })
}

#[async_trait]
impl TtlStorage for DynamoDbStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        self.retrying("insert", || async {
            match self.mode {
                ExpiryMode::WallClock => self.insert_wall(key, value, ttl).await,
                ExpiryMode::ObservedLease => self.insert_observed(key, value, ttl).await,
            }
        })
        .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        self.retrying("compare_and_swap", || async {
            match self.mode {
                ExpiryMode::WallClock => self.swap_wall(key, old, new, ttl).await,
                ExpiryMode::ObservedLease => self.swap_observed(key, old, new, ttl).await,
            }
        })
        .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        self.retrying("compare_and_delete", || async {
            match self.mode {
                ExpiryMode::WallClock => self.delete_wall(key, value).await,
                ExpiryMode::ObservedLease => self.delete_observed(key, value).await,
            }
        })
        .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.retrying("get", || async {
            match self.mode {
                ExpiryMode::WallClock => self.get_wall(key).await,
                ExpiryMode::ObservedLease => self.get_observed(key).await,
            }
        })
        .await
    }

    /// In [`ExpiryMode::WallClock`] the time left is the record's expiry
    /// (written by its writer) minus this machine's wall clock: the same
    /// comparison every operation makes. In [`ExpiryMode::ObservedLease`]
    /// expiry is per observer, so it is unknown.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        match self.mode {
            ExpiryMode::WallClock => self.retrying("get", || self.get_entry_wall(key)).await,
            ExpiryMode::ObservedLease => Ok(self.get(key).await?.map(Entry::unknown_time_left)),
        }
    }
}

/// The pauses between attempts: exponential from 40 ms, doubling up to
/// 1.28 s, each with random jitter so contenders do not retry in step;
/// `max_attempts - 1` retries at most.
fn retry_policy(max_attempts: u32) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(40))
        .with_max_delay(Duration::from_millis(1_280))
        .with_factor(2.0)
        .with_jitter()
        .with_max_times(usize::try_from(max_attempts.saturating_sub(1)).unwrap_or(usize::MAX))
}

/// The error of a failed first request, said plainly when the `https://`
/// endpoint speaks plaintext: the SDK says "dispatch failure" or an I/O
/// error; a plaintext `HEAD /` to the same address tells it (a diagnosis,
/// never a fallback), and a configuration mistake is permanent.
async fn plaintext_endpoint(config: &DynamoDbConfig, err: ConnectError) -> ConnectError {
    let Some(endpoint) = config.endpoint.as_deref() else {
        return err;
    };
    let Some(rest) = endpoint.strip_prefix("https://") else {
        return err;
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => match port.parse::<u16>() {
            Ok(port) => (host, port),
            Err(_) => return err,
        },
        _ => (authority, 443),
    };
    let host = host.trim_matches(['[', ']']);
    let limit = config.connect_timeout.min(Duration::from_secs(2));
    let greeting = b"HEAD / HTTP/1.0\r\n\r\n";
    if !ttl_storage::kit::tls::answers_in_plaintext(host, port, greeting, limit).await {
        return err;
    }
    tracing::debug!(%endpoint, %err, "the endpoint answered plaintext HTTP: it does not speak TLS");
    ConnectError::Storage(StorageError::permanent(format!(
        "connecting to {endpoint} failed: the server does not speak TLS (it answers plaintext \
         HTTP); use an http:// endpoint for it, or enable TLS on the server"
    )))
}
