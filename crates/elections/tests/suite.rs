//! The shared suite on the in-memory store under paused time, so that
//! `cargo test -p elections` proves the elections themselves; every
//! driver's own suite runs the same cases against its engine.

async fn in_memory() -> ttl_storage::DynTtlStorage {
    std::sync::Arc::new(storage_mem::MemStorage::new())
}

elections_testsuite::testsuite!(paused, in_memory, watch = required);
