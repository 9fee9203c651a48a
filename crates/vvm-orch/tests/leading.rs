//! What leads with a VVM beyond its pipeline: tasks spawned through the
//! context, and the cluster size every node must agree on. Paused time,
//! storage-mem.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use common::{Error, config, idle, key1, launch};
use elections::ArmReason;
use storage_mem::MemStorage;
use tokio::time::Instant;
use ttl_storage::{Key, TtlStorage};
use vvm_orch::{ServiceContext, VvmProblem, service_fn};

/// A task the services detached through `ServiceContext::spawn` that
/// ignores its stop signal for 3 s: leadership is released (and the next
/// leader may start) only after it has ended, and the killer stays armed
/// meanwhile.
#[tokio::test(start_paused = true)]
async fn release_waits_for_tasks_spawned_through_the_context() {
    let storage = MemStorage::new();
    let detached_ended = Arc::new(Mutex::new(None::<Instant>));
    let ended = detached_ended.clone();
    let pipeline = service_fn(move |ctx: ServiceContext| {
        let ended = ended.clone();
        async move {
            let worker = ctx.clone();
            ctx.spawn(async move {
                worker.shutdown_requested().await;
                // Deaf to the stop signal for 3 s.
                tokio::time::sleep(Duration::from_secs(3)).await;
                *ended.lock().unwrap() = Some(Instant::now());
            });
            ctx.shutdown_requested().await;
            Ok::<_, Error>(())
        }
    });
    let (vvm, problem, killer) = launch(config("vvm"), storage.clone(), pipeline);
    vvm.wait_for_leadership().await.unwrap();
    let stop = Instant::now();
    let watcher = {
        let storage = storage.clone();
        tokio::spawn(async move {
            // When did the record go?
            loop {
                if storage.get(&key1()).await.unwrap().is_none() {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    vvm.shutdown().await.unwrap();
    let released = watcher.await.unwrap();
    let task_ended = detached_ended
        .lock()
        .unwrap()
        .expect("the detached task ran to its end");
    assert!(task_ended >= stop + Duration::from_secs(3));
    assert!(
        released >= task_ended,
        "released {:?} before the detached task ended",
        task_ended - released
    );
    assert!(!problem.is_raised());
    // Disarmed only with the release, never while the task ran.
    let disarms: Vec<Instant> = killer
        .events()
        .iter()
        .filter(|event| event.reason == ArmReason::Disarmed)
        .map(|event| event.basis)
        .collect();
    assert!(!disarms.is_empty());
    assert!(
        disarms.iter().all(|&at| at >= task_ended),
        "disarmed while the task ran"
    );
}

#[tokio::test(start_paused = true)]
async fn second_key_is_taken_when_the_first_is_held() {
    let storage = MemStorage::new();
    let mut config1 = config("a");
    config1.cluster_size = 2;
    let mut config2 = config("b");
    config2.cluster_size = 2;
    let (a, _, _) = launch(config1, storage.clone(), idle());
    assert_eq!(a.wait_for_leadership().await.unwrap().key_index, 1);
    let (b, _, _) = launch(config2, storage.clone(), idle());
    let info = b.wait_for_leadership().await.unwrap();
    assert_eq!(info.key_index, 2);
    assert_eq!(info.key.as_str(), "vvm/leader/2");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Nodes started with different cluster sizes never lead together: the
/// second size refuses, gives its key back and starts nothing; once the
/// first cluster is gone (and its size record expired) the other size may
/// lead.
#[tokio::test(start_paused = true)]
async fn a_node_of_another_cluster_size_refuses_to_lead() {
    let storage = MemStorage::new();
    let mut two = config("two");
    two.cluster_size = 2;
    let (a, _, _) = launch(two, storage.clone(), idle());
    a.wait_for_leadership().await.unwrap();
    let mut three = config("three");
    three.cluster_size = 3;
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let pipeline = service_fn(move |ctx: ServiceContext| {
        let flag = flag.clone();
        async move {
            flag.store(true, Ordering::SeqCst);
            ctx.shutdown_requested().await;
            Ok::<_, Error>(())
        }
    });
    let (b, problem, _) = launch(three.clone(), storage.clone(), pipeline);
    problem.raised().await;
    let refused = b.shutdown().await.unwrap_err();
    assert!(
        matches!(
            refused,
            VvmProblem::ClusterSizeMismatch {
                ours: 3,
                theirs: Some(2)
            }
        ),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("same cluster size"),
        "{refused}"
    );
    assert!(!started.load(Ordering::SeqCst), "services started");
    // B gave its key (2) back at once.
    assert_eq!(
        storage
            .get(&Key::new("vvm/leader/2").unwrap())
            .await
            .unwrap(),
        None
    );
    a.shutdown().await.unwrap();
    tokio::time::sleep(Duration::from_secs(21)).await;
    let (c, _, _) = launch(three, storage.clone(), idle());
    c.wait_for_leadership().await.unwrap();
    c.shutdown().await.unwrap();
}
