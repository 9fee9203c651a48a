//! Loopback benchmark of the broadcast between pods: three pods in this
//! process, one subscriber of one destination on each, against a real
//! Valkey. Reports publish-to-delivery latency (p50/p99) to the *other*
//! pods and to the publisher's own, and events/s per pod, for
//!
//! - **pubsub**: this crate (`Events::clustered`: a script numbers the
//!   event and `SPUBLISH`es it; each pod's broadcast connection delivers
//!   it), and
//! - **http**: the alternative the design names, built here as a faithful
//!   prototype (`http.rs`): one script numbers the event and reads the
//!   subscribed pods' addresses, then the publisher `POST`s it to each
//!   other pod over a kept-alive HTTP/1.1 connection and hands it to its
//!   own subscribers directly.
//!
//! ```text
//! VALKEY_URL=redis://127.0.0.1:6379 cargo bench -p coordinator-events --bench events
//! ```
//!
//! `BENCH_EVENTS` (default 2000: the sequential latency run, per
//! channel), `BENCH_SECS` (default 3: the throughput run) and
//! `BENCH_INFLIGHT` (default 16: publishes in flight per pod in the
//! throughput run) tune it; `BENCH_DETAIL=1` prints more percentiles of
//! the sequential run. Not run in CI.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod http;
mod pubsub;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Pods in the run.
const PODS: usize = 3;
/// The payload of every event.
const PAYLOAD: &[u8] = br#"{"op":"put","key":"greeting","value":"hello acme"}"#;

/// Latencies in microseconds, to the publisher's own subscriber and to
/// the other pods'.
#[derive(Default)]
pub(crate) struct Latencies {
    pub(crate) own: Vec<u64>,
    pub(crate) peers: Vec<u64>,
}

/// Where the subscribers record what they receive.
#[derive(Clone, Default)]
pub(crate) struct Sink {
    inner: Arc<Mutex<(Latencies, Vec<u64>)>>,
    /// Woken at every receipt (the latency run waits on it, not spinning).
    arrived: Arc<tokio::sync::Notify>,
}

impl Sink {
    /// Pod `at` received an event that pod `from` published at `sent`
    /// (µs since the epoch, this machine's clock).
    pub(crate) fn record(&self, at: usize, from: usize, sent: u64) {
        let now = now_micros();
        let mut g = self.inner.lock().unwrap();
        let lat = now.saturating_sub(sent);
        if at == from {
            g.0.own.push(lat);
        } else {
            g.0.peers.push(lat);
        }
        g.1[at] += 1;
        drop(g);
        self.arrived.notify_waiters();
    }

    fn reset(&self) {
        *self.inner.lock().unwrap() = (Latencies::default(), vec![0; PODS]);
    }

    fn take(&self) -> (Latencies, Vec<u64>) {
        std::mem::take(&mut *self.inner.lock().unwrap())
    }

    fn received(&self) -> u64 {
        self.inner.lock().unwrap().1.iter().sum()
    }
}

pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// What a channel under test offers: publish from pod `from`.
pub(crate) trait Channel: Send + Sync + 'static {
    fn publish(&self, from: usize) -> impl Future<Output = ()> + Send;
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

/// Publishes `n` events one at a time (round-robin over the pods), each
/// after every pod received the previous one: latency without queueing.
async fn latency_run<C: Channel>(channel: &C, sink: &Sink, n: usize) -> (Latencies, Vec<u64>) {
    sink.reset();
    let mut calls = Vec::with_capacity(n);
    for i in 0..n {
        let target = ((i + 1) * PODS) as u64;
        let called = Instant::now();
        channel.publish(i % PODS).await;
        calls.push(called.elapsed().as_micros() as u64);
        let deadline = Instant::now() + Duration::from_secs(5);
        while sink.received() < target {
            assert!(
                Instant::now() < deadline,
                "event {i} not delivered everywhere"
            );
            tokio::task::yield_now().await;
        }
    }
    (sink.take().0, calls)
}

/// Every pod publishes with `inflight` calls in flight for `secs`:
/// published and received events per second per pod.
async fn throughput_run<C: Channel>(
    channel: Arc<C>,
    sink: &Sink,
    secs: u64,
    inflight: usize,
) -> (f64, f64, Latencies) {
    sink.reset();
    let stop = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for pod in 0..PODS {
        for _ in 0..inflight {
            let channel = channel.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < stop {
                    channel.publish(pod).await;
                    n += 1;
                }
                n
            }));
        }
    }
    let mut published = 0;
    for t in tasks {
        published += t.await.unwrap();
    }
    // let the last ones arrive
    let want = published * PODS as u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.received() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (lat, received) = sink.take();
    let per_pod_pub = published as f64 / PODS as f64 / elapsed;
    let per_pod_recv = received.iter().sum::<u64>() as f64 / PODS as f64 / elapsed;
    (per_pod_pub, per_pod_recv, lat)
}

fn report(
    name: &str,
    (mut lat, mut calls): (Latencies, Vec<u64>),
    pubs: f64,
    recv: f64,
    mut loaded: Latencies,
) {
    if std::env::var_os("BENCH_DETAIL").is_some() {
        let p = &mut lat.peers;
        eprintln!(
            "{name} sequential peers: p90 {:.3} p95 {:.3} p98 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} (n {})",
            pct(p, 0.9),
            pct(p, 0.95),
            pct(p, 0.98),
            pct(p, 0.99),
            pct(p, 0.999),
            pct(p, 1.0),
            p.len()
        );
        let over = p.iter().filter(|v| **v > 1000).count();
        eprintln!("{name} over 1 ms: {over}");
    }
    println!(
        "{name:<7} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>10.0} {:>10.0} | {:>8.3} {:>8.3}",
        pct(&mut lat.peers, 0.5),
        pct(&mut lat.peers, 0.99),
        pct(&mut lat.own, 0.5),
        pct(&mut lat.own, 0.99),
        pubs,
        recv,
        pct(&mut loaded.peers, 0.5),
        pct(&mut loaded.peers, 0.99),
    );
    println!(
        "{name:<7}   (the publish call itself: p50 {:.3} p99 {:.3})",
        pct(&mut calls, 0.5),
        pct(&mut calls, 0.99)
    );
}

fn main() {
    let Ok(url) = std::env::var("VALKEY_URL") else {
        eprintln!("events: set VALKEY_URL (e.g. redis://127.0.0.1:6379) to run this benchmark");
        return;
    };
    let n = env_usize("BENCH_EVENTS", 2000);
    let secs = env_usize("BENCH_SECS", 3) as u64;
    let inflight = env_usize("BENCH_INFLIGHT", 16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!(
            "{PODS} pods in one process, one subscriber each, one destination; {n} sequential events; \
             {secs} s at {inflight} in flight per pod; latencies in ms"
        );
        println!(
            "channel | peers p50 peers p99 |  own p50  own p99 | pub/s/pod recv/s/pod | loaded peers p50 p99"
        );
        let sink = Sink::default();
        let pubsub = Arc::new(pubsub::Fleet::start(&url, sink.clone()).await);
        let lat = latency_run(&*pubsub, &sink, n).await;
        let (pubs, recv, loaded) = throughput_run(pubsub.clone(), &sink, secs, inflight).await;
        report("pubsub", lat, pubs, recv, loaded);
        pubsub.stop().await;

        let sink = Sink::default();
        let http = Arc::new(http::Fleet::start(&url, sink.clone()).await);
        let lat = latency_run(&*http, &sink, n).await;
        let (pubs, recv, loaded) = throughput_run(http.clone(), &sink, secs, inflight).await;
        report("http", lat, pubs, recv, loaded);
    });
}
