//! Helpers shared by the VVM's tests (paused tokio time, storage-mem).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::sync::Arc;

use elections::RecordingKiller;
use ttl_storage::{Key, TtlStorage};
use vvm_orch::{
    LaunchedVvm, ProblemSignal, ServiceContext, ServicePipeline, Vvm, VvmConfig, service_fn,
};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

pub fn config(address: &str) -> VvmConfig {
    VvmConfig::new(address)
}

pub fn launch(
    config: VvmConfig,
    storage: impl TtlStorage + 'static,
    pipeline: impl ServicePipeline,
) -> (LaunchedVvm, ProblemSignal, Arc<RecordingKiller>) {
    let killer = RecordingKiller::new();
    let vvm = Vvm::provide(config, storage, pipeline)
        .unwrap()
        .with_killer(killer.clone());
    let (launched, signal) = vvm.launch();
    (launched, signal, killer)
}

pub fn idle() -> impl ServicePipeline {
    service_fn(|ctx: ServiceContext| async move {
        ctx.shutdown_requested().await;
        Ok::<_, Error>(())
    })
}

pub fn key1() -> Key {
    Key::new("vvm/leader/1").unwrap()
}

pub mod faults;
pub mod ledger;
pub mod request;
