//! The guarded resource on DynamoDB: an item in `chaos_guarded`
//! (`pk` = resource id, `fence`, `seq`, `writer`) updated with one
//! conditional `UpdateItem`,
//! `SET fence = :t, seq = seq + 1, writer = :w IF fence <= :t`, which
//! DynamoDB applies atomically, returning the new `seq`; the writer then
//! puts `(pk, seq) -> fence` into `chaos_guarded_log`, whose sort key
//! `seq` orders the accepted writes as DynamoDB applied them.

use std::collections::HashMap;

use aws_sdk_dynamodb::{
    Client,
    error::SdkError,
    operation::update_item::UpdateItemError,
    types::{
        AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
        ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
    },
};
use storage_dynamo::{DynamoConfig, DynamoStorage};

use super::{GuardedError, LogEntry, Verdict, db};

const TABLE: &str = "chaos_guarded";
const LOG: &str = "chaos_guarded_log";

/// A connection to one guarded item.
#[derive(Debug)]
pub(crate) struct DynamoGuarded {
    client: Client,
    id: String,
}

async fn client(url: &str) -> Result<Client, GuardedError> {
    let config = DynamoConfig::from_url(url)?;
    let storage = DynamoStorage::connect(config)
        .await
        .map_err(db("connecting to DynamoDB"))?;
    Ok(storage.client().clone())
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn get_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<u64, GuardedError> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| GuardedError::Answer(format!("no numeric {name} in {item:?}")))
}

async fn create_table(client: &Client, name: &str, sort: Option<&str>) -> Result<(), GuardedError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| GuardedError::Answer(e.to_string());
    let mut request = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .map_err(build)?,
        );
    if let Some(sort) = sort {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(sort)
                    .attribute_type(ScalarAttributeType::N)
                    .build()
                    .map_err(build)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(sort)
                    .key_type(KeyType::Range)
                    .build()
                    .map_err(build)?,
            );
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(err) => Err(db("creating a table")(err)),
    }
}

/// Creates both tables and the item `id` with fence 0, seq 0.
pub(crate) async fn setup(url: &str, id: &str) -> Result<(), GuardedError> {
    let client = client(url).await?;
    create_table(&client, TABLE, None).await?;
    create_table(&client, LOG, Some("seq")).await?;
    let put = client
        .put_item()
        .table_name(TABLE)
        .item("pk", AttributeValue::S(id.to_string()))
        .item("fence", n(0))
        .item("seq", n(0))
        .item("writer", AttributeValue::S("setup".into()))
        .condition_expression("attribute_not_exists(pk)")
        .send()
        .await;
    match put {
        Ok(_) => Ok(()),
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
        {
            Ok(())
        }
        Err(err) => Err(db("creating the resource item")(err)),
    }
}

/// Reads the log of `id` in accept order (strongly consistent).
pub(crate) async fn read_log(url: &str, id: &str) -> Result<Vec<LogEntry>, GuardedError> {
    let client = client(url).await?;
    let mut entries = Vec::new();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let page = client
            .query()
            .table_name(LOG)
            .key_condition_expression("pk = :id")
            .expression_attribute_values(":id", AttributeValue::S(id.to_string()))
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(db("reading the log"))?;
        for item in page.items() {
            entries.push(LogEntry {
                seq: get_n(item, "seq")?,
                token: get_n(item, "fence")?,
                writer: item
                    .get("writer")
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default(),
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

impl DynamoGuarded {
    /// Connects to the item `id` through the URL's endpoint.
    pub(crate) async fn connect(url: &str, id: &str) -> Result<Self, GuardedError> {
        Ok(DynamoGuarded {
            client: client(url).await?,
            id: id.to_string(),
        })
    }

    /// One conditional update (accepted if the item's fence is at most
    /// `limit`), then the log append.
    pub(crate) async fn write(
        &mut self,
        token: u64,
        writer: &str,
        limit: u64,
    ) -> Result<Verdict, GuardedError> {
        let result = self
            .client
            .update_item()
            .table_name(TABLE)
            .key("pk", AttributeValue::S(self.id.clone()))
            .update_expression("SET fence = :t, seq = seq + :one, writer = :w")
            .condition_expression("fence <= :limit")
            .expression_attribute_values(":t", n(token))
            .expression_attribute_values(":limit", n(limit))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":w", AttributeValue::S(writer.to_string()))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let seq = match result {
            Ok(out) => {
                let attributes = out
                    .attributes()
                    .ok_or_else(|| GuardedError::Answer("no UPDATED_NEW attributes".into()))?;
                get_n(attributes, "seq")?
            }
            Err(SdkError::ServiceError(err)) => match err.err() {
                UpdateItemError::ConditionalCheckFailedException(failed) => {
                    let seen = match failed.item() {
                        Some(item) => get_n(item, "fence")?,
                        None => self.read_fence().await?,
                    };
                    return Ok(Verdict::Rejected(seen));
                }
                _ => return Err(db("guarded update")(SdkError::ServiceError(err))),
            },
            Err(err) => return Err(db("guarded update")(err)),
        };
        self.client
            .put_item()
            .table_name(LOG)
            .item("pk", AttributeValue::S(self.id.clone()))
            .item("seq", n(seq))
            .item("fence", n(token))
            .item("writer", AttributeValue::S(writer.to_string()))
            .send()
            .await
            .map_err(db("log append"))?;
        Ok(Verdict::Accepted(seq))
    }

    /// The item's fence, strongly consistent (for answers without the old item).
    async fn read_fence(&self) -> Result<u64, GuardedError> {
        let out = self
            .client
            .get_item()
            .table_name(TABLE)
            .key("pk", AttributeValue::S(self.id.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(db("reading the fence"))?;
        let item = out
            .item()
            .ok_or_else(|| GuardedError::Answer("the resource item is missing".into()))?;
        get_n(item, "fence")
    }
}
