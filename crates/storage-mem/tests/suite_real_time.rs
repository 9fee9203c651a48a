//! The shared suite against the in-memory driver in real time: a
//! self-check of the suite's real-time mode, which the network drivers use.
//! Run by `cargo xtask test-drivers` (engine `mem-real-time`).

use std::sync::Arc;

use ttl_storage::DynTtlStorage;

async fn make_storage() -> DynTtlStorage {
    Arc::new(storage_mem::MemStorage::new())
}

elections_testsuite::testsuite!(
    real_time,
    make_storage,
    ignore = "real time, about 30 s: run `cargo xtask test-drivers --engine mem-real-time`"
);
