//! Two VVMs over one shared redb file, each through its own handle (as two
//! processes would be), in real time: a graceful shutdown of the leader
//! wakes the standby through the storage's watch, long before its retry
//! pause would end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use elections::RecordingKiller;
use storage_redb::SharedRedbStorage;
use vvm_orch::{ServiceContext, Vvm, VvmConfig, VvmStatus, service_fn};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Far longer than any handover: a takeover before it ends was woken.
const STANDBY_PAUSE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_wakes_a_standby_on_another_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.redb");
    let launch = |config: VvmConfig, storage: SharedRedbStorage| {
        let idle = service_fn(|ctx: ServiceContext| async move {
            ctx.shutdown_requested().await;
            Ok::<_, Error>(())
        });
        let vvm = Vvm::provide(config, storage, idle)
            .unwrap()
            .with_killer(RecordingKiller::new());
        vvm.launch().0
    };
    let a = launch(
        VvmConfig::new("a"),
        SharedRedbStorage::open(&path).await.unwrap(),
    );
    a.wait_for_leadership().await.unwrap();

    let mut standby = VvmConfig::new("b");
    standby.acquisition_retry_pause = STANDBY_PAUSE;
    let b = launch(standby, SharedRedbStorage::open(&path).await.unwrap());
    // b's first round fails; then it waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.status(), VvmStatus::Acquiring);

    a.shutdown().await.unwrap();
    let leader = tokio::time::timeout(STANDBY_PAUSE / 2, b.wait_for_leadership())
        .await
        .expect("the release did not wake the standby")
        .unwrap();
    assert_eq!(leader.key_index, 1);
    b.shutdown().await.unwrap();
}
