//! Creating the table when asked, and checking an existing one.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::{
    Client,
    types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        TableDescription, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
    },
};
use ttl_storage::StorageError;

use crate::{
    ConfigError,
    classify::{Op, to_storage},
    item::{KEY, REAPER_TTL},
};

/// How long [`crate::DynamoDbStorage::connect`] waits for a new table to become active.
const ACTIVE_WAIT: Duration = Duration::from_secs(120);

/// Why [`crate::DynamoDbStorage::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No region in the configuration nor in the AWS chain (`AWS_REGION`, profile).
    #[error("no AWS region: set one in the configuration or AWS_REGION")]
    MissingRegion,
    /// The table does not exist and `create_table` is off.
    #[error("table {0:?} does not exist (create it, or set create_table=true)")]
    TableNotFound(String),
    /// The table exists but its key schema is not the one this driver needs.
    #[error(
        "table {table:?} has the wrong key schema: need a single HASH key \"{KEY}\" of type S, found {found}"
    )]
    WrongSchema {
        /// The table.
        table: String,
        /// What the table has, in words.
        found: String,
    },
    /// The table did not become active in time.
    #[error("table {0:?} did not become ACTIVE within {ACTIVE_WAIT:?}")]
    NotActive(String),
    /// A DynamoDB call failed (network, auth, throttling, ...).
    #[error("DynamoDB call failed while checking the table")]
    Storage(#[from] StorageError),
}

/// Makes sure `table` exists with the right schema, creating it if `create` is set.
pub(crate) async fn ensure(client: &Client, table: &str, create: bool) -> Result<(), ConnectError> {
    let description = match describe(client, table).await? {
        Some(description) => description,
        None if create => {
            create_table(client, table).await?;
            wait_active(client, table).await?
        }
        None => return Err(ConnectError::TableNotFound(table.to_string())),
    };
    check_key_schema(table, &description)?;
    if create {
        enable_ttl(client, table).await?;
    } else {
        warn_if_ttl_off(client, table).await;
    }
    Ok(())
}

async fn describe(client: &Client, table: &str) -> Result<Option<TableDescription>, ConnectError> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table),
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(err) => Err(storage_err(to_storage(err, Op::Read, "DescribeTable"))),
    }
}

/// Turns the `Result<bool, StorageError>` of the mapping into a connect error
/// (reads never yield `Ok(false)`, but be total anyway).
fn storage_err(result: Result<bool, StorageError>) -> ConnectError {
    match result {
        Err(err) => ConnectError::Storage(err),
        Ok(_) => ConnectError::Storage(StorageError::permanent("unexpected condition failure")),
    }
}

async fn create_table(client: &Client, table: &str) -> Result<(), ConnectError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| {
        ConnectError::Storage(StorageError::with_source(
            ttl_storage::ErrorKind::Permanent,
            "building CreateTable",
            e,
        ))
    };
    let attribute = AttributeDefinition::builder()
        .attribute_name(KEY)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(build)?;
    let key = KeySchemaElement::builder()
        .attribute_name(KEY)
        .key_type(KeyType::Hash)
        .build()
        .map_err(build)?;
    let result = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attribute)
        .key_schema(key)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    match result {
        Ok(_) => {
            tracing::info!(table, "created DynamoDB table");
            Ok(())
        }
        // Somebody created it concurrently: fine, validate what they made.
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(err) => Err(storage_err(to_storage(err, Op::Read, "CreateTable"))),
    }
}

async fn wait_active(client: &Client, table: &str) -> Result<TableDescription, ConnectError> {
    let started = Instant::now();
    loop {
        if let Some(description) = describe(client, table).await?
            && description.table_status() == Some(&TableStatus::Active)
        {
            return Ok(description);
        }
        if started.elapsed() > ACTIVE_WAIT {
            return Err(ConnectError::NotActive(table.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn check_key_schema(table: &str, description: &TableDescription) -> Result<(), ConnectError> {
    let keys = description.key_schema();
    let key_ok =
        matches!(keys, [only] if only.attribute_name() == KEY && *only.key_type() == KeyType::Hash);
    let type_ok = description
        .attribute_definitions()
        .iter()
        .any(|a| a.attribute_name() == KEY && *a.attribute_type() == ScalarAttributeType::S);
    if key_ok && type_ok {
        return Ok(());
    }
    let found = keys
        .iter()
        .map(|k| {
            let ty = description
                .attribute_definitions()
                .iter()
                .find(|a| a.attribute_name() == k.attribute_name())
                .map(|a| a.attribute_type().as_str().to_string())
                .unwrap_or_else(|| "?".into());
            format!("{} {} {}", k.key_type().as_str(), k.attribute_name(), ty)
        })
        .collect::<Vec<_>>()
        .join(", ");
    Err(ConnectError::WrongSchema {
        table: table.to_string(),
        found: format!("[{found}]"),
    })
}

/// The attribute DynamoDB's TTL reaper uses on `table`, if TTL is on.
async fn ttl_attribute(client: &Client, table: &str) -> Result<Option<String>, ConnectError> {
    let out = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| storage_err(to_storage(e, Op::Read, "DescribeTimeToLive")))?;
    Ok(out
        .time_to_live_description
        .and_then(|d| match d.time_to_live_status() {
            Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling) => {
                d.attribute_name().map(str::to_string)
            }
            _ => None,
        }))
}

async fn enable_ttl(client: &Client, table: &str) -> Result<(), ConnectError> {
    match ttl_attribute(client, table).await? {
        Some(attr) if attr == REAPER_TTL => return Ok(()),
        Some(attr) => {
            tracing::warn!(
                table,
                attr,
                "TTL is enabled on another attribute; expired leases are filtered but not reaped"
            );
            return Ok(());
        }
        None => {}
    }
    let spec = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(REAPER_TTL)
        .build()
        .map_err(|e| {
            ConnectError::Storage(StorageError::with_source(
                ttl_storage::ErrorKind::Permanent,
                "building UpdateTimeToLive",
                e,
            ))
        })?;
    let result = client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(spec)
        .send()
        .await;
    if let Err(err) = result {
        // A concurrent connect may have enabled it first ("already enabled").
        if ttl_attribute(client, table).await?.as_deref() != Some(REAPER_TTL) {
            return Err(storage_err(to_storage(err, Op::Read, "UpdateTimeToLive")));
        }
    }
    Ok(())
}

async fn warn_if_ttl_off(client: &Client, table: &str) {
    match ttl_attribute(client, table).await {
        Ok(Some(attr)) if attr == REAPER_TTL => {}
        Ok(_) => tracing::warn!(
            table,
            "DynamoDB TTL is not enabled on \"{REAPER_TTL}\": expired leases are ignored but never deleted"
        ),
        Err(err) => tracing::warn!(table, error = %err, "could not check DynamoDB TTL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(keys: &[(&str, KeyType, ScalarAttributeType)]) -> TableDescription {
        let mut builder = TableDescription::builder();
        for (name, key_type, ty) in keys {
            builder = builder
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(*name)
                        .key_type(key_type.clone())
                        .build()
                        .unwrap(),
                )
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(*name)
                        .attribute_type(ty.clone())
                        .build()
                        .unwrap(),
                );
        }
        builder.build()
    }

    #[test]
    fn accepts_the_right_schema() {
        let d = description(&[(KEY, KeyType::Hash, ScalarAttributeType::S)]);
        assert!(check_key_schema("t", &d).is_ok());
    }

    #[test]
    fn rejects_wrong_schemas_clearly() {
        for keys in [
            vec![("id", KeyType::Hash, ScalarAttributeType::S)],
            vec![(KEY, KeyType::Hash, ScalarAttributeType::B)],
            vec![
                (KEY, KeyType::Hash, ScalarAttributeType::S),
                ("sk", KeyType::Range, ScalarAttributeType::N),
            ],
        ] {
            let err = check_key_schema("t", &description(&keys)).unwrap_err();
            assert!(matches!(err, ConnectError::WrongSchema { .. }), "{err}");
        }
        let err = check_key_schema(
            "t",
            &description(&[
                (KEY, KeyType::Hash, ScalarAttributeType::S),
                ("sk", KeyType::Range, ScalarAttributeType::N),
            ]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("[HASH pk S, RANGE sk N]"), "{err}");
        assert!(
            err.to_string().contains("single HASH key \"pk\" of type S"),
            "{err}"
        );
    }
}
