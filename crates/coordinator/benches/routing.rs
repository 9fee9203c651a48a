//! Loopback benchmark: requests/s and p50/p99 latency straight to a pod vs.
//! through the coordinator (cache on and off), with the Valkey round trips
//! per request.
//!
//! ```text
//! VALKEY_URL=redis://127.0.0.1:6379 cargo bench -p coordinator --bench routing
//! ```
//!
//! `BENCH_SECS` (default 5) and `BENCH_CONCURRENCY` (default 32) tune a run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use coordinator::http::{Coordinator, CoordinatorConfig, ForwardConfig, Forwarder};
use coordinator::strategy::RoundRobin;
use coordinator::{
    CacheConfig, DestinationId, Member, MemberAddress, MemberConfig, MemberId, Registry,
    RegistryConfig, RequestId,
};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

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

async fn serve(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
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

fn report(name: &str, s: &Stats, trips: Option<u64>) {
    let rps = s.requests as f64 / s.elapsed.as_secs_f64();
    let per = trips.map_or("-".to_owned(), |t| {
        format!("{:.3}", t as f64 / s.requests as f64)
    });
    println!(
        "{name:<28} {rps:>10.0} req/s   p50 {:>8.3} ms   p99 {:>8.3} ms   valkey round trips/req {per}",
        s.p50.as_secs_f64() * 1e3,
        s.p99.as_secs_f64() * 1e3,
    );
}

async fn coordinator_url(
    url: &str,
    prefix: &str,
    cache: Option<CacheConfig>,
) -> (String, Registry) {
    let client = coordinator::connect(url, Duration::from_secs(2))
        .await
        .unwrap();
    let config = RegistryConfig {
        prefix: prefix.to_owned(),
        cache,
        ..RegistryConfig::default()
    };
    let registry = Registry::new(client, config, Arc::new(RoundRobin::new())).unwrap();
    let c = Coordinator::new(
        registry.clone(),
        Forwarder::new(ForwardConfig::default()).unwrap(),
        CoordinatorConfig::default(),
    );
    (serve(c.router()).await, registry)
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let prefix = format!("bench{}", RequestId::generate());
        let app = Router::new().route("/destinations/{d}/echo", get(|| async { "ok" }));
        let pod_url = serve(app).await;
        let client = coordinator::connect(&valkey, Duration::from_secs(2))
            .await
            .unwrap();
        let mut config = MemberConfig::new(
            MemberId::new("bench-pod").unwrap(),
            MemberAddress::parse(&pod_url).unwrap(),
        );
        config.prefix = prefix.clone();
        let member = Member::new(client, config).unwrap();
        let heartbeat = member.start_heartbeat();
        member.register().await.unwrap();
        let dest = DestinationId::new("bench").unwrap();
        member.add_to_destination(&dest).await.unwrap();

        let http: HttpClient = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(concurrency)
            .build_http();
        let path = "/destinations/bench/echo";
        println!("loopback, {concurrency} concurrent clients, {secs} s per case");

        let direct = format!("{pod_url}{path}");
        load(&http, &direct, concurrency, 1).await; // warm-up
        report(
            "direct to pod",
            &load(&http, &direct, concurrency, secs).await,
            None,
        );

        for (name, cache) in [
            ("coordinator, cache 5 s", Some(CacheConfig::default())),
            ("coordinator, cache off", None),
        ] {
            let (base, registry) = coordinator_url(&valkey, &prefix, cache).await;
            let url = format!("{base}{path}");
            load(&http, &url, concurrency, 1).await; // warm-up
            let before = registry.metrics().valkey_round_trips;
            let stats = load(&http, &url, concurrency, secs).await;
            let trips = registry.metrics().valkey_round_trips - before;
            report(name, &stats, Some(trips));
        }

        heartbeat.stop().await;
        member.deregister().await.unwrap();
        member.remove_from_destination(&dest).await.unwrap();
    });
}
