//! Loopback benchmark: the same pod straight and through the coordinator,
//! in one run. Prints requests/s, the ratio to direct, p50/p99 latency, the
//! coordinator's CPU time per 1000 routed requests and Valkey round trips
//! per request.
//!
//! ```text
//! VALKEY_URL=redis://127.0.0.1:6379 cargo bench -p coordinator --bench routing
//! ```
//!
//! `BENCH_SECS` (default 5), `BENCH_CONCURRENCY` (default 32) and
//! `BENCH_COORD_THREADS` (default 1) tune a run. `BENCH_POD_EDGE=1` serves
//! the pod with `http_edge::serve` (the coordinator's own hardened server)
//! instead of `axum::serve`, to price the edge's limits alone: measured the
//! same, 6.9 against 6.6 pod CPU-ms per 1000 direct requests.
//!
//! The pod, the coordinator and the load generator each run on their own
//! Tokio runtime with named threads, so the coordinator's CPU time is the sum
//! of `utime + stime` of its threads (`/proc/self/task/*/stat`, 10 ms
//! ticks), its Valkey client included; the pod's is printed beside it as a
//! baseline (the pod does one HTTP exchange per request, the coordinator
//! two). Everything shares the machine's cores: on a small or busy box the
//! load generator and the pod compete with the coordinator, and CPU time per
//! request grows with the contention.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use coordinator::http::{Coordinator, CoordinatorConfig, ForwardConfig, Forwarder, ServeConfig};
use coordinator::strategy::RoundRobin;
use coordinator::{
    CacheConfig, DestinationId, Member, MemberAddress, MemberConfig, MemberId, Registry,
    RegistryConfig, RequestId,
};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// Thread name prefix of the coordinator's runtime.
const COORD_THREAD: &str = "bench-coord";
/// Thread name of the pod's runtime (the baseline: one HTTP exchange per
/// request, where the coordinator does two).
const POD_THREAD: &str = "bench-pod";

struct Stats {
    requests: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime(name: &'static str, threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap()
}

/// CPU time (user + system) of this process's threads whose name starts
/// with `prefix`, from `/proc/self/task/*/stat`.
fn threads_cpu(prefix: &str) -> Duration {
    // USER_HZ: 100 on every Linux architecture this runs on
    const TICKS_PER_SEC: u64 = 100;
    let mut ticks = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... ; comm may hold spaces, so split at the last ')'
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // after the comm: state is field 3, utime 14, stime 15 (1-based)
        let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        ticks += utime + stime;
    }
    Duration::from_millis(ticks * 1000 / TICKS_PER_SEC)
}

async fn serve_plain(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    if env_or("BENCH_POD_EDGE", 0) == 1 {
        tokio::spawn(coordinator::http::serve(
            listener,
            app,
            ServeConfig::default(),
            std::future::pending(),
        ));
    } else {
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    }
    format!("http://{addr}")
}

/// Runs `concurrency` closed-loop clients against `url` for `secs`.
async fn load(client: &HttpClient, url: &str, concurrency: usize, secs: u64) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            let uri: hyper::Uri = url.parse().unwrap();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let resp = client.get(uri.clone()).await.unwrap();
                    assert!(resp.status().is_success(), "status {}", resp.status());
                    resp.into_body().collect().await.unwrap();
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Stats {
        requests: all.len(),
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn rps(s: &Stats) -> f64 {
    s.requests as f64 / s.elapsed.as_secs_f64()
}

/// CPU-ms per 1000 requests of `s`.
fn per_1000(cpu: Duration, s: &Stats) -> String {
    format!(
        "{:.1}",
        cpu.as_secs_f64() * 1e3 * 1000.0 / s.requests as f64
    )
}

fn report(
    name: &str,
    s: &Stats,
    direct: Option<f64>,
    pod_cpu: Duration,
    cpu: Option<Duration>,
    trips: Option<u64>,
) {
    let ratio = direct.map_or("     ".to_owned(), |d| format!("{:.2}x", rps(s) / d));
    let pod = per_1000(pod_cpu, s);
    let cpu = cpu.map_or("-".to_owned(), |c| per_1000(c, s));
    let per = trips.map_or("-".to_owned(), |t| {
        format!("{:.3}", t as f64 / s.requests as f64)
    });
    println!(
        "{name:<26} {:>9.0} req/s {ratio:>6}  p50 {:>6.3} ms  p99 {:>6.3} ms  \
         CPU-ms/1000: coordinator {cpu:>5} pod {pod:>5}  valkey trips/req {per}",
        rps(s),
        s.p50.as_secs_f64() * 1e3,
        s.p99.as_secs_f64() * 1e3,
    );
}

/// Starts a coordinator on `rt` (its Valkey client too); returns its URL.
fn start_coordinator(
    rt: &Runtime,
    url: &str,
    prefix: &str,
    cache: Option<CacheConfig>,
    h2c: bool,
) -> (String, Registry) {
    let url = url.to_owned();
    let prefix = prefix.to_owned();
    rt.block_on(async move {
        let client = coordinator::connect(&url, Duration::from_secs(2))
            .await
            .unwrap();
        let config = RegistryConfig {
            prefix,
            cache,
            ..RegistryConfig::default()
        };
        let registry = Registry::new(client, config, Arc::new(RoundRobin::new())).unwrap();
        let c = Coordinator::new(
            registry.clone(),
            Forwarder::new(ForwardConfig {
                http2_prior_knowledge: h2c,
                ..ForwardConfig::default()
            })
            .unwrap(),
            CoordinatorConfig::default(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = c.router();
        tokio::spawn(coordinator::http::serve(
            listener,
            app,
            ServeConfig::default(),
            std::future::pending(),
        ));
        (format!("http://{addr}"), registry)
    })
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("routing: benchmark skipped outside `cargo bench`");
        return;
    }
    let Ok(valkey) = std::env::var("VALKEY_URL") else {
        eprintln!("routing: set VALKEY_URL (e.g. redis://127.0.0.1:6379) to run this benchmark");
        std::process::exit(2);
    };
    let secs = env_or("BENCH_SECS", 5);
    let concurrency = env_or("BENCH_CONCURRENCY", 32) as usize;
    let coord_threads = env_or("BENCH_COORD_THREADS", 1) as usize;
    let pod_rt = runtime(POD_THREAD, 1);
    let coord_rt = runtime(COORD_THREAD, coord_threads);
    let load_rt = runtime("bench-load", 1);

    let prefix = format!("bench{}", RequestId::generate());
    let (pod_url, member, heartbeat) = pod_rt.block_on({
        let valkey = valkey.clone();
        let prefix = prefix.clone();
        async move {
            let app = Router::new().route("/destinations/{d}/echo", get(|| async { "ok" }));
            let pod_url = serve_plain(app).await;
            let client = coordinator::connect(&valkey, Duration::from_secs(2))
                .await
                .unwrap();
            let mut config = MemberConfig::new(
                MemberId::new("bench-pod").unwrap(),
                MemberAddress::parse(&pod_url).unwrap(),
            );
            config.prefix = prefix;
            let member = Member::new(client, config).unwrap();
            let heartbeat = member.start_heartbeat();
            member.register().await.unwrap();
            let dest = DestinationId::new("bench").unwrap();
            member.add_to_destination(&dest).await.unwrap();
            (pod_url, member, heartbeat)
        }
    });

    let http: HttpClient = load_rt.block_on(async {
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(concurrency)
            .build_http()
    });
    let path = "/destinations/bench/echo";
    println!(
        "loopback, {concurrency} concurrent clients, {secs} s per case, \
         coordinator on {coord_threads} worker thread(s), {} CPU(s)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let direct_url = format!("{pod_url}{path}");
    load_rt.block_on(load(&http, &direct_url, concurrency, 1)); // warm-up
    let pod_before = threads_cpu(POD_THREAD);
    let direct = load_rt.block_on(load(&http, &direct_url, concurrency, secs));
    let pod_cpu = threads_cpu(POD_THREAD).saturating_sub(pod_before);
    report("direct to pod", &direct, None, pod_cpu, None, None);

    for (name, cache, h2c) in [
        (
            "coordinator, cache 5 s",
            Some(CacheConfig::default()),
            false,
        ),
        ("coordinator, cache off", None, false),
        (
            "coordinator, h2c to pod",
            Some(CacheConfig::default()),
            true,
        ),
    ] {
        let (base, registry) = start_coordinator(&coord_rt, &valkey, &prefix, cache, h2c);
        let url = format!("{base}{path}");
        load_rt.block_on(load(&http, &url, concurrency, 1)); // warm-up
        let trips_before = registry.metrics().valkey_round_trips;
        let cpu_before = threads_cpu(COORD_THREAD);
        let pod_before = threads_cpu(POD_THREAD);
        let stats = load_rt.block_on(load(&http, &url, concurrency, secs));
        let cpu = threads_cpu(COORD_THREAD).saturating_sub(cpu_before);
        let pod_cpu = threads_cpu(POD_THREAD).saturating_sub(pod_before);
        let trips = registry.metrics().valkey_round_trips - trips_before;
        report(
            name,
            &stats,
            Some(rps(&direct)),
            pod_cpu,
            Some(cpu),
            Some(trips),
        );
    }

    pod_rt.block_on(async move {
        heartbeat.stop().await;
        member.deregister().await.unwrap();
        member
            .remove_from_destination(&DestinationId::new("bench").unwrap())
            .await
            .unwrap();
    });
}
