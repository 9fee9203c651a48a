//! End to end: real `pg-pod` and `pg-coordinator` processes against a real
//! PostgreSQL (`PG_URL`) and Valkey/Redis (`VALKEY_URL`).
//!
//! Run with `cargo xtask test-drivers --engine pg-example`, which starts both
//! servers. Each test starts its own fleet (three pods and a coordinator on
//! free ports, a fresh Valkey key prefix, fresh tenant ids) and kills every
//! process it started when it ends, passes or fails.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

#[path = "e2e/limits.rs"]
mod limits;

/// Upper bound of every test.
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// Upper bound of one HTTP call.
const CALL_LIMIT: Duration = Duration::from_secs(30);

fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `cargo xtask test-drivers --engine pg-example`")
    })
}

fn random_hex() -> String {
    coordinator::RequestId::generate().as_str()[..12].to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Settings of one fleet.
#[derive(Clone, Copy)]
struct Opts {
    pool_size: usize,
    queue_threshold_ms: u64,
    tx_idle_timeout_ms: u64,
    tx_max_lifetime_ms: u64,
    cache_ttl_ms: u64,
    max_tenant_pools: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            pool_size: 4,
            queue_threshold_ms: 1_000,
            tx_idle_timeout_ms: 30_000,
            tx_max_lifetime_ms: 300_000,
            cache_ttl_ms: 500,
            max_tenant_pools: 8,
        }
    }
}

/// Every process a test started; all are killed on drop (also on panic,
/// when the tail of each log is printed).
struct Procs {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Procs {
    fn spawn(&mut self, name: &str, exe: &str, args: &[String]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(exe)
            .args(args)
            .env("RUST_LOG", "info,pg_tenants=debug,coordinator=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {exe}: {e}"));
        self.children.push((name.to_owned(), child));
    }

    /// SIGKILL (`Child::kill` on Unix) and reap.
    fn kill(&mut self, name: &str) {
        let (_, child) = self
            .children
            .iter_mut()
            .find(|(n, _)| n == name)
            .expect("no such process");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn exited(&mut self) -> Option<String> {
        self.children.iter_mut().find_map(|(n, c)| {
            c.try_wait()
                .ok()
                .flatten()
                .map(|status| format!("{n} exited: {status}"))
        })
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for (name, _) in &self.children {
                let path = self.dir.join(format!("{name}.log"));
                let Ok(file) = std::fs::File::open(&path) else {
                    continue;
                };
                let lines: Vec<String> =
                    BufReader::new(file).lines().map_while(Result::ok).collect();
                eprintln!("---- last lines of {} ----", path.display());
                for line in &lines[lines.len().saturating_sub(25)..] {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// The answer of one call.
#[derive(Debug)]
struct Resp {
    status: u16,
    /// The `x-pod-id` header.
    pod: Option<String>,
    json: Value,
}

impl Resp {
    fn body_pod(&self) -> Option<&str> {
        self.json.get("pod").and_then(Value::as_str)
    }
    fn value(&self) -> Option<&str> {
        self.json.get("value").and_then(Value::as_str)
    }
}

/// Three pods and a coordinator.
struct Fleet {
    procs: Procs,
    coordinator: String,
    pods: Vec<String>,
    /// `http://127.0.0.1:<port>` of each pod, in the order of `pods`.
    pod_urls: Vec<String>,
    http: Client<HttpConnector, Full<Bytes>>,
    /// Prefix of this fleet's tenant ids.
    tag: String,
    pg: tokio_postgres::Client,
}

impl Fleet {
    async fn start(opts: Opts) -> Fleet {
        let pg_url = env_var("PG_URL");
        let valkey_url = env_var("VALKEY_URL");
        let tag = random_hex();
        let prefix = format!("e2e{tag}");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("pg-tenants-e2e")
            .join(&prefix);
        std::fs::create_dir_all(&dir).unwrap();
        let mut procs = Procs {
            dir,
            children: Vec::new(),
        };
        let mut pods = Vec::new();
        let mut pod_ports = Vec::new();
        for i in 1..=3 {
            let id = format!("pod-{i}");
            let port = free_port();
            let args: Vec<String> = [
                "--valkey-url",
                &valkey_url,
                "--pg-url",
                &pg_url,
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--pod-id",
                &id,
                "--prefix",
                &prefix,
                "--pool-size",
                &opts.pool_size.to_string(),
                "--member-ttl-ms",
                "2000",
                "--heartbeat-ms",
                "400",
                "--lock-ttl-ms",
                "3000",
                "--queue-threshold-ms",
                &opts.queue_threshold_ms.to_string(),
                "--tx-idle-timeout-ms",
                &opts.tx_idle_timeout_ms.to_string(),
                "--tx-max-lifetime-ms",
                &opts.tx_max_lifetime_ms.to_string(),
                "--max-tenant-pools",
                &opts.max_tenant_pools.to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            procs.spawn(&id, env!("CARGO_BIN_EXE_pg-pod"), &args);
            pods.push(id);
            pod_ports.push(port);
        }
        let port = free_port();
        let args: Vec<String> = [
            "--valkey-url",
            &valkey_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--prefix",
            &prefix,
            "--strategy",
            "round-robin",
            "--cache-ttl-ms",
            &opts.cache_ttl_ms.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        procs.spawn("coordinator", env!("CARGO_BIN_EXE_pg-coordinator"), &args);
        let (pg, conn) = tokio_postgres::connect(&pg_url, tokio_postgres::NoTls)
            .await
            .expect("cannot connect to PG_URL");
        tokio::spawn(conn);
        let mut fleet = Fleet {
            procs,
            coordinator: format!("http://127.0.0.1:{port}"),
            pods,
            pod_urls: pod_ports
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}"))
                .collect(),
            http: Client::builder(TokioExecutor::new()).build_http(),
            tag,
            pg,
        };
        // ready: every process answers, and the coordinator sees all pods
        let mut urls: Vec<String> = pod_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}/healthz"))
            .collect();
        urls.push(format!("{}/healthz", fleet.coordinator));
        let deadline = Instant::now() + Duration::from_secs(30);
        for url in urls {
            loop {
                if let Some(exit) = fleet.procs.exited() {
                    panic!("{exit} before it was ready");
                }
                if fleet
                    .raw("GET", &url, "")
                    .await
                    .is_some_and(|r| r.status == 200)
                {
                    break;
                }
                assert!(Instant::now() < deadline, "{url} not ready in time");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let want: BTreeSet<String> = fleet.pods.iter().cloned().collect();
        // Generous: nine fleets start at once on two cores in CI (one CI
        // run of 557 saw 30 s pass before every pod was listed).
        assert!(
            fleet
                .eventually(Duration::from_secs(90), async |f| f.live_pods().await
                    == want)
                .await,
            "the coordinator does not list every pod (listed: {:?}, want {want:?})",
            fleet.live_pods().await
        );
        fleet
    }

    fn tenant(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    async fn raw(&self, method: &str, url: &str, body: &str) -> Option<Resp> {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(url)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let resp = tokio::time::timeout(CALL_LIMIT, self.http.request(req))
            .await
            .unwrap_or_else(|_| panic!("{method} {url} took longer than {CALL_LIMIT:?}"))
            .ok()?;
        let status = resp.status().as_u16();
        let pod = resp
            .headers()
            .get(pg_tenants::POD_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp.into_body().collect().await.ok()?.to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Some(Resp { status, pod, json })
    }

    /// A call through the coordinator.
    async fn call(&self, method: &str, path: &str, body: &str) -> Resp {
        let url = format!("{}{path}", self.coordinator);
        self.raw(method, &url, body)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: connection to the coordinator failed"))
    }

    /// A tenant call that must succeed and be tagged consistently; returns
    /// the serving pod and the JSON.
    async fn ok(&self, method: &str, path: &str, body: &str) -> (String, Value) {
        let r = self.call(method, path, body).await;
        assert!((200..300).contains(&r.status), "{method} {path}: {r:?}");
        let pod = r
            .pod
            .clone()
            .unwrap_or_else(|| panic!("{method} {path}: untagged {r:?}"));
        assert_eq!(
            r.body_pod(),
            Some(pod.as_str()),
            "header and body disagree: {r:?}"
        );
        (pod, r.json)
    }

    async fn live_pods(&self) -> BTreeSet<String> {
        let r = self.call("GET", "/pods", "").await;
        assert_eq!(r.status, 200, "{r:?}");
        r.json["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_str().unwrap().to_owned())
            .collect()
    }

    async fn eventually(
        &self,
        within: Duration,
        mut check: impl AsyncFnMut(&Fleet) -> bool,
    ) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if check(self).await {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Connections of `tenant`'s pools inside an open transaction.
    async fn idle_in_transaction(&self, tenant: &str) -> i64 {
        self.pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE split_part(application_name, '/', 3) = $1 \
                 AND state = 'idle in transaction'",
                &[&tenant],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Running `pg_sleep` statements of `tenant`'s pools, on any pod.
    async fn running_sleeps(&self, tenant: &str) -> i64 {
        self.pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE split_part(application_name, '/', 3) = $1 \
                 AND state = 'active' AND query LIKE '%pg_sleep%'",
                &[&tenant],
            )
            .await
            .unwrap()
            .get(0)
    }
}

async fn bounded(test: impl Future<Output = ()>) {
    tokio::time::timeout(TEST_LIMIT, test)
        .await
        .unwrap_or_else(|_| panic!("test took longer than {TEST_LIMIT:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn tenants_spread_over_pods_and_reads_are_tagged() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let tenants: Vec<String> = (0..5).map(|i| f.tenant(&format!("t{i}"))).collect();
        let mut owner = BTreeMap::new();
        for t in &tenants {
            let (pod, _) = f
                .ok(
                    "PUT",
                    &format!("/tenants/{t}/kv/greeting"),
                    &format!("hello {t}"),
                )
                .await;
            owner.insert(t.clone(), pod);
        }
        let used: BTreeSet<&String> = owner.values().collect();
        assert_eq!(
            used.len(),
            3,
            "round-robin puts five tenants on all three pods: {owner:?}"
        );
        for _ in 0..3 {
            for t in &tenants {
                let (pod, json) = f.ok("GET", &format!("/tenants/{t}/kv/greeting"), "").await;
                assert_eq!(pod, owner[t], "{t} is sticky to its pod");
                assert_eq!(json["value"], format!("hello {t}"));
            }
        }
        // the data lives in PostgreSQL, one schema per tenant
        for t in &tenants {
            let row =
                f.pg.query_one(
                    &format!("SELECT v FROM \"t_{t}\".kv WHERE k = 'greeting'"),
                    &[],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), format!("hello {t}"));
        }
        let r = f
            .call("GET", &format!("/tenants/{}/kv/missing", tenants[0]), "")
            .await;
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.pod.as_ref(), Some(&owner[&tenants[0]]));
        // malformed tenant ids are refused by the coordinator
        for bad in ["bad.id", "a%20b", &"x".repeat(65)] {
            let r = f.call("GET", &format!("/tenants/{bad}/kv/k"), "").await;
            assert_eq!(r.status, 400, "{bad}: {r:?}");
            assert_eq!(r.pod, None, "{bad} reached a pod");
        }
        // load = open connections, published by the heartbeat
        assert!(
            f.eventually(Duration::from_secs(5), async |f| {
                let r = f.call("GET", "/pods", "").await;
                r.json["pods"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|p| p["load"].as_i64() >= Some(1))
            })
            .await,
            "every pod publishes its open connections as load"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn transactions_commit_atomically_and_rollback_leaves_nothing() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let t = f.tenant("bank");
        let (home, _) = f.ok("PUT", &format!("/tenants/{t}/kv/seed"), "0").await;

        let (pod, begun) = f
            .ok("POST", &format!("/tenants/{t}/transactions"), "")
            .await;
        assert_eq!(pod, home);
        let lock = begun["lock"].as_str().unwrap().to_owned();
        assert_eq!(lock.len(), 32, "a 128-bit lock id");
        for (method, key, body) in [("PUT", "a", "1"), ("PUT", "b", "2"), ("DELETE", "seed", "")] {
            let (pod, _) = f
                .ok(method, &format!("/transactions/{lock}/kv/{key}"), body)
                .await;
            assert_eq!(pod, home, "every call of the transaction lands on its pod");
        }
        let (_, own) = f.ok("GET", &format!("/transactions/{lock}/kv/a"), "").await;
        assert_eq!(own["value"], "1", "the transaction sees its own writes");
        // nothing is visible outside before the commit
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/a"), "")
                .await
                .status,
            404
        );
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/b"), "")
                .await
                .status,
            404
        );
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/seed"), "")
                .await
                .value(),
            Some("0")
        );
        let (_, done) = f
            .ok("POST", &format!("/transactions/{lock}/commit"), "")
            .await;
        assert_eq!(done["committed"], true);
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/a"), "")
                .await
                .value(),
            Some("1")
        );
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/b"), "")
                .await
                .value(),
            Some("2")
        );
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/seed"), "")
                .await
                .status,
            404
        );
        let after = f
            .call("PUT", &format!("/transactions/{lock}/kv/c"), "3")
            .await;
        assert_eq!(
            after.status, 404,
            "a committed transaction's lock is gone: {after:?}"
        );

        // rollback
        let (_, begun) = f
            .ok("POST", &format!("/tenants/{t}/transactions"), "")
            .await;
        let lock = begun["lock"].as_str().unwrap().to_owned();
        f.ok("PUT", &format!("/transactions/{lock}/kv/x"), "9")
            .await;
        f.ok("PUT", &format!("/transactions/{lock}/kv/a"), "changed")
            .await;
        let (_, done) = f
            .ok("POST", &format!("/transactions/{lock}/rollback"), "")
            .await;
        assert_eq!(done["rolled_back"], true);
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/x"), "")
                .await
                .status,
            404
        );
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/a"), "")
                .await
                .value(),
            Some("1")
        );
        assert_eq!(
            f.call("GET", &format!("/transactions/{lock}/kv/x"), "")
                .await
                .status,
            404
        );
        // malformed lock ids never reach Valkey or a pod
        let r = f.call("GET", "/transactions/not-a-lock/kv/x", "").await;
        assert_eq!((r.status, r.pod), (400, None));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn forgotten_transactions_are_rolled_back() {
    bounded(async {
        let f = Fleet::start(Opts {
            tx_idle_timeout_ms: 1_000,
            tx_max_lifetime_ms: 3_000,
            ..Opts::default()
        })
        .await;
        // idle: left alone, rolled back after the idle timeout
        let t = f.tenant("idle");
        let (_, begun) = f
            .ok("POST", &format!("/tenants/{t}/transactions"), "")
            .await;
        let lock = begun["lock"].as_str().unwrap().to_owned();
        f.ok("PUT", &format!("/transactions/{lock}/kv/k"), "v")
            .await;
        assert_eq!(f.idle_in_transaction(&t).await, 1);
        // watch PostgreSQL, not the transaction (a call would keep it alive)
        assert!(
            f.eventually(Duration::from_secs(10), async |f| f
                .idle_in_transaction(&t)
                .await
                == 0)
                .await,
            "an idle transaction is rolled back"
        );
        let r = f
            .call("GET", &format!("/transactions/{lock}/kv/k"), "")
            .await;
        assert_eq!(r.status, 404, "its lock is released: {r:?}");
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/k"), "")
                .await
                .status,
            404
        );

        // busy but too long: rolled back after the max lifetime
        let t = f.tenant("long");
        let (_, begun) = f
            .ok("POST", &format!("/tenants/{t}/transactions"), "")
            .await;
        let lock = begun["lock"].as_str().unwrap().to_owned();
        let began = Instant::now();
        loop {
            let r = f
                .call("PUT", &format!("/transactions/{lock}/kv/k"), "v")
                .await;
            if r.status == 404 {
                break;
            }
            assert_eq!(r.status, 200, "{r:?}");
            assert!(
                began.elapsed() < Duration::from_secs(15),
                "never rolled back"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            f.call("GET", &format!("/tenants/{t}/kv/k"), "")
                .await
                .status,
            404
        );
        assert_eq!(f.idle_in_transaction(&t).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn killed_pod_fails_over_keeping_data() {
    bounded(async {
        let mut f = Fleet::start(Opts::default()).await;
        let tenants: Vec<String> = (0..5).map(|i| f.tenant(&format!("t{i}"))).collect();
        let mut owner = BTreeMap::new();
        for t in &tenants {
            let (pod, _) = f
                .ok("PUT", &format!("/tenants/{t}/kv/k"), &format!("v-{t}"))
                .await;
            owner.insert(t.clone(), pod);
        }
        let victim = owner[&tenants[0]].clone();
        let orphans: Vec<&String> = tenants.iter().filter(|t| owner[*t] == victim).collect();
        let (pod, begun) = f
            .ok("POST", &format!("/tenants/{}/transactions", tenants[0]), "")
            .await;
        assert_eq!(pod, victim);
        let lock = begun["lock"].as_str().unwrap().to_owned();
        f.ok("PUT", &format!("/transactions/{lock}/kv/uncommitted"), "x")
            .await;

        f.procs.kill(&victim);

        // the open transaction fails cleanly: an error status, no hang
        let r = f
            .call("PUT", &format!("/transactions/{lock}/kv/more"), "y")
            .await;
        assert!([404, 502, 503].contains(&r.status), "{r:?}");
        // its member record expires
        assert!(
            f.eventually(Duration::from_secs(10), async |f| !f
                .live_pods()
                .await
                .contains(&victim))
                .await,
            "the killed pod's member record expires"
        );
        // its tenants move on their next request, with their data
        for t in &orphans {
            let (pod, json) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
            assert_ne!(pod, victim);
            assert_eq!(json["value"], format!("v-{t}"));
            let (again, _) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
            assert_eq!(again, pod, "{t} sticks to its new pod");
        }
        for t in tenants.iter().filter(|t| owner[*t] != victim) {
            let (pod, _) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
            assert_eq!(pod, owner[t], "other tenants stay where they were");
        }
        // the lost transaction left nothing and keeps failing cleanly
        let r = f
            .call("GET", &format!("/transactions/{lock}/kv/uncommitted"), "")
            .await;
        assert!([404, 502, 503].contains(&r.status), "{r:?}");
        assert_eq!(
            f.call(
                "GET",
                &format!("/tenants/{}/kv/uncommitted", tenants[0]),
                ""
            )
            .await
            .status,
            404
        );
        // ... and the caller retries it on the tenant's new pod
        let (pod, begun) = f
            .ok("POST", &format!("/tenants/{}/transactions", tenants[0]), "")
            .await;
        assert_ne!(pod, victim);
        let lock = begun["lock"].as_str().unwrap().to_owned();
        f.ok("PUT", &format!("/transactions/{lock}/kv/uncommitted"), "x")
            .await;
        f.ok("POST", &format!("/transactions/{lock}/commit"), "")
            .await;
        let (_, json) = f
            .ok(
                "GET",
                &format!("/tenants/{}/kv/uncommitted", tenants[0]),
                "",
            )
            .await;
        assert_eq!(json["value"], "x");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn client_disconnect_cancels_the_running_query() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let t = f.tenant("slow");
        f.ok("PUT", &format!("/tenants/{t}/kv/warm"), "up").await;
        let addr = f.coordinator.trim_start_matches("http://").to_owned();
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(
                format!("GET /tenants/{t}/sleep/60 HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        assert!(
            f.eventually(Duration::from_secs(10), async |f| f
                .running_sleeps(&t)
                .await
                == 1)
                .await,
            "the slow query runs on the server"
        );
        drop(stream);
        assert!(
            f.eventually(Duration::from_secs(5), async |f| f.running_sleeps(&t).await
                == 0)
                .await,
            "the query is cancelled on the server once the client is gone"
        );
        // the tenant still works
        let (pod, _) = f.ok("GET", &format!("/tenants/{t}/kv/warm"), "").await;

        // the coordinator's cancel message, straight to the pod: the call
        // answers 499 and its query is cancelled on the server
        let pod_url = f.pod_urls[f.pods.iter().position(|p| *p == pod).unwrap()].clone();
        let id = coordinator::RequestId::generate();
        let req = axum::http::Request::builder()
            .uri(format!("{pod_url}/destinations/{t}/sleep/60"))
            .header(coordinator::http::REQUEST_ID_HEADER, id.as_str())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let call = tokio::spawn(f.http.request(req));
        assert!(
            f.eventually(Duration::from_secs(10), async |f| f
                .running_sleeps(&t)
                .await
                == 1)
                .await,
            "the slow query runs on the server"
        );
        let cancel = f
            .raw("POST", &format!("{pod_url}/_coordinator/cancel/{id}"), "")
            .await
            .unwrap();
        assert_eq!(cancel.status, 204, "the pod knew the call: {cancel:?}");
        let answered = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the cancelled call answers")
            .unwrap()
            .unwrap();
        assert_eq!(answered.status().as_u16(), 499);
        assert!(
            f.eventually(Duration::from_secs(5), async |f| f.running_sleeps(&t).await
                == 0)
                .await,
            "the query is cancelled on the server by the cancel message"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn saturated_tenant_fans_out_to_a_second_pod() {
    bounded(async {
        let f = Fleet::start(Opts {
            pool_size: 2,
            queue_threshold_ms: 200,
            cache_ttl_ms: 300,
            ..Opts::default()
        })
        .await;
        let t = f.tenant("busy");
        let (home, _) = f.ok("PUT", &format!("/tenants/{t}/kv/k"), "v").await;
        let mut seen = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(40);
        // waves of 12 concurrent slow calls on a pool of 2
        while seen.len() < 2 {
            assert!(Instant::now() < deadline, "never fanned out: {seen:?}");
            let path = format!("/tenants/{t}/sleep/0.5");
            let calls = (0..12).map(|_| f.ok("GET", &path, ""));
            for (pod, _) in futures::future::join_all(calls).await {
                seen.insert(pod);
            }
        }
        assert!(
            seen.contains(&home),
            "the first pod keeps serving: {seen:?}"
        );
        // both pods serve plain calls too
        let mut served = BTreeSet::new();
        for _ in 0..10 {
            served.insert(f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await.0);
        }
        // (a fanned-out pod may itself saturate and fan out further)
        assert!(
            served.len() >= 2,
            "several pods serve the tenant: {served:?}"
        );
        assert!(
            served.contains(&home),
            "the first pod still serves: {served:?}"
        );
    })
    .await;
}
