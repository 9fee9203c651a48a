//! Graceful handover: the time from the leader's release (just before its
//! `release_leadership` call) to the standby holding the key, with the
//! standby waiting as `vvm-orch`'s launcher does: a retry pause of 1 s
//! raced against [`TtlStorage::watch`] of the key.
//!
//! `cargo bench -p storage-redb --bench handover`
//!
//! Cases: `storage-mem` (two contenders in one process); the shared redb
//! mode across two **processes** (this binary re-run as children, timed
//! with the host's wall clock, which both processes share); and the shared
//! redb mode with watching off (the polling it replaces).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // benchmark harness

mod support;

use std::{
    path::Path,
    sync::{Arc, mpsc},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use elections::Elections;
use storage_mem::MemStorage;
use storage_redb::SharedRedbStorage;
use support::{fmt, main_with_children, report, report_head, run_children};
use ttl_storage::{DynTtlStorage, Key, TtlStorage};

/// Set in the child processes: `id:watch:path`.
const CHILD_ENV: &str = "STORAGE_REDB_BENCH_HANDOVER_CHILD";
/// The retry pause of a waiting contender (vvm-host's default).
const PAUSE: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(5);
/// How long a leader holds the key before releasing it.
const HOLD: Duration = Duration::from_millis(150);
/// How long a contender waits after its release before it contends again,
/// when watching: shorter than [`HOLD`], so that it is waiting (watching)
/// when the other one releases.
const GAP: Duration = Duration::from_millis(50);
/// The same when polling: longer than [`PAUSE`], so that the other one's
/// next poll finds the key free before this one contends again.
const POLLING_GAP: Duration = Duration::from_millis(1500);

fn key() -> Key {
    Key::new("handover/1").unwrap()
}

/// Nanoseconds since the Unix epoch on the wall clock.
fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Acquires the key, pausing between attempts as the launcher does: the
/// pause ends early when the storage's watch says the key may be free.
async fn acquire(
    elections: &Elections,
    storage: &DynTtlStorage,
    value: &str,
) -> elections::Leadership {
    loop {
        if let Some(leadership) = elections
            .acquire_leadership(&key(), value, LEASE)
            .await
            .unwrap()
        {
            return leadership;
        }
        match storage.watch(&key()) {
            Ok(watch) => {
                tokio::select! {
                    () = watch => {}
                    () = tokio::time::sleep(PAUSE) => {}
                }
            }
            Err(_) => tokio::time::sleep(PAUSE).await,
        }
    }
}

/// One contender: acquire, hold, release (reporting both instants), pause,
/// `gap`, again, `rounds` times. `report` gets ("ACQ" | "REL", wall-clock
/// nanos).
async fn contend(
    storage: DynTtlStorage,
    value: String,
    rounds: usize,
    gap: Duration,
    report: impl Fn(&str, u128),
) {
    let elections = Elections::new(storage.clone());
    for _ in 0..rounds {
        let _leadership = acquire(&elections, &storage, &value).await;
        report("ACQ", now_nanos());
        tokio::time::sleep(HOLD).await;
        report("REL", now_nanos());
        elections.release_leadership(&key()).await;
        tokio::time::sleep(gap).await;
    }
}

/// Handover latencies from a sequence of (contender, event, nanos): each
/// release followed by the other contender's acquisition.
fn handovers(events: &[(usize, String, u128)]) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut released: Option<(usize, u128)> = None;
    for (id, event, at) in events {
        match event.as_str() {
            "REL" => released = Some((*id, *at)),
            "ACQ" => {
                if let Some((by, at_release)) = released.take()
                    && by != *id
                {
                    let nanos = at.saturating_sub(at_release);
                    latencies.push(Duration::from_nanos(u64::try_from(nanos).unwrap()));
                }
            }
            _ => {}
        }
    }
    latencies
}

/// Two contenders in this process over one `MemStorage`.
async fn mem_case(rounds: usize) -> Vec<Duration> {
    let storage: DynTtlStorage = Arc::new(MemStorage::new());
    let (tx, rx) = mpsc::channel();
    let tasks: Vec<_> = (0..2)
        .map(|id| {
            let tx = tx.clone();
            tokio::spawn(contend(
                storage.clone(),
                format!("mem-{id}"),
                rounds,
                GAP,
                move |event, at| {
                    tx.send((id, event.to_owned(), at)).unwrap();
                },
            ))
        })
        .collect();
    drop(tx);
    for task in tasks {
        task.await.unwrap();
    }
    let mut events: Vec<_> = rx.iter().collect();
    events.sort_by_key(|(_, _, at)| *at);
    handovers(&events)
}

/// Two child processes over one shared redb file.
fn shared_case(path: &Path, watch: bool, rounds: usize) -> Vec<Duration> {
    let lines = run_children(CHILD_ENV, 2, |id| {
        format!("{id}:{watch}:{rounds}:{}", path.display())
    });
    let mut events = Vec::new();
    for (id, line) in lines {
        if let Some((event, at)) = line.split_once(' ') {
            events.push((id, event.to_owned(), at.parse::<u128>().unwrap()));
        }
    }
    events.sort_by_key(|(_, _, at)| *at);
    handovers(&events)
}

async fn child(spec: String) {
    let mut parts = spec.splitn(4, ':');
    let id = parts.next().unwrap();
    let watch: bool = parts.next().unwrap().parse().unwrap();
    let rounds: usize = parts.next().unwrap().parse().unwrap();
    let path = parts.next().unwrap();
    let storage = SharedRedbStorage::builder()
        .watch(watch)
        .open(path)
        .await
        .unwrap();
    let storage: DynTtlStorage = Arc::new(storage);
    let gap = if watch { GAP } else { POLLING_GAP };
    contend(
        storage,
        format!("process-{id}"),
        rounds,
        gap,
        |event, at| {
            println!("{event} {at}");
        },
    )
    .await;
}

fn main() {
    main_with_children(CHILD_ENV, child, |dir| async move {
        println!(
            "graceful handover: leader's release -> standby holds the key (retry pause {}, lease {})",
            fmt(PAUSE),
            fmt(LEASE)
        );
        report_head();
        report("mem, 2 tasks, watch", mem_case(100).await);
        let path = dir.join("handover.redb");
        drop(SharedRedbStorage::open(&path).await.unwrap());
        let watched = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || shared_case(&path, true, 100))
                .await
                .unwrap()
        };
        report("shared redb, 2 processes, watch", watched);
        let polled = tokio::task::spawn_blocking(move || shared_case(&path, false, 8))
            .await
            .unwrap();
        report("shared redb, 2 processes, polling (no watch)", polled);
    });
}
