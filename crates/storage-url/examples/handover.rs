//! Graceful handover latency on any storage URL: the time from the leader's
//! release (just before its `release_leadership` call) to the standby
//! holding the key, with the standby waiting as `vvm-orch`'s launcher does:
//! a retry pause of 1 s raced against [`TtlStorage::watch`] of the key.
//! Prints p50 / p99 / max per URL, watching and (as the baseline it
//! replaces) polling.
//!
//! ```text
//! cargo run --release -p storage-url --features valkey,postgres,etcd --example handover -- \
//!     redis://127.0.0.1:6379 postgres://postgres:secret@127.0.0.1:5432/postgres etcd://127.0.0.1:2379
//! cargo run --release -p storage-url --example handover -- mem --rounds 200
//! ```
//!
//! Options (after the URLs): `--rounds N` handovers watched (default 100),
//! `--polling-rounds N` handovers polled (default 8; each takes about a
//! pause; `0` skips them).
//!
//! The two contenders run in this process, each on **its own storage**
//! (its own connections, and its own subscription or listener where the
//! driver has one): a release travels through the server to the standby
//! exactly as between two processes. The key is fresh for each run
//! (`handover/<pid>/<nanos>`), so runs do not see each other.

use std::{
    error::Error,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use elections::Elections;
use ttl_storage::{DynTtlStorage, Key, TtlStorage};

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

/// Acquires `key`, pausing between attempts as the launcher does: when
/// `watch`, the pause ends early when the storage's watch says the key may
/// be free; else it is a plain pause (polling, what watching replaces).
async fn acquire(
    elections: &Elections,
    storage: &DynTtlStorage,
    key: &Key,
    value: &str,
    watch: bool,
) -> Result<elections::Leadership, Box<dyn Error + Send + Sync>> {
    loop {
        if let Some(leadership) = elections.acquire_leadership(key, value, LEASE).await? {
            return Ok(leadership);
        }
        let watched = if watch { storage.watch(key).ok() } else { None };
        match watched {
            Some(watched) => {
                tokio::select! {
                    () = watched => {}
                    () = tokio::time::sleep(PAUSE) => {}
                }
            }
            None => tokio::time::sleep(PAUSE).await,
        }
    }
}

/// (contender, "ACQ" | "REL", instant) in the order they happened.
type Events = Arc<Mutex<Vec<(usize, &'static str, Instant)>>>;

/// One contender: acquire (watching the key or polling), hold, release
/// (recording both instants), `gap`, again, `rounds` times.
async fn contend(
    storage: DynTtlStorage,
    key: Key,
    id: usize,
    rounds: usize,
    watch: bool,
    gap: Duration,
    events: Events,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let elections = Elections::new(storage.clone());
    let value = format!("contender-{id}");
    let record = |event| {
        if let Ok(mut events) = events.lock() {
            events.push((id, event, Instant::now()));
        }
    };
    for _ in 0..rounds {
        let _leadership = acquire(&elections, &storage, &key, &value, watch).await?;
        record("ACQ");
        tokio::time::sleep(HOLD).await;
        record("REL");
        elections.release_leadership(&key).await;
        tokio::time::sleep(gap).await;
    }
    Ok(())
}

/// Handover latencies: each release followed by the other contender's
/// acquisition.
fn handovers(events: &[(usize, &'static str, Instant)]) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut released: Option<(usize, Instant)> = None;
    for &(id, event, at) in events {
        match event {
            "REL" => released = Some((id, at)),
            "ACQ" => {
                if let Some((by, at_release)) = released.take()
                    && by != id
                {
                    latencies.push(at.saturating_duration_since(at_release));
                }
            }
            _ => {}
        }
    }
    latencies
}

/// Two contenders, each on its own storage opened from `url`.
async fn case(
    url: &storage_url::StorageUrl,
    watch: bool,
    rounds: usize,
) -> Result<Vec<Duration>, Box<dyn Error + Send + Sync>> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    let key = Key::new(format!("handover/{}/{nanos}", std::process::id()))?;
    let events: Events = Arc::default();
    let mut tasks = Vec::new();
    // `mem` opens a fresh store each time: share one.
    let shared_mem = if url.driver().name == "mem" {
        Some(url.open().await?)
    } else {
        None
    };
    for id in 0..2 {
        let opened = match &shared_mem {
            Some(storage) => storage.clone(),
            None => url.open().await?,
        };
        if watch && opened.watch(&key).is_err() {
            return Err(format!("{url}: the driver does not support watch").into());
        }
        let gap = if watch { GAP } else { POLLING_GAP };
        tasks.push(tokio::spawn(contend(
            opened,
            key.clone(),
            id,
            rounds,
            watch,
            gap,
            events.clone(),
        )));
    }
    for task in tasks {
        task.await??;
    }
    let events = events.lock().map_err(|_| "poisoned")?.clone();
    Ok(handovers(&events))
}

/// p50, p99, max of `samples` (sorted in place), nearest rank.
fn percentiles(samples: &mut [Duration]) -> Option<(Duration, Duration, Duration)> {
    samples.sort();
    let last = samples.len().checked_sub(1)?;
    let at = |q: f64| samples[((last as f64) * q).round() as usize];
    Some((at(0.50), at(0.99), samples[last]))
}

fn fmt(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

fn report(name: &str, mut samples: Vec<Duration>) {
    let n = samples.len();
    match percentiles(&mut samples) {
        Some((p50, p99, max)) => println!(
            "{name:<44} {n:>5} {:>10} {:>10} {:>10}",
            fmt(p50),
            fmt(p99),
            fmt(max)
        ),
        None => println!("{name:<44} {n:>5} (no handover measured)"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let mut urls = Vec::new();
    let mut rounds = 100;
    let mut polling_rounds = 8;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds N")?.parse()?,
            "--polling-rounds" => {
                polling_rounds = args.next().ok_or("--polling-rounds N")?.parse()?;
            }
            url => urls.push(url.parse::<storage_url::StorageUrl>()?),
        }
    }
    if urls.is_empty() {
        return Err("usage: handover STORAGE_URL... [--rounds N] [--polling-rounds N]".into());
    }
    println!(
        "graceful handover: leader's release -> standby holds the key (retry pause {}, lease {}, \
         2 contenders, each on its own storage)",
        fmt(PAUSE),
        fmt(LEASE)
    );
    println!(
        "{:<44} {:>5} {:>10} {:>10} {:>10}",
        "case", "n", "p50", "p99", "max"
    );
    for url in &urls {
        // Display hides the password.
        let engine = url.driver().name;
        report(&format!("{engine}, watch"), case(url, true, rounds).await?);
        if polling_rounds > 0 {
            report(
                &format!("{engine}, polling (no watch)"),
                case(url, false, polling_rounds).await?,
            );
        }
    }
    Ok(())
}
