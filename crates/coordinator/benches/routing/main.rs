//! Loopback benchmark: the same pod straight, through nginx and through the
//! coordinator, in one run, under the same load. Prints requests/s, the
//! ratio to direct, p50/p99 latency, the proxy's CPU time per 1000 requests
//! (nginx's or the coordinator's), Valkey round trips per request, and the
//! ratios to nginx. (A `pingora-proxy` row was measured for issue 27 and the
//! experiment removed once decided: its figures and the decision are in
//! `docs/coordinator-http.md`.)
//!
//! ```text
//! VALKEY_URL=redis://127.0.0.1:6379 cargo bench -p coordinator --bench routing
//! ```
//!
//! nginx runs `proxy_pass` with upstream keep-alive, one worker and
//! `master_process off` (its CPU time is one process's); without nginx
//! (`apt-get install nginx-light`, or `NGINX_BIN=/path/to/nginx`) its row is
//! skipped with a message. The coordinator runs on one worker thread and on the default runtime (one
//! worker per CPU).
//!
//! `BENCH_SECS` (default 5), `BENCH_CONCURRENCY` (default 32) and
//! `BENCH_COORD_THREADS` (the default runtime's workers, default one per
//! CPU) tune a run; `BENCH_ONLY=<text>` runs only the coordinator rows whose
//! name contains it (e.g. `1 worker, cache 5`, to profile one row). `BENCH_POD_EDGE=1` serves
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

mod nginx;
mod per_core;
mod proxy_process;

/// Thread name of the coordinator's one-worker runtime.
const COORD_ONE: &str = "bench-coord1";
/// Thread name of the coordinator's default runtime.
const COORD_DEFAULT: &str = "bench-coordN";
/// Thread name of the coordinator's thread-per-core shape.
pub(crate) const COORD_PER_CORE: &str = "bench-coordP";
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

/// User and system CPU time.
#[derive(Clone, Copy, Default)]
struct Cpu {
    user: Duration,
    sys: Duration,
}

impl Cpu {
    fn total(self) -> Duration {
        self.user + self.sys
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(before.user),
            sys: self.sys.saturating_sub(before.sys),
        }
    }
}

impl std::iter::Sum for Cpu {
    fn sum<I: Iterator<Item = Cpu>>(iter: I) -> Cpu {
        iter.fold(Cpu::default(), |a, b| Cpu {
            user: a.user + b.user,
            sys: a.sys + b.sys,
        })
    }
}

/// The command name and CPU time in a `/proc/…/stat` file.
fn stat_cpu(path: &std::path::Path) -> Option<(String, Cpu)> {
    // USER_HZ: 100 on every Linux architecture this runs on
    const TICKS_PER_SEC: u64 = 100;
    let stat = std::fs::read_to_string(path).ok()?;
    // pid (comm) state ... ; comm may hold spaces, so split at the last ')'
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // after the comm: state is field 3, utime 14, stime 15 (1-based)
    let ticks = |i: usize| -> Option<Duration> {
        let t: u64 = fields.get(i)?.parse().ok()?;
        Some(Duration::from_millis(t * 1000 / TICKS_PER_SEC))
    };
    let cpu = Cpu {
        user: ticks(11)?,
        sys: ticks(12)?,
    };
    Some((stat[open + 1..close].to_owned(), cpu))
}

/// CPU time of the process whose stat file is `path`.
fn process_cpu(path: &str) -> Cpu {
    stat_cpu(std::path::Path::new(path)).map_or(Cpu::default(), |(_, cpu)| cpu)
}

/// CPU time of this process's threads named `name`, from
/// `/proc/self/task/*/stat`.
fn threads_cpu(name: &str) -> Cpu {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Cpu::default();
    };
    tasks
        .flatten()
        .filter_map(|task| stat_cpu(&task.path().join("stat")))
        .filter(|(comm, _)| comm == name)
        .map(|(_, cpu)| cpu)
        .sum()
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

/// One row of the table.
struct Row {
    name: String,
    stats: Stats,
    /// The proxy's CPU time (nginx's or the coordinator's).
    proxy_cpu: Option<Cpu>,
    pod_cpu: Duration,
    trips: Option<u64>,
}

impl Row {
    fn cpu_per_1000(&self) -> Option<f64> {
        self.proxy_cpu
            .map(|c| c.total().as_secs_f64() * 1e3 * 1000.0 / self.stats.requests as f64)
    }

    fn print(&self, direct: Option<f64>) {
        let s = &self.stats;
        let ratio = direct.map_or("     ".to_owned(), |d| format!("{:.2}x", rps(s) / d));
        let pod = per_1000(self.pod_cpu, s);
        let cpu = self
            .cpu_per_1000()
            .map_or("-".to_owned(), |c| format!("{c:.1}"));
        let sys = self.proxy_cpu.map_or("-".to_owned(), |c| {
            format!(
                "{:.0}%",
                100.0 * c.sys.as_secs_f64() / c.total().as_secs_f64().max(1e-9)
            )
        });
        let per = self.trips.map_or("-".to_owned(), |t| {
            format!("{:.3}", t as f64 / s.requests as f64)
        });
        println!(
            "{:<44} {:>7.0} req/s {ratio:>6}  p50 {:>6.3} ms  p99 {:>6.3} ms  \
             CPU-ms/1000: proxy {cpu:>5} (sys {sys:>3}) pod {pod:>5}  valkey trips/req {per}",
            self.name,
            rps(s),
            s.p50.as_secs_f64() * 1e3,
            s.p99.as_secs_f64() * 1e3,
        );
    }
}

/// Prints the ratios of `row` to the reference row `base` (nginx's), named
/// `base_name`.
fn print_ratios(row: &Row, base: &Row, base_name: &str) {
    let cpu = match (row.cpu_per_1000(), base.cpu_per_1000()) {
        (Some(c), Some(n)) if n > 0.0 => format!("{:.2}", c / n),
        _ => "-".to_owned(),
    };
    println!(
        "  {:<42} / {base_name}: CPU per request {cpu}x  p99 {:.2}x  p50 {:.2}x  req/s {:.2}x",
        row.name,
        row.stats.p99.as_secs_f64() / base.stats.p99.as_secs_f64(),
        row.stats.p50.as_secs_f64() / base.stats.p50.as_secs_f64(),
        rps(&row.stats) / rps(&base.stats),
    );
}

/// Warms `url` up for a second, then measures it; `proxy_cpu` reads the
/// proxy's CPU time so far.
fn measure(
    load_rt: &Runtime,
    http: &HttpClient,
    url: &str,
    concurrency: usize,
    secs: u64,
    proxy_cpu: &dyn Fn() -> Option<Cpu>,
) -> (Stats, Option<Cpu>, Duration) {
    load_rt.block_on(load(http, url, concurrency, 1)); // warm-up
    let cpu_before = proxy_cpu();
    let pod_before = threads_cpu(POD_THREAD);
    let stats = load_rt.block_on(load(http, url, concurrency, secs));
    let cpu = proxy_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.since(before));
    let pod_cpu = threads_cpu(POD_THREAD).since(pod_before).total();
    (stats, cpu, pod_cpu)
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
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let default_threads = env_or("BENCH_COORD_THREADS", cpus as u64) as usize;
    let pod_rt = runtime(POD_THREAD, 1);
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
        "loopback, {concurrency} concurrent clients, {secs} s per case, {cpus} CPU(s); \
         proxy CPU is nginx's or the coordinator's"
    );

    let direct_url = format!("{pod_url}{path}");
    let (stats, _, pod_cpu) = measure(&load_rt, &http, &direct_url, concurrency, secs, &|| None);
    let direct = Row {
        name: "direct to pod".to_owned(),
        stats,
        proxy_cpu: None,
        pod_cpu,
        trips: None,
    };
    direct.print(None);
    let direct_rps = Some(rps(&direct.stats));

    let pod_addr: std::net::SocketAddr = pod_url.trim_start_matches("http://").parse().unwrap();
    // a row through a proxy process the bench started (its address and
    // pid: its CPU is the whole process's), or why it was skipped
    let process_row = |name: &str, started: Result<(std::net::SocketAddr, u32), &String>| {
        let (addr, pid) = match started {
            Ok(started) => started,
            Err(why) => {
                println!("{name}: skipped: {why}");
                return None;
            }
        };
        let url = format!("http://{addr}{path}");
        let stat = format!("/proc/{pid}/stat");
        let (stats, proxy_cpu, pod_cpu) =
            measure(&load_rt, &http, &url, concurrency, secs, &|| {
                Some(process_cpu(&stat))
            });
        let row = Row {
            name: name.to_owned(),
            stats,
            proxy_cpu,
            pod_cpu,
            trips: None,
        };
        row.print(direct_rps);
        Some(row)
    };
    let nginx = nginx::start(pod_addr);
    let nginx_row = process_row("nginx, 1 worker", nginx.as_ref().map(|n| (n.addr, n.pid())));
    drop(nginx);

    let one_rt = runtime(COORD_ONE, 1);
    let default_rt = runtime(COORD_DEFAULT, default_threads);
    let cases = [
        (
            &one_rt,
            COORD_ONE,
            1,
            "cache 5 s",
            Some(CacheConfig::default()),
            false,
        ),
        (
            &default_rt,
            COORD_DEFAULT,
            default_threads,
            "cache 5 s",
            Some(CacheConfig::default()),
            false,
        ),
        (&one_rt, COORD_ONE, 1, "cache off", None, false),
        (
            &one_rt,
            COORD_ONE,
            1,
            "h2c to pod",
            Some(CacheConfig::default()),
            true,
        ),
    ];
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let mut rows = Vec::new();
    for (rt, thread, threads, what, cache, h2c) in cases {
        let workers = if threads == 1 {
            "1 worker".to_owned()
        } else {
            format!("{threads} workers")
        };
        let name = format!("coordinator, {workers}, {what}");
        if !name.contains(&only) {
            continue;
        }
        let (base, registry) = start_coordinator(rt, &valkey, &prefix, cache, h2c);
        let url = format!("{base}{path}");
        let trips_before = registry.metrics().valkey_round_trips;
        let (stats, proxy_cpu, pod_cpu) =
            measure(&load_rt, &http, &url, concurrency, secs, &|| {
                Some(threads_cpu(thread))
            });
        let trips = registry.metrics().valkey_round_trips - trips_before;
        let row = Row {
            name,
            stats,
            proxy_cpu,
            pod_cpu,
            trips: Some(trips),
        };
        row.print(direct_rps);
        rows.push(row);
    }
    let name = format!("coordinator, {default_threads} per-core reuseport, cache 5 s");
    if name.contains(&only) {
        let (base, registry) = per_core::start(default_threads, &valkey, &prefix);
        let url = format!("{base}{path}");
        let trips_before = registry.metrics().valkey_round_trips;
        let (stats, proxy_cpu, pod_cpu) =
            measure(&load_rt, &http, &url, concurrency, secs, &|| {
                Some(threads_cpu(COORD_PER_CORE))
            });
        let row = Row {
            name,
            stats,
            proxy_cpu,
            pod_cpu,
            trips: Some(registry.metrics().valkey_round_trips - trips_before),
        };
        row.print(direct_rps);
        rows.push(row);
    }
    if let Some(nginx) = &nginx_row {
        println!("ratios to nginx (1 worker):");
        for row in &rows {
            print_ratios(row, nginx, "nginx");
        }
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
