//! A fence kept in this process's memory: for tests and examples.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
};

use async_trait::async_trait;
use ttl_storage::Result;

use crate::{AppendOutcome, Fence, FenceOutcome, Fenced, LogEntry, Numbering};

/// Fenced registers and logs in this process's memory, numbered
/// [`Numbering::Contiguous`]: a stand-in for a driver's fence in unit
/// tests and examples. It protects nothing outside the process.
#[derive(Debug, Default)]
pub struct MemFence {
    resources: Mutex<HashMap<String, Resource>>,
}

/// One resource: the highest token, the register's value, the log.
#[derive(Debug, Default)]
struct Resource {
    highest: Option<u64>,
    value: Vec<u8>,
    log: Vec<LogEntry>,
}

impl Resource {
    /// `Some(highest)` if `token` is below it.
    fn refuses(&self, token: u64) -> Option<u64> {
        self.highest.filter(|highest| *highest > token)
    }
}

impl MemFence {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Resource>> {
        // Nothing panics while holding the lock; a poisoned map is still
        // consistent.
        self.resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Fence for MemFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        let mut resources = self.lock();
        let r = resources.entry(resource.to_owned()).or_default();
        if let Some(highest) = r.refuses(token) {
            return Ok(FenceOutcome::Rejected { highest });
        }
        r.highest = Some(token);
        r.value = value.to_vec();
        Ok(FenceOutcome::Accepted)
    }

    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        let resources = self.lock();
        Ok(resources.get(resource).and_then(|r| {
            r.highest.map(|token| Fenced {
                token,
                value: r.value.clone(),
            })
        }))
    }

    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        let mut resources = self.lock();
        let r = resources.entry(resource.to_owned()).or_default();
        if let Some(highest) = r.refuses(token) {
            return Ok(AppendOutcome::Rejected { highest });
        }
        r.highest = Some(token);
        let seq = u64::try_from(r.log.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        r.log.push(LogEntry {
            seq,
            token,
            value: value.to_vec(),
        });
        Ok(AppendOutcome::Appended { seq })
    }

    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        Ok(self
            .lock()
            .get(resource)
            .map(|r| r.log.clone())
            .unwrap_or_default())
    }

    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}
