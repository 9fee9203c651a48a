//! Median and p90 latency of the four operations against the server in
//! `ETCD_URL`, one key per round, sequential.
//!
//! ```text
//! ETCD_URL='etcd://127.0.0.1:2379' \
//!     cargo run --release -p storage-etcd --example op_latency_etcd
//! ```

use std::time::{Duration, Instant};

use storage_etcd::EtcdStorage;
use ttl_storage::{Key, StorageError, Ttl, TtlStorage};

const ROUNDS: usize = 200;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("ETCD_URL").map_err(|_| "set ETCD_URL=etcd://127.0.0.1:2379")?;
    let storage = EtcdStorage::from_url(&url).await?;
    let ttl = Ttl::from_secs(30)?;
    let mut times: [Vec<Duration>; 4] = Default::default();
    let run = std::process::id();
    for round in 0..ROUNDS {
        let key = Key::new(format!("latency/{run}/{round}"))?;
        let ops: [(usize, bool); 4] = [
            (
                0,
                timed(
                    &mut times[0],
                    storage.insert_if_not_exists(&key, b"me", ttl),
                )
                .await?,
            ),
            (
                1,
                timed(
                    &mut times[1],
                    storage.compare_and_swap(&key, b"me", b"me", ttl),
                )
                .await?,
            ),
            (
                2,
                timed(&mut times[2], async {
                    storage.get(&key).await.map(|v| v.is_some())
                })
                .await?,
            ),
            (
                3,
                timed(&mut times[3], storage.compare_and_delete(&key, b"me")).await?,
            ),
        ];
        if let Some((op, _)) = ops.iter().find(|(_, ok)| !ok) {
            return Err(format!("round {round}: operation {op} did not apply").into());
        }
    }
    println!("{ROUNDS} rounds, one key each, sequential:");
    for (name, samples) in [
        "insert (acquire)",
        "compare_and_swap (renew)",
        "get",
        "compare_and_delete (release)",
    ]
    .iter()
    .zip(times.iter_mut())
    {
        samples.sort_unstable();
        let pct = |p: usize| samples[(samples.len() - 1) * p / 100];
        println!(
            "{name:<30} median {:>7.2} ms   p90 {:>7.2} ms",
            pct(50).as_secs_f64() * 1e3,
            pct(90).as_secs_f64() * 1e3
        );
    }
    Ok(())
}

async fn timed<T>(
    samples: &mut Vec<Duration>,
    op: impl std::future::Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    let started = Instant::now();
    let out = op.await;
    samples.push(started.elapsed());
    out
}
