//! The [`fence::Fence`] of DynamoDB: each guarded write or append is one
//! conditional `UpdateItem`.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    Client,
    error::SdkError,
    operation::{
        create_table::CreateTableError,
        query::QueryError,
        update_item::{UpdateItemError, UpdateItemOutput, builders::UpdateItemFluentBuilder},
    },
    types::{
        AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
        ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
    },
};
use fence::{
    AppendOutcome, DynFence, Fence, FenceOutcome, Fenced, LogEntry, Numbering, OpenOptions,
    check_name, signed_token,
};
use ttl_storage::{ErrorKind, Result, StorageError};

use crate::{
    ConnectError, DynamoDbConfig, DynamoDbStorage,
    classify::{Failure, Op, OperationError, classify},
};

impl OperationError for UpdateItemError {
    fn is_condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

impl OperationError for QueryError {}

/// A failed request of kind `op` (a failed condition is handled before).
fn db<E: OperationError>(what: &'static str, op: Op) -> impl Fn(SdkError<E>) -> StorageError {
    move |err| {
        let kind = match classify(&err, op) {
            Failure::Error(kind) => kind,
            // Not expected here: whatever it is, it may have applied.
            Failure::ConditionFailed => ErrorKind::OutcomeUnknown,
        };
        StorageError::with_source(kind, what, err)
    }
}

/// A request that could not be built: nothing was sent.
fn building(err: aws_sdk_dynamodb::error::BuildError) -> StorageError {
    StorageError::with_source(ErrorKind::Permanent, "building a DynamoDB request", err)
}

/// An answer without the expected attributes.
fn answer(kind: ErrorKind, detail: String) -> StorageError {
    StorageError::with_source(
        kind,
        "unexpected answer from DynamoDB",
        std::io::Error::other(detail),
    )
}

/// A DynamoDB table of fenced registers: items
/// `{resource: S (partition key), fence: N, value: B, seq: N}`, and their
/// logs in `<table>_log`: items `{resource: S (partition key), seq: N
/// (sort key), fence: N, value: B}`.
///
/// A write is one `UpdateItem` with
/// `ConditionExpression: attribute_not_exists(fence) OR fence <= :t`: the
/// check and the write are one atomic step of DynamoDB. An append is the
/// same `UpdateItem`, also incrementing `seq` and returning it
/// ([`Numbering::Contiguous`]), then a `PutItem` of the entry into the log
/// (if that fails, the log has a gap at that number). Reads are strongly
/// consistent.
///
/// ```no_run
/// # async fn demo(client: aws_sdk_dynamodb::Client, token: u64) -> Result<(), ttl_storage::StorageError> {
/// use fence::{Fence, FenceOutcome};
/// use storage_dynamodb::fence::DynamoDbFence;
/// DynamoDbFence::create_table(&client, "fences").await?; // once
/// let fence = DynamoDbFence::new(client, "fences")?;
/// if let FenceOutcome::Rejected { highest } = fence.write("nightly-report", token, b"done").await? {
///     // A newer leader (token `highest`) exists: stop working.
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoDbFence {
    client: Client,
    table: String,
}

impl DynamoDbFence {
    /// The condition to put on your own writes, with the token bound to
    /// `:t` (and `SET fence = :t` in the same update).
    pub const CONDITION: &'static str = "attribute_not_exists(fence) OR fence <= :t";

    /// Creates the table and its log table `<table>_log` (on-demand
    /// billing) unless they exist, and waits until both are active (up to
    /// a minute each).
    ///
    /// # Errors
    ///
    /// An invalid name (permanent), or DynamoDB's error.
    pub async fn create_table(client: &Client, table: &str) -> Result<()> {
        check_name(table, &['-', '.'])?;
        check_name(&format!("{table}_log"), &['-', '.'])?;
        create(client, table, None).await?;
        create(client, &format!("{table}_log"), Some("seq")).await
    }

    /// Fenced writes to `table` (which must exist).
    ///
    /// # Errors
    ///
    /// An invalid table name (permanent).
    pub fn new(client: Client, table: &str) -> Result<Self> {
        check_name(table, &['-', '.'])?;
        check_name(&format!("{table}_log"), &['-', '.'])?;
        Ok(DynamoDbFence {
            client,
            table: table.to_owned(),
        })
    }
}

/// What a guarded `UpdateItem` came to.
enum Guarded {
    /// The condition held: the update is applied.
    Applied(Box<UpdateItemOutput>),
    /// The resource has seen the higher token `highest`: nothing changed.
    Refused { highest: u64 },
}

impl DynamoDbFence {
    /// The `UpdateItem` of `resource` under [`Self::CONDITION`], with the
    /// token bound to `:t` and the old item returned if the condition
    /// fails; the caller adds what it sets.
    fn guarded_update(&self, resource: &str, token: u64) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("resource", AttributeValue::S(resource.to_owned()))
            .condition_expression(Self::CONDITION)
            .expression_attribute_values(":t", AttributeValue::N(token.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// Sends a [`guarded_update`](Self::guarded_update): refused with the
    /// token the failed condition saw (read back if DynamoDB did not return
    /// the old item), or DynamoDB's error, classified as a write (`what`
    /// names it).
    async fn send_guarded(
        &self,
        resource: &str,
        update: UpdateItemFluentBuilder,
        what: &'static str,
    ) -> Result<Guarded> {
        match update.send().await {
            Ok(out) => Ok(Guarded::Applied(Box::new(out))),
            Err(SdkError::ServiceError(err)) => match err.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    let highest = match failed.item() {
                        Some(item) => fence_of(item)?,
                        None => self.read(resource).await?.map_or(0, |f| f.token),
                    };
                    Ok(Guarded::Refused { highest })
                }
                _ => Err(db(what, Op::Write)(SdkError::ServiceError(err))),
            },
            Err(err) => Err(db(what, Op::Write)(err)),
        }
    }
}

#[async_trait]
impl Fence for DynamoDbFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        signed_token(token)?;
        let update = self
            .guarded_update(resource, token)
            .update_expression("SET fence = :t, #v = :v")
            .expression_attribute_names("#v", "value")
            .expression_attribute_values(":v", AttributeValue::B(value.to_vec().into()));
        match self.send_guarded(resource, update, "fenced update").await? {
            Guarded::Applied(_) => Ok(FenceOutcome::Accepted),
            Guarded::Refused { highest } => Ok(FenceOutcome::Rejected { highest }),
        }
    }

    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        signed_token(token)?;
        let update = self
            .guarded_update(resource, token)
            .update_expression("SET fence = :t, seq = if_not_exists(seq, :zero) + :one")
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(ReturnValue::UpdatedNew);
        let out = match self.send_guarded(resource, update, "fenced append").await? {
            Guarded::Applied(out) => out,
            Guarded::Refused { highest } => return Ok(AppendOutcome::Rejected { highest }),
        };
        let attributes = out.attributes().ok_or_else(|| {
            answer(
                ErrorKind::OutcomeUnknown,
                "no UPDATED_NEW attributes".into(),
            )
        })?;
        let seq = number_of(attributes, "seq")?;
        self.client
            .put_item()
            .table_name(format!("{}_log", self.table))
            .item("resource", AttributeValue::S(resource.to_owned()))
            .item("seq", AttributeValue::N(seq.to_string()))
            .item("fence", AttributeValue::N(token.to_string()))
            .item("value", AttributeValue::B(value.to_vec().into()))
            .send()
            .await
            .map_err(db("fenced log put (the log has a gap)", Op::Write))?;
        Ok(AppendOutcome::Appended { seq })
    }

    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        let mut entries = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(format!("{}_log", self.table))
                .key_condition_expression("#r = :r")
                .expression_attribute_names("#r", "resource")
                .expression_attribute_values(":r", AttributeValue::S(resource.to_owned()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(db("reading the log", Op::Read))?;
            for item in page.items() {
                let value = match item.get("value") {
                    Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
                    _ => Vec::new(),
                };
                entries.push(LogEntry {
                    seq: number_of(item, "seq")?,
                    token: fence_of(item)?,
                    value,
                });
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => break,
            }
        }
        entries.sort_by_key(|e| e.seq);
        Ok(entries)
    }

    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("resource", AttributeValue::S(resource.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(db("reading the register", Op::Read))?;
        let Some(item) = out.item() else {
            return Ok(None);
        };
        let value = match item.get("value") {
            Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
            _ => Vec::new(),
        };
        Ok(Some(Fenced {
            token: fence_of(item)?,
            value,
        }))
    }

    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}

/// Creates one table keyed by `resource` (and the numeric sort key
/// `sort`, if any) unless it exists, and waits until it is active.
async fn create(client: &Client, table: &str, sort: Option<&str>) -> Result<()> {
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("resource")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(building)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("resource")
                .key_type(KeyType::Hash)
                .build()
                .map_err(building)?,
        );
    if let Some(sort) = sort {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(sort)
                    .attribute_type(ScalarAttributeType::N)
                    .build()
                    .map_err(building)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(sort)
                    .key_type(KeyType::Range)
                    .build()
                    .map_err(building)?,
            );
    }
    match request.send().await {
        Ok(_) => {}
        Err(SdkError::ServiceError(err))
            if matches!(err.err(), CreateTableError::ResourceInUseException(_)) => {}
        Err(err) => return Err(db("creating the fence table", Op::Read)(err)),
    }
    for _ in 0..120 {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(db("describing the fence table", Op::Read))?;
        if described.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        tokio_sleep_500ms().await;
    }
    Err(StorageError::transient(format!(
        "fence table {table} is not active after a minute"
    )))
}

fn fence_of(item: &std::collections::HashMap<String, AttributeValue>) -> Result<u64> {
    number_of(item, "fence")
}

fn number_of(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> Result<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().map_err(|_| {
            answer(
                ErrorKind::Permanent,
                format!("{name} is not a number: {n:?}"),
            )
        }),
        other => Err(answer(
            ErrorKind::Permanent,
            format!("{name} attribute: {other:?}"),
        )),
    }
}

async fn tokio_sleep_500ms() {
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}

/// Opens the fence of a `dynamodb://` configuration (a parsed URL, as
/// [`crate::DRIVER`]'s fence opener passes it): the storage's client (region, endpoint,
/// credentials of the configuration), in the table `options.table` (and
/// `<table>_log`), created first if `options.create`.
///
/// # Errors
///
/// A bad table name (permanent), or DynamoDB's error.
pub async fn open(config: DynamoDbConfig, options: &OpenOptions) -> Result<DynFence> {
    let storage = DynamoDbStorage::connect(config)
        .await
        .map_err(|err| match err {
            ConnectError::Storage(err) => err,
            ConnectError::NotActive(_) => {
                StorageError::with_source(ErrorKind::Transient, "fence: connecting", err)
            }
            other => StorageError::with_source(ErrorKind::Permanent, "fence: connecting", other),
        })?;
    let client = storage.client().clone();
    if options.create {
        DynamoDbFence::create_table(&client, &options.table).await?;
    }
    Ok(Arc::new(DynamoDbFence::new(client, &options.table)?))
}
