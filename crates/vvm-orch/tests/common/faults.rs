//! A store whose calls on chosen keys fail: the faults the hand-over and
//! cluster-size cases need (only the size claim failing, only candidate
//! reads failing, ...), switched on and off while a VVM runs.
#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use storage_mem::MemStorage;
use ttl_storage::{Entry, Key, Result, StorageError, Ttl, TtlStorage, Watch, WatchUnsupported};

/// Which calls a rule hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// Every call.
    All,
    /// Reads only.
    Reads,
    /// Compare-and-delete only.
    Deletes,
}

/// Calls on keys containing `part` fail with a transient error.
#[derive(Debug, Clone)]
struct Rule {
    part: String,
    calls: Calls,
}

/// `MemStorage` with per-key faults.
#[derive(Clone, Default)]
pub struct KeyFaults {
    pub inner: MemStorage,
    rules: Arc<Mutex<Vec<Rule>>>,
}

impl KeyFaults {
    pub fn new(inner: MemStorage) -> Self {
        KeyFaults {
            inner,
            rules: Arc::default(),
        }
    }

    /// From now on, `calls` on keys containing `part` fail.
    pub fn fail(&self, part: &str, calls: Calls) {
        self.rules.lock().unwrap().push(Rule {
            part: part.to_owned(),
            calls,
        });
    }

    /// Every fault off.
    pub fn heal(&self) {
        self.rules.lock().unwrap().clear();
    }

    fn check(&self, key: &Key, call: Calls) -> Result<()> {
        let hit = self.rules.lock().unwrap().iter().any(|rule| {
            key.as_str().contains(&rule.part) && (rule.calls == Calls::All || rule.calls == call)
        });
        if hit {
            Err(StorageError::transient(format!("injected fault on {key}")))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl TtlStorage for KeyFaults {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        self.check(key, Calls::All)?;
        self.inner.insert_if_not_exists(key, value, ttl).await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        self.check(key, Calls::All)?;
        self.inner.compare_and_swap(key, old, new, ttl).await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        self.check(key, Calls::Deletes)?;
        self.inner.compare_and_delete(key, value).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.check(key, Calls::Reads)?;
        self.inner.get(key).await
    }

    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        self.check(key, Calls::Reads)?;
        self.inner.get_entry(key).await
    }

    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        self.inner.watch(key)
    }
}
