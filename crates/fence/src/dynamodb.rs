//! Fenced writes on DynamoDB: one conditional `UpdateItem` each.

use aws_sdk_dynamodb::{
    Client,
    error::SdkError,
    operation::{create_table::CreateTableError, update_item::UpdateItemError},
    types::{
        AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
        ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
    },
};

use crate::{AppendVerdict, FenceError, Fenced, LogEntry, Verdict, check_name, error::db, signed};

/// A DynamoDB table of fenced registers: items
/// `{resource: S (partition key), fence: N, value: B, seq: N}`, and their
/// logs in `<table>_log`: items `{resource: S (partition key), seq: N
/// (sort key), fence: N, value: B}`.
///
/// A write is one `UpdateItem` with
/// `ConditionExpression: attribute_not_exists(fence) OR fence <= :t`: the
/// check and the write are one atomic step of DynamoDB. An
/// [`append`](Self::append) is the same `UpdateItem`, also incrementing
/// `seq` and returning it, then a `PutItem` of the entry into the log.
///
/// ```no_run
/// # async fn demo(client: aws_sdk_dynamodb::Client, token: u64) -> Result<(), fence::FenceError> {
/// use fence::{DynamoFence, Verdict};
/// DynamoFence::create_table(&client, "fences").await?; // once
/// let fence = DynamoFence::new(client, "fences")?;
/// if let Verdict::Rejected { highest_seen } = fence.write("nightly-report", token, b"done").await? {
///     // A newer leader (token `highest_seen`) exists: stop working.
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoFence {
    client: Client,
    table: String,
}

impl DynamoFence {
    /// The condition to put on your own writes, with the token bound to
    /// `:t` (and `SET fence = :t` in the same update).
    pub const CONDITION: &'static str = "attribute_not_exists(fence) OR fence <= :t";

    /// Creates the table and its log table `<table>_log` (on-demand
    /// billing) unless they exist, and waits until both are active (up to
    /// a minute each).
    ///
    /// # Errors
    ///
    /// An invalid name, or DynamoDB's error.
    pub async fn create_table(client: &Client, table: &str) -> Result<(), FenceError> {
        check_name(table, &['-', '.'])?;
        check_name(&format!("{table}_log"), &['-', '.'])?;
        create(client, table, None).await?;
        create(client, &format!("{table}_log"), Some("seq")).await
    }

    /// Fenced writes to `table` (which must exist).
    ///
    /// # Errors
    ///
    /// An invalid table name.
    pub fn new(client: Client, table: &str) -> Result<Self, FenceError> {
        check_name(table, &['-', '.'])?;
        check_name(&format!("{table}_log"), &['-', '.'])?;
        Ok(DynamoFence {
            client,
            table: table.to_owned(),
        })
    }

    /// Writes `value` to `resource` with fencing `token`: applied only if
    /// `token` is at least the highest token the resource has seen.
    ///
    /// # Errors
    ///
    /// DynamoDB's error: the outcome is then unknown (see [`FenceError`]).
    pub async fn write(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<Verdict, FenceError> {
        signed(token)?;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("resource", AttributeValue::S(resource.to_owned()))
            .update_expression("SET fence = :t, #v = :v")
            .condition_expression(Self::CONDITION)
            .expression_attribute_names("#v", "value")
            .expression_attribute_values(":t", AttributeValue::N(token.to_string()))
            .expression_attribute_values(":v", AttributeValue::B(value.to_vec().into()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Verdict::Accepted),
            Err(SdkError::ServiceError(err)) => match err.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    let seen = match failed.item() {
                        Some(item) => fence_of(item)?,
                        None => self.read(resource).await?.map_or(0, |f| f.token),
                    };
                    Ok(Verdict::Rejected { highest_seen: seen })
                }
                _ => Err(db("fenced update")(SdkError::ServiceError(err))),
            },
            Err(err) => Err(db("fenced update")(err)),
        }
    }

    /// Appends `value` to `resource`'s log with fencing `token`: accepted
    /// only if `token` is at least the highest token the resource has seen
    /// (the register's fence, shared with [`write`](Self::write)). One
    /// conditional `UpdateItem` raises the fence and increments `seq`,
    /// returning it; then the entry is put into the log at that `seq`.
    ///
    /// # Errors
    ///
    /// DynamoDB's error: the outcome is then unknown (see [`FenceError`]).
    /// If the update applied but the put failed, the log has a gap at
    /// that sequence number.
    pub async fn append(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<AppendVerdict, FenceError> {
        signed(token)?;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("resource", AttributeValue::S(resource.to_owned()))
            .update_expression("SET fence = :t, seq = if_not_exists(seq, :zero) + :one")
            .condition_expression(Self::CONDITION)
            .expression_attribute_values(":t", AttributeValue::N(token.to_string()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let seq = match result {
            Ok(out) => {
                let attributes = out
                    .attributes()
                    .ok_or_else(|| FenceError::Answer("no UPDATED_NEW attributes".into()))?;
                number_of(attributes, "seq")?
            }
            Err(SdkError::ServiceError(err)) => match err.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    let seen = match failed.item() {
                        Some(item) => fence_of(item)?,
                        None => self.read(resource).await?.map_or(0, |f| f.token),
                    };
                    return Ok(AppendVerdict::Rejected { highest_seen: seen });
                }
                _ => return Err(db("fenced append")(SdkError::ServiceError(err))),
            },
            Err(err) => return Err(db("fenced append")(err)),
        };
        self.client
            .put_item()
            .table_name(format!("{}_log", self.table))
            .item("resource", AttributeValue::S(resource.to_owned()))
            .item("seq", AttributeValue::N(seq.to_string()))
            .item("fence", AttributeValue::N(token.to_string()))
            .item("value", AttributeValue::B(value.to_vec().into()))
            .send()
            .await
            .map_err(db("fenced log put (the log has a gap)"))?;
        Ok(AppendVerdict::Appended { seq })
    }

    /// Reads `resource`'s log, in accept order (strongly consistent).
    ///
    /// # Errors
    ///
    /// DynamoDB's error.
    pub async fn log(&self, resource: &str) -> Result<Vec<LogEntry>, FenceError> {
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
                .map_err(db("reading the log"))?;
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

    /// The register of `resource` (a strongly consistent read), or `None`
    /// if it was never written.
    ///
    /// # Errors
    ///
    /// DynamoDB's error.
    pub async fn read(&self, resource: &str) -> Result<Option<Fenced>, FenceError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("resource", AttributeValue::S(resource.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(db("reading the register"))?;
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
}

/// Creates one table keyed by `resource` (and the numeric sort key
/// `sort`, if any) unless it exists, and waits until it is active.
async fn create(client: &Client, table: &str, sort: Option<&str>) -> Result<(), FenceError> {
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("resource")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(db("building the table definition"))?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("resource")
                .key_type(KeyType::Hash)
                .build()
                .map_err(db("building the key schema"))?,
        );
    if let Some(sort) = sort {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(sort)
                    .attribute_type(ScalarAttributeType::N)
                    .build()
                    .map_err(db("building the table definition"))?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(sort)
                    .key_type(KeyType::Range)
                    .build()
                    .map_err(db("building the key schema"))?,
            );
    }
    match request.send().await {
        Ok(_) => {}
        Err(SdkError::ServiceError(err))
            if matches!(err.err(), CreateTableError::ResourceInUseException(_)) => {}
        Err(err) => return Err(db("creating the fence table")(err)),
    }
    for _ in 0..120 {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(db("describing the fence table"))?;
        if described.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        tokio_sleep_500ms().await;
    }
    Err(FenceError::Answer(format!(
        "table {table} is not active after a minute"
    )))
}

fn fence_of(item: &std::collections::HashMap<String, AttributeValue>) -> Result<u64, FenceError> {
    number_of(item, "fence")
}

fn number_of(
    item: &std::collections::HashMap<String, AttributeValue>,
    name: &str,
) -> Result<u64, FenceError> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n
            .parse()
            .map_err(|_| FenceError::Answer(format!("{name} is not a number: {n:?}"))),
        other => Err(FenceError::Answer(format!("{name} attribute: {other:?}"))),
    }
}

async fn tokio_sleep_500ms() {
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}
