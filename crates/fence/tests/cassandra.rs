//! `CassandraFence` on a real Cassandra (or ScyllaDB) named by `SCYLLA_URI`:
//! run with `cargo xtask test-drivers --engine cassandra`.
#![cfg(feature = "cassandra")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{Log, Register};
use fence::{AppendVerdict, CassandraFence, FenceError, Fenced, LogEntry, Verdict};
use scylla::client::session_builder::SessionBuilder;
use storage_scylla::{ScyllaConfig, ScyllaStorage};

impl Register for CassandraFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<Verdict, FenceError> {
        CassandraFence::write(self, resource, token, value).await
    }
    async fn read(&self, resource: &str) -> Result<Option<Fenced>, FenceError> {
        CassandraFence::read(self, resource).await
    }
}

impl Log for CassandraFence {
    async fn append(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<AppendVerdict, FenceError> {
        CassandraFence::append(self, resource, token, value).await
    }
    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>, FenceError> {
        CassandraFence::log(self, resource).await
    }
}

async fn fence() -> CassandraFence {
    let url = std::env::var("SCYLLA_URI")
        .expect("SCYLLA_URI is not set: run `cargo xtask test-drivers --engine cassandra`");
    // The storage driver creates the keyspace the URL names.
    ScyllaStorage::from_url(&url).await.unwrap();
    let config = ScyllaConfig::from_url(&url).unwrap();
    let session = SessionBuilder::new()
        .known_nodes(config.contact_points())
        .build()
        .await
        .unwrap();
    CassandraFence::create_table(&session, config.keyspace(), "fence_test")
        .await
        .unwrap();
    CassandraFence::new(Arc::new(session), config.keyspace(), "fence_test")
        .await
        .unwrap()
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers --engine cassandra`"]
async fn cassandra_orders_tokens() {
    common::orders_tokens(&fence().await).await;
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers --engine cassandra`"]
async fn cassandra_racing_writers_leave_the_highest() {
    common::racing_writers_leave_the_highest(&fence().await).await;
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers --engine cassandra`"]
async fn cassandra_appends_in_order() {
    common::appends_in_order(&fence().await).await;
}
