//! The test harness: a fleet of real `pg-pod` and `pg-coordinator`
//! processes, each on the port it bound itself (`--listen 127.0.0.1:0`,
//! read back from its log), a fresh Valkey key prefix and fresh tenant ids,
//! every process killed when the fleet is dropped; and the calls the tests
//! make through it.

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

/// Upper bound of every test.
const TEST_LIMIT: Duration = Duration::from_secs(120);
/// Upper bound of one HTTP call.
const CALL_LIMIT: Duration = Duration::from_secs(30);

pub(crate) fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `cargo xtask test-drivers --engine pg-example`")
    })
}

pub(crate) fn random_hex() -> String {
    coordinator::RequestId::generate().as_str()[..12].to_owned()
}

/// `text` without terminal colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Settings of one fleet.
#[derive(Clone, Copy)]
pub(crate) struct Opts {
    pub(crate) pool_size: usize,
    pub(crate) queue_threshold_ms: u64,
    pub(crate) tx_idle_timeout_ms: u64,
    pub(crate) tx_max_lifetime_ms: u64,
    pub(crate) cache_ttl_ms: u64,
    pub(crate) max_tenant_pools: usize,
    /// `pg-coordinator --strategy`.
    pub(crate) strategy: &'static str,
    /// How many `pg-coordinator` processes share the fleet's Valkey prefix.
    pub(crate) coordinators: usize,
    /// `pg-coordinator --fleet-load-period-ms`.
    pub(crate) fleet_load_period_ms: u64,
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
            strategy: "round-robin",
            coordinators: 1,
            fleet_load_period_ms: 200,
        }
    }
}

/// Every process a test started; all are killed on drop (also on panic,
/// when the tail of each log is printed).
pub(crate) struct Procs {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Procs {
    /// Where the processes' logs (and the tests' artifacts) go.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

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
    pub(crate) fn kill(&mut self, name: &str) {
        let (_, child) = self
            .children
            .iter_mut()
            .find(|(n, _)| n == name)
            .expect("no such process");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// The address child `name` bound, from the `key=` field of its log
    /// line containing `marker`.
    ///
    /// The children bind port 0 themselves: a port picked by the test and
    /// handed on can be taken by anything in between (one CI run saw a pod
    /// exit with "address in use").
    fn bound_address(&mut self, name: &str, marker: &str, key: &str) -> String {
        let path = self.dir.join(format!("{name}.log"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = strip_ansi(&std::fs::read_to_string(&path).unwrap_or_default());
            let found = log.lines().filter(|l| l.contains(marker)).find_map(|l| {
                let at = l.find(key)? + key.len();
                l[at..].split_whitespace().next().map(str::to_owned)
            });
            if let Some(address) = found {
                return address.trim_start_matches("http://").to_owned();
            }
            if let Some(exit) = self.exited() {
                panic!("{exit} before it served:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not log {marker:?} within 60 s:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
pub(crate) struct Resp {
    pub(crate) status: u16,
    /// The `x-pod-id` header.
    pub(crate) pod: Option<String>,
    pub(crate) json: Value,
}

impl Resp {
    pub(crate) fn body_pod(&self) -> Option<&str> {
        self.json.get("pod").and_then(Value::as_str)
    }
    pub(crate) fn value(&self) -> Option<&str> {
        self.json.get("value").and_then(Value::as_str)
    }
}

/// Three pods and `Opts::coordinators` coordinators.
pub(crate) struct Fleet {
    pub(crate) procs: Procs,
    /// `http://127.0.0.1:<port>` of the first coordinator.
    pub(crate) coordinator: String,
    /// Every coordinator's base URL (the first is `coordinator`).
    pub(crate) coordinators: Vec<String>,
    pub(crate) pods: Vec<String>,
    /// `http://127.0.0.1:<port>` of each pod, in the order of `pods`.
    pub(crate) pod_urls: Vec<String>,
    pub(crate) http: Client<HttpConnector, Full<Bytes>>,
    /// Prefix of this fleet's tenant ids.
    pub(crate) tag: String,
    /// This fleet's Valkey key prefix.
    pub(crate) prefix: String,
    pub(crate) pg: tokio_postgres::Client,
}

fn args(pairs: &[(&str, String)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| [format!("--{k}"), v.clone()])
        .collect()
}

impl Fleet {
    pub(crate) async fn start(opts: Opts) -> Fleet {
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
        let mut pod_urls = Vec::new();
        for i in 1..=3 {
            let id = format!("pod-{i}");
            let args = args(&[
                ("valkey-url", valkey_url.clone()),
                ("pg-url", pg_url.clone()),
                ("listen", "127.0.0.1:0".into()),
                ("pod-id", id.clone()),
                ("prefix", prefix.clone()),
                ("pool-size", opts.pool_size.to_string()),
                ("member-ttl-ms", "2000".into()),
                ("heartbeat-ms", "400".into()),
                ("lock-ttl-ms", "3000".into()),
                ("queue-threshold-ms", opts.queue_threshold_ms.to_string()),
                ("tx-idle-timeout-ms", opts.tx_idle_timeout_ms.to_string()),
                ("tx-max-lifetime-ms", opts.tx_max_lifetime_ms.to_string()),
                ("max-tenant-pools", opts.max_tenant_pools.to_string()),
                // `local` switches the broadcast between pods off (the
                // live tests must fail then)
                (
                    "events",
                    std::env::var("PG_EXAMPLE_EVENTS").unwrap_or_else(|_| "cluster".into()),
                ),
            ]);
            procs.spawn(&id, env!("CARGO_BIN_EXE_pg-pod"), &args);
            pods.push(id);
        }
        for id in &pods {
            let bound = procs.bound_address(id, "pod serving", "bound=");
            pod_urls.push(format!("http://{bound}"));
        }
        let mut coordinators = Vec::new();
        for i in 1..=opts.coordinators {
            let args = args(&[
                ("valkey-url", valkey_url.clone()),
                ("listen", "127.0.0.1:0".into()),
                ("prefix", prefix.clone()),
                ("strategy", opts.strategy.into()),
                ("cache-ttl-ms", opts.cache_ttl_ms.to_string()),
                (
                    "fleet-load-period-ms",
                    opts.fleet_load_period_ms.to_string(),
                ),
            ]);
            let name = match i {
                1 => "coordinator".to_owned(),
                _ => format!("coordinator-{i}"),
            };
            procs.spawn(&name, env!("CARGO_BIN_EXE_pg-coordinator"), &args);
            let bound = procs.bound_address(&name, "coordinator serving", "listen=");
            coordinators.push(format!("http://{bound}"));
        }
        let (pg, conn) = tokio_postgres::connect(&pg_url, tokio_postgres::NoTls)
            .await
            .expect("cannot connect to PG_URL");
        tokio::spawn(conn);
        let mut fleet = Fleet {
            procs,
            coordinator: coordinators[0].clone(),
            coordinators,
            pods,
            pod_urls,
            http: Client::builder(TokioExecutor::new()).build_http(),
            tag,
            prefix,
            pg,
        };
        // ready: every process answers, and every coordinator sees all pods
        let urls: Vec<String> = fleet
            .pod_urls
            .iter()
            .chain(&fleet.coordinators)
            .map(|base| format!("{base}/healthz"))
            .collect();
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
        // a child that could not bind has exited, and whoever holds its
        // port answered for it: say so rather than wait for the pod list
        if let Some(exit) = fleet.procs.exited() {
            panic!("{exit} after its address answered (port taken by another process?)");
        }
        let want: BTreeSet<String> = fleet.pods.iter().cloned().collect();
        for via in fleet.coordinators.clone() {
            // Generous: nine fleets start at once on two cores in CI (one
            // CI run of 557 saw 30 s pass before every pod was listed).
            assert!(
                fleet
                    .eventually(Duration::from_secs(90), async |f| f
                        .live_pods_via(&via)
                        .await
                        == want)
                    .await,
                "{via} does not list every pod (listed: {:?}, want {want:?})",
                fleet.live_pods_via(&via).await
            );
        }
        fleet
    }

    pub(crate) fn tenant(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    /// `count` fresh tenant ids `{name}0..`.
    pub(crate) fn tenants(&self, name: &str, count: usize) -> Vec<String> {
        (0..count)
            .map(|i| self.tenant(&format!("{name}{i}")))
            .collect()
    }

    pub(crate) async fn raw(&self, method: &str, url: &str, body: &str) -> Option<Resp> {
        self.raw_with(method, url, body, &[]).await
    }

    /// A call with extra `headers`; `None` when the connection failed.
    pub(crate) async fn raw_with(
        &self,
        method: &str,
        url: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Option<Resp> {
        let mut req = axum::http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
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

    /// A call through the first coordinator.
    pub(crate) async fn call(&self, method: &str, path: &str, body: &str) -> Resp {
        self.call_via(&self.coordinator, method, path, body).await
    }

    /// A call through the coordinator at `via`.
    pub(crate) async fn call_via(&self, via: &str, method: &str, path: &str, body: &str) -> Resp {
        let url = format!("{via}{path}");
        self.raw(method, &url, body)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: connection to {via} failed"))
    }

    /// The status of a call through the first coordinator.
    pub(crate) async fn status(&self, method: &str, path: &str, body: &str) -> u16 {
        self.call(method, path, body).await.status
    }

    /// The value `GET {path}` answers (`None`: not found or an error).
    pub(crate) async fn value_at(&self, path: &str) -> Option<String> {
        self.call("GET", path, "").await.value().map(str::to_owned)
    }

    /// A tenant call that must succeed and be tagged consistently; returns
    /// the serving pod and the JSON.
    pub(crate) async fn ok(&self, method: &str, path: &str, body: &str) -> (String, Value) {
        self.ok_via(&self.coordinator, method, path, body).await
    }

    /// [`Fleet::ok`] through the coordinator at `via`.
    pub(crate) async fn ok_via(
        &self,
        via: &str,
        method: &str,
        path: &str,
        body: &str,
    ) -> (String, Value) {
        let r = self.call_via(via, method, path, body).await;
        assert!(
            (200..300).contains(&r.status),
            "{via} {method} {path}: {r:?}"
        );
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

    /// Begins a transaction of `tenant`: its pod and lock id.
    pub(crate) async fn begin(&self, tenant: &str) -> (String, String) {
        let (pod, begun) = self
            .ok("POST", &format!("/tenants/{tenant}/transactions"), "")
            .await;
        (pod, begun["lock"].as_str().unwrap().to_owned())
    }

    /// First touch of each of `tenants` (`PUT kv/k`); the serving pods.
    pub(crate) async fn touch(&self, tenants: &[String]) -> BTreeMap<String, String> {
        let mut owner = BTreeMap::new();
        for t in tenants {
            let (pod, _) = self
                .ok("PUT", &format!("/tenants/{t}/kv/k"), &format!("v-{t}"))
                .await;
            owner.insert(t.clone(), pod);
        }
        owner
    }

    /// Waits until no coordinator lists `pod` (its member record expired).
    pub(crate) async fn delisted(&self, pod: &str) {
        for via in &self.coordinators {
            assert!(
                self.eventually(Duration::from_secs(10), async |f| !f
                    .live_pods_via(via)
                    .await
                    .contains(pod))
                    .await,
                "{via} still lists the killed pod {pod}"
            );
        }
    }

    pub(crate) async fn live_pods_via(&self, via: &str) -> BTreeSet<String> {
        self.pod_loads_via(via).await.into_keys().collect()
    }

    /// `GET /pods` through `via`: each live pod's published load.
    pub(crate) async fn pod_loads_via(&self, via: &str) -> BTreeMap<String, i64> {
        let r = self.call_via(via, "GET", "/pods", "").await;
        assert_eq!(r.status, 200, "{r:?}");
        r.json["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let load = p["load"].as_i64().unwrap();
                (p["id"].as_str().unwrap().to_owned(), load)
            })
            .collect()
    }

    pub(crate) async fn eventually(
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
    pub(crate) async fn idle_in_transaction(&self, tenant: &str) -> i64 {
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
    pub(crate) async fn running_sleeps(&self, tenant: &str) -> i64 {
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

    /// Waits up to `within` until `tenant` runs exactly `n` `pg_sleep`s.
    pub(crate) async fn sleeps_become(&self, tenant: &str, n: i64, within: Duration) -> bool {
        self.eventually(within, async |f| f.running_sleeps(tenant).await == n)
            .await
    }

    /// The pods holding PostgreSQL connections for `tenant` (its pools),
    /// read from `pg_stat_activity` (`application_name` is
    /// `pg-tenants/<pod>/<tenant>`).
    pub(crate) async fn pods_with_pools(&self, tenant: &str) -> BTreeSet<String> {
        self.pg
            .query(
                "SELECT DISTINCT split_part(application_name, '/', 2) FROM pg_stat_activity \
                 WHERE application_name LIKE 'pg-tenants/%' \
                 AND split_part(application_name, '/', 3) = $1",
                &[&tenant],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

pub(crate) async fn bounded(test: impl Future<Output = ()>) {
    tokio::time::timeout(TEST_LIMIT, test)
        .await
        .unwrap_or_else(|_| panic!("test took longer than {TEST_LIMIT:?}"));
}
