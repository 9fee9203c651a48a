//! Median and p90 latency of the four operations against any storage URL,
//! one key per round, sequential (enable the feature of the engine):
//!
//! ```text
//! cargo run --release -p storage-url --features valkey --example op_latency -- redis://127.0.0.1:6379
//! cargo run --release -p storage-url --features postgres --example op_latency -- postgres://...
//! cargo run --release -p storage-url --features etcd --example op_latency -- etcd://127.0.0.1:2379
//! cargo run --release -p storage-url --features cassandra --example op_latency -- scylla://127.0.0.1:9042/ks
//! cargo run --release -p storage-url --example op_latency -- redb:///tmp/latency.redb [ROUNDS]
//! ```

use std::time::{Duration, Instant};

use ttl_storage::{Key, StorageError, Ttl};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url: storage_url::StorageUrl = args
        .next()
        .ok_or("usage: op_latency STORAGE_URL [ROUNDS]")?
        .parse()?;
    let rounds: usize = args.next().map_or(Ok(200), |n| n.parse())?;
    if rounds == 0 {
        return Err("ROUNDS must be at least 1".into());
    }
    let storage = url.open().await?;
    let ttl = Ttl::from_secs(30)?;
    let names = [
        "insert (acquire)",
        "compare_and_swap (renew)",
        "get",
        "compare_and_delete (release)",
    ];
    let mut times: [Vec<Duration>; 4] = Default::default();
    let run = std::process::id();
    for round in 0..rounds {
        let key = Key::new(format!("latency/{run}/{round}"))?;
        let applied = [
            timed(
                &mut times[0],
                storage.insert_if_not_exists(&key, b"me", ttl),
            )
            .await?,
            timed(
                &mut times[1],
                storage.compare_and_swap(&key, b"me", b"me", ttl),
            )
            .await?,
            timed(&mut times[2], async {
                storage.get(&key).await.map(|v| v.is_some())
            })
            .await?,
            timed(&mut times[3], storage.compare_and_delete(&key, b"me")).await?,
        ];
        if let Some(op) = applied.iter().position(|ok| !ok) {
            return Err(format!("round {round}: {} did not apply", names[op]).into());
        }
    }
    // Display hides the password.
    println!("{rounds} rounds on {url}, one key each, sequential:");
    for (name, samples) in names.iter().zip(times.iter_mut()) {
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
