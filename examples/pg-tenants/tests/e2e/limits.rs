//! Bounded resources, hostile inputs and allocation: many tenants, NUL
//! bytes, huge bodies, first touch with traffic in between.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Fleet, Opts, bounded};

impl Fleet {
    /// PostgreSQL connections opened by this fleet's pods.
    async fn fleet_connections(&self) -> i64 {
        self.pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name LIKE 'pg-tenants/%' \
                 AND split_part(application_name, '/', 3) LIKE $1",
                &[&format!("{}-%", self.tag)],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// The status line of the coordinator's answer to `head` followed by
/// `pieces` copies of `piece`, written while the answer is read (a server
/// that refuses a body answers early and closes).
async fn raw_status(base: &str, head: String, piece: Vec<u8>, pieces: usize) -> String {
    let s = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let (mut rd, mut wr) = s.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while !got.windows(2).any(|w| w == b"\r\n") {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()
    });
    if wr.write_all(head.as_bytes()).await.is_ok() {
        for _ in 0..pieces {
            let w = tokio::time::timeout(Duration::from_secs(5), wr.write_all(&piece)).await;
            if !matches!(w, Ok(Ok(()))) || reader.is_finished() {
                break;
            }
        }
    }
    tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("no answer")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn two_hundred_tenants_stay_within_the_connection_budget() {
    bounded(async {
        let opts = Opts::default();
        let f = Fleet::start(opts).await;
        let budget = (3 * opts.max_tenant_pools * opts.pool_size) as i64;
        let mut peak = 0;
        for i in 0..200 {
            let t = f.tenant(&format!("many{i}"));
            f.ok("PUT", &format!("/tenants/{t}/kv/k"), "v").await;
            if i % 10 == 9 {
                peak = peak.max(f.fleet_connections().await);
            }
        }
        // closed pools' backends exit asynchronously: allow one pool per pod
        // in flight
        let slack = (3 * opts.pool_size) as i64;
        assert!(
            peak <= budget + slack,
            "peak {peak} connections, budget {budget} (+{slack})"
        );
        assert!(
            f.eventually(Duration::from_secs(10), async |f| f
                .fleet_connections()
                .await
                <= budget)
                .await,
            "connections stay above the budget of {budget}"
        );
        // evicted tenants come back on their next call, data intact
        let first = f.tenant("many0");
        let (_, json) = f.ok("GET", &format!("/tenants/{first}/kv/k"), "").await;
        assert_eq!(json["value"], "v");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn nul_bytes_are_400_and_huge_bodies_413_without_leaking_postgres_text() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let t = f.tenant("hostile");
        f.ok("PUT", &format!("/tenants/{t}/kv/ok"), "v").await;
        for (path, body) in [
            (format!("/tenants/{t}/kv/a%00b"), "v"),
            (format!("/tenants/{t}/kv/ok"), "a\0b"),
        ] {
            let r = f.call("PUT", &path, body).await;
            assert_eq!(r.status, 400, "{path}: {r:?}");
            let text = r.json.to_string().to_lowercase();
            for leak in [
                "postgres",
                "byte sequence",
                "utf8",
                "0x00",
                "sqlstate\":\"2",
            ] {
                assert!(!text.contains(leak), "{leak} leaked: {text}");
            }
        }
        let r = f.call("GET", &format!("/tenants/{t}/kv/a%00b"), "").await;
        assert_eq!(r.status, 400, "{r:?}");

        // 100 MB declared: refused before anything is forwarded
        let head = format!(
            "PUT /tenants/{t}/kv/big HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            100 << 20
        );
        let status = raw_status(&f.coordinator, head, vec![b'x'; 1 << 20], 100).await;
        assert!(status.starts_with("HTTP/1.1 413"), "{status}");
        // 100 MB streamed without a length: cut off at the limit, 413
        let head = format!(
            "PUT /tenants/{t}/kv/big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let piece = format!("100000\r\n{}\r\n", "x".repeat(0x100000)).into_bytes();
        let status = raw_status(&f.coordinator, head, piece, 100).await;
        assert!(status.starts_with("HTTP/1.1 413"), "{status}");
        // the value was never written
        let r = f.call("GET", &format!("/tenants/{t}/kv/big"), "").await;
        assert_eq!(r.status, 404, "{r:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn new_tenants_spread_evenly_with_traffic_in_between() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let mut per_pod = std::collections::BTreeMap::<String, usize>::new();
        for i in 0..9 {
            let t = f.tenant(&format!("mix{i}"));
            let (pod, _) = f.ok("PUT", &format!("/tenants/{t}/kv/k"), "v").await;
            *per_pod.entry(pod).or_default() += 1;
            // 0..=3 calls to earlier tenants between first touches
            for k in 0..(i % 4) {
                let earlier = f.tenant(&format!("mix{}", k % (i + 1)));
                f.ok("GET", &format!("/tenants/{earlier}/kv/k"), "").await;
            }
        }
        let counts: Vec<usize> = per_pod.values().copied().collect();
        assert_eq!(counts, [3, 3, 3], "round-robin first touch: {per_pod:?}");
    })
    .await;
}
