//! The behaviour suite on `MemFence`, and on two broken fences that the
//! suite must catch (so its cases can fail).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "suite")]

use std::sync::Arc;

use async_trait::async_trait;
use fence::{AppendOutcome, DynFence, Fence, FenceOutcome, Fenced, LogEntry, MemFence, Numbering};
use ttl_storage::Result;

async fn make_fence() -> DynFence {
    Arc::new(MemFence::default())
}

fence::suite!(make_fence);

/// A fence that checks nothing: every token is written as given.
#[derive(Debug, Default)]
struct Unfenced(MemFence);

#[async_trait]
impl Fence for Unfenced {
    async fn write(&self, r: &str, _: u64, value: &[u8]) -> Result<FenceOutcome> {
        let now = self.0.read(r).await?.map_or(0, |f| f.token);
        self.0.write(r, now, value).await
    }
    async fn read(&self, r: &str) -> Result<Option<Fenced>> {
        self.0.read(r).await
    }
    async fn append(&self, r: &str, token: u64, v: &[u8]) -> Result<AppendOutcome> {
        let _ = token;
        let now = self.0.read(r).await?.map_or(0, |f| f.token);
        self.0.append(r, now, v).await
    }
    async fn log(&self, r: &str) -> Result<Vec<LogEntry>> {
        self.0.log(r).await
    }
    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}

#[tokio::test]
#[should_panic(expected = "assertion")]
async fn the_suite_catches_a_fence_that_checks_nothing() {
    fence::suite::orders_tokens(Arc::new(Unfenced::default())).await;
}

#[tokio::test]
#[should_panic(expected = "assertion")]
async fn the_suite_catches_a_log_that_checks_nothing() {
    fence::suite::appends_in_order(Arc::new(Unfenced::default())).await;
}
