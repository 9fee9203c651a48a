//! insert / CAS / CAD / get on `storage-redb` beside `storage-mem`, from one
//! task and from 16 concurrent tasks.
//!
//! `cargo bench -p storage-redb --bench ops`
//!
//! One iteration is one operation per task: the "16 tasks" cases time 16
//! operations running concurrently (the throughput line shows operations per
//! second). Every write is a successful conditional write, so every redb write
//! commits durably (fsync), shared by the writes of one group commit.
//! `redb-no-group-commit` (16 tasks only) is the driver with `max_batch(1)`:
//! one transaction and one fsync per write.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // benchmark harness

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use storage_mem::MemStorage;
use storage_redb::RedbStorage;
use tokio::runtime::Runtime;
use ttl_storage::{DynTtlStorage, Key, Ttl};

/// Operations timed per chunk; records a chunk needs are written untimed first.
const CHUNK: u64 = 500;
const VALUE: &[u8] = b"10.0.0.7:4242 leader";

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert,
    Cas,
    Cad,
    Get,
}

fn ttl() -> Ttl {
    Ttl::from_secs(3600).unwrap()
}

fn key(task: usize, n: u64) -> Key {
    Key::new(format!("bench/{task}/{n}")).unwrap()
}

/// Runs `iters` iterations of `op` on `tasks` concurrent tasks; returns the
/// time spent in the timed part only.
async fn run(
    storage: &DynTtlStorage,
    op: Op,
    tasks: usize,
    iters: u64,
    base: &mut u64,
) -> Duration {
    let mut timed = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = CHUNK.min(iters - done);
        let first = *base;
        *base += n;
        done += n;
        // Untimed setup: the records CAS, CAD and get need.
        if !matches!(op, Op::Insert) {
            let setup: Vec<_> = (0..tasks)
                .map(|task| {
                    let storage = Arc::clone(storage);
                    tokio::spawn(async move {
                        let keys = if matches!(op, Op::Cad) {
                            first..first + n
                        } else {
                            first..first + 1
                        };
                        for i in keys {
                            assert!(
                                storage
                                    .insert_if_not_exists(&key(task, i), VALUE, ttl())
                                    .await
                                    .unwrap()
                            );
                        }
                    })
                })
                .collect();
            for task in setup {
                task.await.unwrap();
            }
        }
        let start = Instant::now();
        let workers: Vec<_> = (0..tasks)
            .map(|task| {
                let storage = Arc::clone(storage);
                tokio::spawn(async move {
                    for i in first..first + n {
                        match op {
                            Op::Insert => {
                                assert!(
                                    storage
                                        .insert_if_not_exists(&key(task, i), VALUE, ttl())
                                        .await
                                        .unwrap()
                                );
                            }
                            Op::Cas => {
                                let k = key(task, first);
                                assert!(
                                    storage
                                        .compare_and_swap(&k, VALUE, VALUE, ttl())
                                        .await
                                        .unwrap()
                                );
                            }
                            Op::Cad => {
                                assert!(
                                    storage
                                        .compare_and_delete(&key(task, i), VALUE)
                                        .await
                                        .unwrap()
                                );
                            }
                            Op::Get => {
                                assert!(storage.get(&key(task, first)).await.unwrap().is_some());
                            }
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.await.unwrap();
        }
        timed += start.elapsed();
        // Untimed cleanup, so memory and the file stay small however many
        // iterations criterion asks for.
        let cleanup: Vec<_> = (0..tasks)
            .map(|task| {
                let storage = Arc::clone(storage);
                tokio::spawn(async move {
                    let keys = match op {
                        Op::Insert => first..first + n,
                        Op::Cas | Op::Get => first..first + 1,
                        Op::Cad => first..first,
                    };
                    for i in keys {
                        assert!(
                            storage
                                .compare_and_delete(&key(task, i), VALUE)
                                .await
                                .unwrap()
                        );
                    }
                })
            })
            .collect();
        for task in cleanup {
            task.await.unwrap();
        }
    }
    timed
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mem: DynTtlStorage = rt.block_on(async { Arc::new(MemStorage::new()) });
    let redb: DynTtlStorage = rt.block_on(async {
        Arc::new(
            RedbStorage::open(dir.path().join("bench.redb"))
                .await
                .unwrap(),
        )
    });
    // The same driver without group commit: one transaction and fsync per write.
    let redb_unbatched: DynTtlStorage = rt.block_on(async {
        let storage = RedbStorage::builder()
            .max_batch(1)
            .open(dir.path().join("unbatched.redb"))
            .await
            .unwrap();
        Arc::new(storage)
    });
    let mut base = 0;
    for op in [Op::Insert, Op::Cas, Op::Cad, Op::Get] {
        for tasks in [1usize, 16] {
            let name = format!("{op:?}/{tasks} task{}", if tasks == 1 { "" } else { "s" });
            let mut group = c.benchmark_group(name.to_lowercase());
            group.throughput(Throughput::Elements(tasks as u64));
            let mut drivers = vec![("mem", &mem), ("redb", &redb)];
            if tasks > 1 && !matches!(op, Op::Get) {
                drivers.push(("redb-no-group-commit", &redb_unbatched));
            }
            for (driver, storage) in drivers {
                group.bench_function(BenchmarkId::from_parameter(driver), |b| {
                    b.to_async(&rt).iter_custom(|iters| {
                        let storage = Arc::clone(storage);
                        let first = base;
                        base += iters + CHUNK;
                        async move {
                            let mut next = first;
                            run(&storage, op, tasks, iters, &mut next).await
                        }
                    });
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
