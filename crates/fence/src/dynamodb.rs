//! Fenced writes on DynamoDB: one conditional `UpdateItem` each.

use aws_sdk_dynamodb::{
    Client,
    error::SdkError,
    operation::{create_table::CreateTableError, update_item::UpdateItemError},
    types::{
        AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
        ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
    },
};

use crate::{FenceError, Fenced, Verdict, check_name, error::db, signed};

/// A DynamoDB table of fenced registers: items
/// `{resource: S (partition key), fence: N, value: B}`.
///
/// A write is one `UpdateItem` with
/// `ConditionExpression: attribute_not_exists(fence) OR fence <= :t`: the
/// check and the write are one atomic step of DynamoDB.
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

    /// Creates the table (on-demand billing) unless it exists, and waits
    /// until it is active (up to a minute).
    ///
    /// # Errors
    ///
    /// An invalid name, or DynamoDB's error.
    pub async fn create_table(client: &Client, table: &str) -> Result<(), FenceError> {
        check_name(table, &['-', '.'])?;
        let created = client
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
            )
            .send()
            .await;
        match created {
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

    /// Fenced writes to `table` (which must exist).
    ///
    /// # Errors
    ///
    /// An invalid table name.
    pub fn new(client: Client, table: &str) -> Result<Self, FenceError> {
        check_name(table, &['-', '.'])?;
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

fn fence_of(item: &std::collections::HashMap<String, AttributeValue>) -> Result<u64, FenceError> {
    match item.get("fence") {
        Some(AttributeValue::N(n)) => n
            .parse()
            .map_err(|_| FenceError::Answer(format!("fence is not a number: {n:?}"))),
        other => Err(FenceError::Answer(format!("fence attribute: {other:?}"))),
    }
}

async fn tokio_sleep_500ms() {
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}
