//! Renewal (`compare_and_swap(k, v, v, ttl)`, the write an election makes
//! every TTL/4) latency and throughput of the single-process redb driver
//! beside the shared mode, in one run:
//!
//! `cargo bench -p storage-redb --bench renew`
//!
//! Cases: one task renewing one key back to back; 16 tasks of one process
//! renewing 16 keys (group commit); and, for the shared mode only, 4
//! processes each renewing its own key back to back (what 4 `vvm-host`s on
//! one machine do, thousands of times faster). Every renewal is a durable
//! commit (fsync).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // benchmark harness

mod support;

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use storage_redb::{RedbStorage, SharedRedbStorage};
use support::{columns, fmt, main_with_children, run_children};
use ttl_storage::{DynTtlStorage, Key, Ttl};

/// Set in the child processes of the multi-process case: `path:seconds`.
const CHILD_ENV: &str = "STORAGE_REDB_BENCH_RENEW_CHILD";
/// How long each case renews.
const RUN: Duration = Duration::from_secs(4);
const VALUE: &[u8] = b"10.0.0.7:4242 leader";
const PROCESSES: usize = 4;

fn ttl() -> Ttl {
    Ttl::from_secs(3600).unwrap()
}

/// Renews `key` back to back for `run`; returns each renewal's latency.
async fn renew_loop(storage: DynTtlStorage, key: Key, run: Duration) -> Vec<Duration> {
    assert!(
        storage
            .insert_if_not_exists(&key, VALUE, ttl())
            .await
            .unwrap()
    );
    let mut samples = Vec::new();
    let end = Instant::now() + run;
    while Instant::now() < end {
        let start = Instant::now();
        assert!(
            storage
                .compare_and_swap(&key, VALUE, VALUE, ttl())
                .await
                .unwrap()
        );
        samples.push(start.elapsed());
    }
    samples
}

/// `tasks` tasks of this process renew their own keys for [`RUN`].
async fn in_process(storage: DynTtlStorage, tasks: usize) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let key = Key::new(format!("renew/{i}")).unwrap();
            tokio::spawn(renew_loop(storage.clone(), key, RUN))
        })
        .collect();
    let mut samples = Vec::new();
    for handle in handles {
        samples.extend(handle.await.unwrap());
    }
    (samples, started.elapsed())
}

/// [`PROCESSES`] child processes renew their own keys in one shared file.
fn across_processes(path: &Path) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let lines = run_children(CHILD_ENV, PROCESSES, |id| {
        format!("{id}:{}", path.display())
    });
    let mut samples = Vec::new();
    for (_, line) in lines {
        if let Some(nanos) = line.strip_prefix("LAT ") {
            samples.push(Duration::from_nanos(nanos.parse().unwrap()));
        }
    }
    (samples, started.elapsed())
}

async fn child(spec: String) {
    let (id, path) = spec.split_once(':').unwrap();
    let storage: DynTtlStorage = Arc::new(SharedRedbStorage::open(path).await.unwrap());
    let key = Key::new(format!("renew/process/{id}")).unwrap();
    for sample in renew_loop(storage, key, RUN).await {
        println!("LAT {}", sample.as_nanos());
    }
}

fn report(name: &str, mut samples: Vec<Duration>, elapsed: Duration) {
    let ops = samples.len() as f64 / elapsed.as_secs_f64();
    println!("{name:<44} {} {ops:>10.0}", columns(&mut samples));
}

fn main() {
    main_with_children(CHILD_ENV, child, |dir| async move {
        println!(
            "renewal = compare_and_swap(k, v, v, ttl), durable; {} per case",
            fmt(RUN)
        );
        println!(
            "{:<44} {:>9} {:>9} {:>9} {:>10}",
            "case", "p50", "p99", "max", "renewals/s"
        );
        for tasks in [1, 16] {
            let single = RedbStorage::open(dir.join(format!("single-{tasks}.redb")))
                .await
                .unwrap();
            let (samples, elapsed) = in_process(Arc::new(single.clone()), tasks).await;
            report(
                &format!("redb (one process), {tasks} task(s)"),
                samples,
                elapsed,
            );
            single.close().await.unwrap();

            let shared = SharedRedbStorage::open(dir.join(format!("shared-{tasks}.redb")))
                .await
                .unwrap();
            let (samples, elapsed) = in_process(Arc::new(shared), tasks).await;
            report(
                &format!("shared redb, 1 process, {tasks} task(s)"),
                samples,
                elapsed,
            );
        }
        let path = dir.join("shared-processes.redb");
        drop(SharedRedbStorage::open(&path).await.unwrap());
        let (samples, elapsed) = tokio::task::spawn_blocking(move || across_processes(&path))
            .await
            .unwrap();
        report(
            &format!("shared redb, {PROCESSES} processes x 1 task"),
            samples,
            elapsed,
        );
    });
}
