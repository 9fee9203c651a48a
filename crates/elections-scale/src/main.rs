//! `elections-scale`: N leaderships held by one process, measured.
//!
//! ```text
//! elections-scale --storage URL --keys N [--duration 20s] [--run 60s]
//!                 [--concurrency 256] [--store-pid PID]
//! ```
//!
//! Acquires `N` keys (`scale/0` ... `scale/N-1`, at most `--concurrency`
//! attempts at a time; an attempt shed because renewals are behind waits
//! and tries again), then holds them for `--run` and reports, for that
//! window: renewal rounds per second, the client's CPU per renewal and in
//! all, the renewal lag (p50/p99/max of every round since the start, as
//! `Elections::renewal_lag` reports it), acquisitions shed, killer
//! firings, and with `--store-pid` the store's own CPU (the process and
//! its descendants). The last line is the same as one JSON object.
//! `cargo xtask bench scale` starts the engine and runs this.
//!
//! It never releases: it exits and leaves the records to expire.

mod cpu;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use clap::Parser;
use elections::{Elections, ElectionsError, Killer, Leadership};
use futures::StreamExt;
use ttl_storage::Key;

#[derive(Parser)]
#[command(about = "Hold N leaderships in one process and measure the cost")]
struct Args {
    /// The store, as a storage URL (`mem`, `redb:///path`, `redis://...`).
    #[arg(long)]
    storage: String,
    /// How many leaderships to hold.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// The leadership duration d (renewals every d/4).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// How long to measure once the keys are held.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    run: Duration,
    /// Acquisition attempts in flight at once during the ramp.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// The ramp ends after this even if not every key is held (under
    /// overload, acquisitions are shed for as long as renewals lag).
    #[arg(long, default_value = "180s", value_parser = humantime::parse_duration)]
    ramp_limit: Duration,
    /// The store's process id: its CPU (and its descendants') is reported.
    #[arg(long)]
    store_pid: Option<u32>,
}

/// Counts killer firings instead of ending the process.
#[derive(Default)]
struct CountingKiller(AtomicU64);

impl Killer for CountingKiller {
    fn kill(&self, _key: &Key, _deadline: tokio::time::Instant) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    // like the production killer, which does not look at armings
    fn observes_arming(&self) -> bool {
        false
    }
}

/// How the ramp went.
#[derive(Default)]
struct Ramp {
    acquired: Vec<Leadership>,
    held_by_other: u64,
    errors: u64,
    shed: u64,
    /// Keys not acquired when the ramp limit passed.
    given_up: u64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let ran = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run(&args)));
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("elections-scale: {}", said_once(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `err` and its causes on one line, a cause whose words the line already
/// holds left out.
fn said_once(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for link in err.chain() {
        let text = link.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

async fn run(args: &Args) -> anyhow::Result<()> {
    let storage = storage_url::open(&args.storage)
        .await
        .context("cannot open the store")?;
    let killer = Arc::new(CountingKiller::default());
    let elections = Elections::with_killer(storage.clone(), killer.clone());

    let ramp_started = tokio::time::Instant::now();
    let ramp = acquire_all(&elections, args).await;
    let ramp_time = ramp_started.elapsed();
    println!(
        "ramp: {} acquired, {} held by another, {} errors, {} attempts shed, {} not acquired by the ramp limit, in {:.1} s",
        ramp.acquired.len(),
        ramp.held_by_other,
        ramp.errors,
        ramp.shed,
        ramp.given_up,
        ramp_time.as_secs_f64()
    );

    let cpu_before = cpu::own();
    let store_before = args.store_pid.and_then(cpu::of_tree);
    let lag_before = elections.renewal_lag();
    let kills_before = killer.0.load(Ordering::Relaxed);
    let started = tokio::time::Instant::now();
    tokio::time::sleep(args.run).await;
    let elapsed = started.elapsed();
    let lag = elections.renewal_lag();
    let cpu_used = cpu::own()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let store_used = args
        .store_pid
        .and_then(cpu::of_tree)
        .zip(store_before)
        .map(|(after, before)| after.saturating_sub(before));

    let renewals = lag.rounds - lag_before.rounds;
    let per_second = renewals as f64 / elapsed.as_secs_f64();
    let per_renewal = |used: Option<Duration>| {
        used.filter(|_| renewals > 0)
            .map(|used| used.as_secs_f64() * 1e6 / renewals as f64)
    };
    let share =
        |used: Option<Duration>| used.map(|used| used.as_secs_f64() / elapsed.as_secs_f64());
    let kills = killer.0.load(Ordering::Relaxed);
    let lapsed = lapsed_while_leading(&*storage, &ramp.acquired).await;
    let shown =
        |v: Option<f64>, unit: &str| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}{unit}"));
    println!(
        "held {} at d = {}: {renewals} renewals in {:.1} s ({per_second:.0}/s, expected {:.0}/s)",
        ramp.acquired.len(),
        humantime::format_duration(args.duration),
        elapsed.as_secs_f64(),
        ramp.acquired.len() as f64 * 4.0 / args.duration.as_secs_f64(),
    );
    println!(
        "client CPU: {} of a core, {} per renewal",
        shown(share(cpu_used).map(|s| s * 100.0), " %"),
        shown(per_renewal(cpu_used), " µs"),
    );
    println!(
        "store CPU: {} of a core, {} per renewal",
        shown(share(store_used).map(|s| s * 100.0), " %"),
        shown(per_renewal(store_used), " µs"),
    );
    println!(
        "renewal lag (every round since the start): p50 ≤ {} ms, p99 ≤ {} ms, max ≤ {} ms; {} acquisitions shed; killer firings: {} ({} during the window)",
        lag.p50.as_millis(),
        lag.p99.as_millis(),
        lag.max.as_millis(),
        lag.shed,
        kills,
        kills - kills_before,
    );
    println!(
        "leases lapsed while their holder still led (a record not holding its leader's value, the handle active before and after the read): {lapsed} of {}",
        ramp.acquired.len()
    );
    let line = serde_json::json!({
        "storage": redacted(&args.storage),
        "keys": args.keys,
        "held": ramp.acquired.len(),
        "duration_s": args.duration.as_secs(),
        "ramp_s": ramp_time.as_secs_f64(),
        "window_s": elapsed.as_secs_f64(),
        "renewals": renewals,
        "renewals_per_s": per_second,
        "client_cpu_share": share(cpu_used),
        "client_cpu_us_per_renewal": per_renewal(cpu_used),
        "store_cpu_share": share(store_used),
        "store_cpu_us_per_renewal": per_renewal(store_used),
        "lag_p50_ms": lag.p50.as_millis() as u64,
        "lag_p99_ms": lag.p99.as_millis() as u64,
        "lag_max_ms": lag.max.as_millis() as u64,
        "shed": lag.shed,
        "killer_firings": kills,
        "lapsed_while_leading": lapsed,
        "errors": ramp.errors,
        "not_acquired": ramp.given_up,
    });
    println!("{line}");
    // No release: the records expire (and this process's leases with it).
    std::process::exit(0)
}

/// Leaderships whose handle is active before and after a read that finds
/// their record gone or holding another value: a lease that lapsed while
/// its holder still acted as leader, which the killer exists to prevent
/// (a failed read counts as nothing).
async fn lapsed_while_leading(storage: &dyn ttl_storage::TtlStorage, held: &[Leadership]) -> u64 {
    futures::stream::iter(held)
        .map(|leadership| async move {
            if !leadership.is_active() {
                return false;
            }
            let read = storage.get(leadership.key()).await;
            let lapsed =
                matches!(&read, Ok(value) if value.as_deref() != Some(leadership.record_value()));
            lapsed && leadership.is_active()
        })
        .buffer_unordered(256)
        .filter(|lapsed| std::future::ready(*lapsed))
        .count()
        .await as u64
}

/// The URL without its password.
fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// One key's ramp: held, held by another, or given up at the ramp limit.
enum Got {
    Held(Leadership),
    Other,
    GivenUp,
}

/// Acquires every key, `--concurrency` attempts at a time; a shed attempt
/// waits as told and tries again, until the ramp limit.
async fn acquire_all(elections: &Elections, args: &Args) -> Ramp {
    let mut ramp = Ramp::default();
    let limit = tokio::time::Instant::now() + args.ramp_limit;
    let attempts = futures::stream::iter(0..args.keys)
        .map(|i| {
            let elections = elections.clone();
            let duration = args.duration;
            async move {
                let key = Key::new(format!("scale/{i}")).map_err(ElectionsError::Invalid)?;
                let mut shed = 0;
                loop {
                    if tokio::time::Instant::now() >= limit {
                        return Ok((Got::GivenUp, shed));
                    }
                    match elections.acquire_leadership(&key, "scale", duration).await {
                        Err(ElectionsError::Overloaded { retry_after, .. }) => {
                            shed += 1;
                            tokio::time::sleep(retry_after).await;
                        }
                        Ok(Some(held)) => return Ok((Got::Held(held), shed)),
                        Ok(None) => return Ok((Got::Other, shed)),
                        Err(err) => return Err(err),
                    }
                }
            }
        })
        .buffer_unordered(args.concurrency.max(1));
    futures::pin_mut!(attempts);
    while let Some(outcome) = attempts.next().await {
        match outcome {
            Ok((got, shed)) => {
                ramp.shed += shed;
                match got {
                    Got::Held(leadership) => ramp.acquired.push(leadership),
                    Got::Other => ramp.held_by_other += 1,
                    Got::GivenUp => ramp.given_up += 1,
                }
            }
            Err(err) => {
                ramp.errors += 1;
                if ramp.errors <= 3 {
                    eprintln!("acquisition failed: {err}");
                }
            }
        }
    }
    ramp
}
