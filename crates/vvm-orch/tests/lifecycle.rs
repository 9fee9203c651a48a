//! The VVM lifecycle under paused tokio time, over storage-mem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use elections::{ArmReason, RecordingKiller, record::leader_value};
use elections_testsuite::{Fault, FaultyStorage, Op};
use storage_mem::MemStorage;
use tokio::time::Instant;
use ttl_storage::{Ttl, TtlStorage};
mod common;

use common::{Error, config, idle, key1, launch};
use vvm_orch::{
    ConfigError, LaunchedVvm, ProblemSignal, ServiceContext, ServicePipeline, Vvm, VvmProblem,
    VvmStatus, service_fn,
};

/// Runs until asked to stop, and records what it saw.
#[derive(Default)]
struct Probe {
    started: AtomicUsize,
    stopped: AtomicUsize,
    /// The record as read when the services were told to stop.
    record_at_stop: Mutex<Option<Option<Vec<u8>>>>,
}

fn probing(probe: Arc<Probe>, storage: MemStorage) -> impl ServicePipeline {
    service_fn(move |ctx: ServiceContext| {
        let probe = probe.clone();
        let storage = storage.clone();
        async move {
            probe.started.fetch_add(1, Ordering::SeqCst);
            ctx.shutdown_requested().await;
            let record = storage.get(ctx.key()).await.unwrap();
            *probe.record_at_stop.lock().unwrap() = Some(record.map(|r| leader_value(&r).to_vec()));
            probe.stopped.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(())
        }
    })
}

/// A VVM `vvm` on fresh storage whose service is a [`Probe`], once it
/// leads: the storage, the probe, and what [`launch`] returns.
async fn leading_with_a_probe() -> (
    MemStorage,
    Arc<Probe>,
    LaunchedVvm,
    ProblemSignal,
    Arc<RecordingKiller>,
) {
    let storage = MemStorage::new();
    let probe = Arc::new(Probe::default());
    let (vvm, problem, killer) = launch(
        config("vvm"),
        storage.clone(),
        probing(probe.clone(), storage.clone()),
    );
    vvm.wait_for_leadership().await.unwrap();
    (storage, probe, vvm, problem, killer)
}

/// Another writer replaces the leader's record.
async fn intrude(storage: &MemStorage) {
    let current = storage.get(&key1()).await.unwrap().unwrap();
    let ttl = Ttl::from_secs(20).unwrap();
    assert!(
        storage
            .compare_and_swap(&key1(), &current, b"intruder", ttl)
            .await
            .unwrap()
    );
}

/// The value of the leader whose record is stored under key 1.
async fn stored_leader(storage: &MemStorage) -> Option<Vec<u8>> {
    let record = storage.get(&key1()).await.unwrap()?;
    Some(leader_value(&record).to_vec())
}

/// The design's Basic test: VVM1 leads; VVM2 (cluster size 1) reports
/// `LeadershipAcquisition` once its acquisition duration has run out.
#[tokio::test(start_paused = true)]
async fn basic() {
    let storage = MemStorage::new();
    let (vvm1, problem1, _) = launch(config("vvm1"), storage.clone(), idle());
    let leader = vvm1.wait_for_leadership().await.unwrap();
    assert_eq!(leader.key, key1());
    assert_eq!(
        stored_leader(&storage).await.unwrap(),
        vvm1.value().as_bytes()
    );

    let started = Instant::now();
    let (vvm2, problem2, _) = launch(config("vvm2"), storage.clone(), idle());
    problem2.raised().await;
    let waited = started.elapsed();
    let acquisition = vvm2.config().acquisition_duration;
    assert!(waited >= acquisition, "gave up after {waited:?}");
    assert!(
        waited <= acquisition + vvm2.config().acquisition_retry_pause,
        "gave up after {waited:?}"
    );
    assert_eq!(vvm2.status(), VvmStatus::AcquisitionFailed);
    assert!(vvm2.wait_for_leadership().await.is_none());
    let err = vvm2.shutdown().await.unwrap_err();
    assert!(
        matches!(
            err,
            VvmProblem::LeadershipAcquisition {
                cluster_size: 1,
                last_error: None,
                ..
            }
        ),
        "{err}"
    );

    // VVM1 kept leading through it all.
    assert!(!problem1.is_raised());
    assert_eq!(vvm1.leader_info(), Some(leader));
    vvm1.shutdown().await.unwrap();
}

/// The design's Shutdown test: another writer changes the stored value; the
/// VVM reports `LeadershipLost`, stops its services, and shuts down cleanly.
#[tokio::test(start_paused = true)]
async fn shutdown_on_leadership_loss() {
    let (storage, probe, vvm, problem, killer) = leading_with_a_probe().await;
    intrude(&storage).await;

    problem.raised().await;
    assert!(matches!(vvm.status(), VvmStatus::LeadershipLost(_)));
    // The monitor stopped the services without waiting for the host.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(probe.stopped.load(Ordering::SeqCst), 1);

    let probe_tasks = vvm.task_probe();
    let err = vvm.shutdown().await.unwrap_err();
    assert!(
        matches!(&err, VvmProblem::LeadershipLost { key, .. } if *key == key1()),
        "{err}"
    );
    // The intruder's record is left alone, the killer was disarmed in time.
    assert_eq!(
        storage.get(&key1()).await.unwrap().as_deref(),
        Some(&b"intruder"[..])
    );
    assert!(killer.kills().is_empty());
    assert_eq!(
        killer.events().last().map(|e| e.reason),
        Some(ArmReason::Disarmed)
    );
    assert_eq!(probe_tasks.running(), 0);
}

/// The design's CancelLeadership test: Shutdown releases the key, and only
/// after the services have stopped.
#[tokio::test(start_paused = true)]
async fn shutdown_releases_leadership_after_services_stop() {
    let (storage, probe, vvm, problem, killer) = leading_with_a_probe().await;
    tokio::time::sleep(Duration::from_secs(60)).await; // a few renewals
    let value = vvm.value().to_owned();

    vvm.shutdown().await.unwrap();
    assert_eq!(storage.get(&key1()).await.unwrap(), None);
    // While the services stopped, the record was still ours.
    assert_eq!(
        *probe.record_at_stop.lock().unwrap(),
        Some(Some(value.into_bytes()))
    );
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    assert_eq!(probe.stopped.load(Ordering::SeqCst), 1);
    assert!(!problem.is_raised());
    assert!(killer.kills().is_empty());
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_acquisition_is_prompt() {
    let storage = MemStorage::new();
    let ttl = Ttl::NEVER;
    storage
        .insert_if_not_exists(&key1(), b"someone else", ttl)
        .await
        .unwrap();
    let (vvm, problem, _) = launch(config("vvm"), storage.clone(), idle());
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(vvm.status(), VvmStatus::Acquiring);

    let started = Instant::now();
    vvm.shutdown().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(10));
    assert!(!problem.is_raised());
}

#[tokio::test(start_paused = true)]
async fn shutdown_interrupts_a_hanging_storage_call() {
    let mem = MemStorage::new();
    let faulty = FaultyStorage::new(Arc::new(mem.clone()));
    faulty.set_latency(Some(Duration::from_secs(3600)));
    let (vvm, _, _) = launch(config("vvm"), faulty.clone(), idle());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let probe = vvm.task_probe();

    let started = Instant::now();
    vvm.shutdown().await.unwrap();
    // The acquisition is dropped at once; withdrawing its record is bounded by 1 s.
    assert!(started.elapsed() <= Duration::from_secs(1));
    assert_eq!(probe.running(), 0);
    assert!(mem.is_empty());
}

/// Shutdown while the confirming write of an acquisition hangs: the
/// inserted record, which no one would renew, is withdrawn at once.
#[tokio::test(start_paused = true)]
async fn interrupted_acquisition_withdraws_its_record() {
    let mem = MemStorage::new();
    let faulty = FaultyStorage::new(Arc::new(mem.clone()));
    faulty.inject(Op::Cas, Fault::Latency(Duration::from_secs(3600)), 1);
    let (vvm, _, _) = launch(config("vvm"), faulty.clone(), idle());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(vvm.status(), VvmStatus::Acquiring);
    let value = vvm.value().to_owned();
    assert_eq!(stored_leader(&mem).await.unwrap(), value.as_bytes());

    vvm.shutdown().await.unwrap();
    assert_eq!(mem.get(&key1()).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn failing_pipeline_becomes_the_problem() {
    let storage = MemStorage::new();
    let pipeline = service_fn(|_ctx: ServiceContext| async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        Err::<(), Error>("boom".into())
    });
    let (vvm, problem, _) = launch(config("vvm"), storage.clone(), pipeline);
    problem.raised().await;
    assert_eq!(
        problem.describe().as_deref(),
        Some("service pipeline failed: boom")
    );
    let err = vvm.shutdown().await.unwrap_err();
    assert!(matches!(&err, VvmProblem::Service(e) if e.to_string() == "boom"));
    assert_eq!(storage.get(&key1()).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn panicking_pipeline_becomes_the_problem() {
    let storage = MemStorage::new();
    let pipeline = service_fn(|_ctx: ServiceContext| async move {
        if true {
            panic!("kaboom");
        }
        Ok::<(), Error>(())
    });
    let (vvm, problem, _) = launch(config("vvm"), storage.clone(), pipeline);
    problem.raised().await;
    let err = vvm.shutdown().await.unwrap_err();
    assert!(matches!(&err, VvmProblem::ServicePanicked(m) if m == "kaboom"));
    assert_eq!(storage.get(&key1()).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn pipeline_returning_early_is_reported() {
    let storage = MemStorage::new();
    let pipeline = service_fn(|_ctx: ServiceContext| async move { Ok::<(), Error>(()) });
    let (vvm, problem, _) = launch(config("vvm"), storage.clone(), pipeline);
    problem.raised().await;
    assert!(matches!(
        vvm.shutdown().await,
        Err(VvmProblem::ServicesFinished)
    ));
}

#[tokio::test(start_paused = true)]
async fn shutdown_returns_only_the_first_problem() {
    let storage = MemStorage::new();
    let pipeline =
        service_fn(|_ctx: ServiceContext| async move { Err::<(), Error>("first".into()) });
    let (vvm, problem, _) = launch(config("vvm"), storage.clone(), pipeline);
    problem.raised().await;

    // A second problem: leadership is lost while the VVM still holds it.
    intrude(&storage).await;
    let mut status = vvm.status_watch();
    status
        .wait_for(|s| matches!(s, VvmStatus::LeadershipLost(_)))
        .await
        .unwrap();

    let err = vvm.shutdown().await.unwrap_err();
    assert!(matches!(&err, VvmProblem::Service(e) if e.to_string() == "first"));
}

/// Shuts down a VVM whose services take `stop` to stop, and takes its
/// leadership away one second into that stop.
async fn loss_during_slow_stop(stop: Duration) -> (VvmProblem, Vec<elections::Kill>) {
    let storage = MemStorage::new();
    let pipeline = service_fn(move |ctx: ServiceContext| async move {
        ctx.shutdown_requested().await;
        tokio::time::sleep(stop).await;
        Ok::<(), Error>(())
    });
    let (vvm, _, killer) = launch(config("vvm"), storage.clone(), pipeline);
    vvm.wait_for_leadership().await.unwrap();
    let shutdown = tokio::spawn(vvm.shutdown());
    tokio::time::sleep(Duration::from_secs(1)).await;
    intrude(&storage).await;
    let err = shutdown.await.unwrap().unwrap_err();
    (err, killer.kills())
}

/// Loss while the services are still stopping is reported: the monitor is
/// stopped only after the services.
#[tokio::test(start_paused = true)]
async fn loss_during_a_slow_service_stop_is_reported() {
    let (err, kills) = loss_during_slow_stop(Duration::from_secs(8)).await;
    assert!(matches!(err, VvmProblem::LeadershipLost { .. }), "{err}");
    // Stopped before the killer deadline (0.8 x 20 s after the last renewal).
    assert!(kills.is_empty());
}

/// Services that outlive the killer deadline after a loss are caught by the killer.
#[tokio::test(start_paused = true)]
async fn services_too_slow_to_stop_after_a_loss_meet_the_killer() {
    let (err, kills) = loss_during_slow_stop(Duration::from_secs(30)).await;
    assert!(matches!(err, VvmProblem::LeadershipLost { .. }), "{err}");
    assert_eq!(kills.len(), 1);
    assert_eq!(kills[0].key, key1());
}

#[tokio::test(start_paused = true)]
async fn no_task_is_left_after_shutdown() {
    let storage = MemStorage::new();
    let dropped = Arc::new(AtomicBool::new(false));
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = dropped.clone();
    let pipeline = service_fn(move |ctx: ServiceContext| {
        let guard = Guard(flag.clone());
        async move {
            let _guard = guard;
            ctx.shutdown_requested().await;
            Ok::<(), Error>(())
        }
    });
    let (leader, _, _) = launch(config("leader"), storage.clone(), pipeline);
    leader.wait_for_leadership().await.unwrap();
    let (standby, _, _) = launch(config("standby"), storage.clone(), idle());
    tokio::time::sleep(Duration::from_secs(10)).await;

    let leader_tasks = leader.task_probe();
    let standby_tasks = standby.task_probe();
    // Monitor, services, renewal and killer; the launcher has finished.
    assert_eq!(leader_tasks.running(), 4);
    assert_eq!(standby_tasks.running(), 1);

    standby.shutdown().await.unwrap();
    leader.shutdown().await.unwrap();
    assert_eq!(leader_tasks.running(), 0);
    assert_eq!(standby_tasks.running(), 0);
    assert!(dropped.load(Ordering::SeqCst));
    assert!(storage.is_empty() || storage.get(&key1()).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn dropped_vvm_shuts_down_in_the_background() {
    let storage = MemStorage::new();
    let (vvm, _, _) = launch(config("vvm"), storage.clone(), idle());
    vvm.wait_for_leadership().await.unwrap();
    let mut status = vvm.status_watch();
    let tasks = vvm.task_probe();
    drop(vvm);
    status
        .wait_for(|s| *s == VvmStatus::ShutDown)
        .await
        .unwrap();
    assert_eq!(tasks.running(), 0);
    assert_eq!(storage.get(&key1()).await.unwrap(), None);
}

/// A `shutdown` future dropped half-way (services still stopping) does not
/// leave the VVM half shut down: the rest runs in the background.
#[tokio::test(start_paused = true)]
async fn interrupted_shutdown_completes_in_the_background() {
    let storage = MemStorage::new();
    let pipeline = service_fn(|ctx: ServiceContext| async move {
        ctx.shutdown_requested().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<(), Error>(())
    });
    let (vvm, _, _) = launch(config("vvm"), storage.clone(), pipeline);
    vvm.wait_for_leadership().await.unwrap();
    let mut status = vvm.status_watch();
    let tasks = vvm.task_probe();
    let interrupted = tokio::time::timeout(Duration::from_secs(1), vvm.shutdown()).await;
    assert!(interrupted.is_err());
    assert!(storage.get(&key1()).await.unwrap().is_some());

    let done = status.wait_for(|s| *s == VvmStatus::ShutDown);
    tokio::time::timeout(Duration::from_secs(60), done)
        .await
        .expect("the shutdown completes in the background")
        .unwrap();
    assert_eq!(tasks.running(), 0);
    assert_eq!(storage.get(&key1()).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn permanent_storage_errors_fail_the_launch_at_once() {
    // A storage that refuses everything permanently (bad credentials, say).
    let refusing = FaultyStorage::new(Arc::new(MemStorage::new()));
    refusing.set_refused(true);
    let started = Instant::now();
    let (vvm, problem, _) = launch(config("vvm"), refusing, idle());
    problem.raised().await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(vvm.status(), VvmStatus::Failed);
    let err = vvm.shutdown().await.unwrap_err();
    assert!(err.to_string().contains("injected: refused"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn transient_storage_errors_are_retried_until_the_deadline() {
    let mem = MemStorage::new();
    let faulty = FaultyStorage::new(Arc::new(mem));
    faulty.set_partitioned(true);
    let (vvm, problem, _) = launch(config("vvm"), faulty, idle());
    problem.raised().await;
    let err = vvm.shutdown().await.unwrap_err();
    assert!(
        matches!(&err, VvmProblem::LeadershipAcquisition { last_error: Some(e), .. } if e.contains("partitioned")),
        "{err}"
    );
}

#[test]
fn invalid_config_is_refused() {
    let mut config = config("vvm");
    config.cluster_size = 0;
    let err = Vvm::provide(config, MemStorage::new(), idle()).unwrap_err();
    assert!(matches!(err, ConfigError::ClusterSize { size: 0, .. }));
}

/// A leader shuts down gracefully while a standby pauses between rounds;
/// returns how long after the release the standby led (tokio's clock).
async fn handover_with(
    standby_storage: impl TtlStorage + 'static,
    leader_storage: MemStorage,
) -> Duration {
    let (a, _, _) = launch(config("a"), leader_storage, idle());
    a.wait_for_leadership().await.unwrap();
    let mut standby = config("b");
    standby.acquisition_retry_pause = Duration::from_secs(10);
    let (b, _, _) = launch(standby, standby_storage, idle());
    // b's first round fails; it is now pausing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(b.status(), VvmStatus::Acquiring);
    let released = Instant::now();
    a.shutdown().await.unwrap();
    b.wait_for_leadership().await.unwrap();
    let took = released.elapsed();
    b.shutdown().await.unwrap();
    took
}

/// With a storage that notifies removals, the release wakes the standby at
/// once instead of after its retry pause.
#[tokio::test(start_paused = true)]
async fn a_graceful_release_wakes_the_standby_at_once() {
    let storage = MemStorage::new();
    let took = handover_with(storage.clone(), storage).await;
    assert!(took < Duration::from_secs(1), "the standby waited {took:?}");
}

/// Without the capability the standby still takes over, at its next round.
#[tokio::test(start_paused = true)]
async fn without_watch_the_standby_polls() {
    let storage = MemStorage::new();
    // The standby's storage hides the watch capability: it must poll.
    let polled = FaultyStorage::new(Arc::new(storage.clone()));
    polled.set_watch_hidden(true);
    let took = handover_with(polled, storage).await;
    assert!(
        took >= Duration::from_secs(5),
        "the standby took over after {took:?}"
    );
    assert!(
        took <= Duration::from_secs(10),
        "the standby took over after {took:?}"
    );
}

/// With `ACQUIRE_FOREVER` a standby never gives up: after a day of a key
/// held by someone else (the default gives up after 120 s) it still waits,
/// and leads once the key is free.
#[tokio::test(start_paused = true)]
async fn a_standby_acquiring_forever_never_gives_up() {
    let storage = MemStorage::new();
    storage
        .insert_if_not_exists(&key1(), b"someone else", Ttl::NEVER)
        .await
        .unwrap();
    let mut config = config("standby");
    config.acquisition_duration = vvm_orch::ACQUIRE_FOREVER;
    config.acquisition_retry_pause = Duration::from_secs(60);
    let (vvm, problem, _) = launch(config, storage.clone(), idle());
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(vvm.status(), VvmStatus::Acquiring);
    assert!(!problem.is_raised());

    assert!(
        storage
            .compare_and_delete(&key1(), b"someone else")
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert!(matches!(vvm.status(), VvmStatus::Leading(_)));
    vvm.shutdown().await.unwrap();
}
