//! `DynamoFence` on a real DynamoDB (Local) named by `DYNAMODB_ENDPOINT`:
//! run with `cargo xtask test-drivers --engine dynamodb`.
#![cfg(feature = "dynamodb")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Log, Register};
use fence::{AppendVerdict, DynamoFence, FenceError, Fenced, LogEntry, Verdict};
use storage_dynamo::{DynamoConfig, DynamoStorage};

impl Register for DynamoFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<Verdict, FenceError> {
        DynamoFence::write(self, resource, token, value).await
    }
    async fn read(&self, resource: &str) -> Result<Option<Fenced>, FenceError> {
        DynamoFence::read(self, resource).await
    }
}

impl Log for DynamoFence {
    async fn append(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<AppendVerdict, FenceError> {
        DynamoFence::append(self, resource, token, value).await
    }
    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>, FenceError> {
        DynamoFence::log(self, resource).await
    }
}

async fn fence() -> DynamoFence {
    let endpoint = std::env::var("DYNAMODB_ENDPOINT")
        .expect("DYNAMODB_ENDPOINT is not set: run `cargo xtask test-drivers --engine dynamodb`");
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    let mut builder = DynamoConfig::builder("fence_test_storage")
        .endpoint(endpoint)
        .region(region)
        .create_table(true);
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        builder = builder.credentials("local", "local", None);
    }
    let storage = DynamoStorage::connect(builder.build().unwrap())
        .await
        .unwrap();
    let client = storage.client().clone();
    DynamoFence::create_table(&client, "fence_test")
        .await
        .unwrap();
    DynamoFence::new(client, "fence_test").unwrap()
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers --engine dynamodb`"]
async fn dynamodb_orders_tokens() {
    common::orders_tokens(&fence().await).await;
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers --engine dynamodb`"]
async fn dynamodb_racing_writers_leave_the_highest() {
    common::racing_writers_leave_the_highest(&fence().await).await;
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers --engine dynamodb`"]
async fn dynamodb_appends_in_order() {
    common::appends_in_order(&fence().await).await;
}
