//! The whole shared suite against the in-memory driver, under paused time.

use std::sync::Arc;

use ttl_storage::DynTtlStorage;

async fn make_storage() -> DynTtlStorage {
    Arc::new(storage_mem::MemStorage::new())
}

elections_testsuite::testsuite!(paused, make_storage, watch = required);
