//! The engines the network drivers are tested against, and how each is
//! started as a local process when no endpoint is given.

mod cassandra;
mod cassandra3;

pub(crate) use cassandra3::{node_faults, topology_changes};
mod dynamodb;
mod etcd;
mod etcd3;
pub(crate) use etcd3::membership_changes;
pub(crate) mod failover;
mod kube;
pub(crate) use kube::build_command as build_kube_apiserver;
mod pgbouncer;
mod postgres;
mod postgres_ha;
pub(crate) mod server_clock;
mod tls;
mod valkey;
mod valkey_sentinel;

use std::{
    any::Any,
    path::{Path, PathBuf},
    process::Child,
    time::{Duration, Instant},
};

/// A running engine (or an external one named by an environment variable).
pub(crate) struct Started {
    /// Environment variables that point the suites at this engine.
    pub(crate) env: Vec<(String, String)>,
    /// The local processes we started, killed on drop; empty for an external endpoint.
    children: Vec<Child>,
    /// Guards dropped before the children are killed (e.g. one that runs
    /// `pg_ctl stop` for a server that forks its own processes).
    guards: Vec<Box<dyn Any>>,
}

impl Started {
    /// An engine we started ourselves; the child is killed when this is dropped.
    pub(crate) fn local(child: Child, env: Vec<(String, String)>) -> Self {
        Self::local_many(vec![child], env)
    }

    /// Several processes we started; all are killed when this is dropped.
    pub(crate) fn local_many(children: Vec<Child>, env: Vec<(String, String)>) -> Self {
        Started {
            env,
            children,
            guards: Vec::new(),
        }
    }

    /// An engine somebody else runs.
    pub(crate) fn external(env: Vec<(String, String)>) -> Self {
        Self::local_many(Vec::new(), env)
    }

    /// Also drops `guard` when this is dropped, before killing the children.
    pub(crate) fn with_guard(mut self, guard: impl Any) -> Self {
        self.guards.push(Box::new(guard));
        self
    }

    /// The guard of type `T` added by [`Started::with_guard`], if any.
    pub(crate) fn guard_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.guards.iter_mut().find_map(|g| g.downcast_mut::<T>())
    }

    /// The process ids of the processes we started (none for an external
    /// endpoint): whose CPU a benchmark reports as the store's.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Both engines as one: the union of their variables, processes and guards.
    pub(crate) fn merge(mut self, mut other: Started) -> Self {
        self.env.append(&mut other.env);
        self.children.append(&mut other.children);
        self.guards.append(&mut other.guards);
        self
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.guards.clear();
        for child in &mut self.children {
            kill_tree(child);
        }
    }
}

/// How the engines' processes are started: no standard input, both outputs
/// to the engine's log file.
pub(crate) trait LogTo {
    /// No standard input; standard output and error appended to `log`.
    fn log_to(&mut self, log: std::fs::File) -> std::io::Result<&mut Self>;
}

impl LogTo for std::process::Command {
    fn log_to(&mut self, log: std::fs::File) -> std::io::Result<&mut Self> {
        use std::process::Stdio;
        Ok(self
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log)))
    }
}

/// Kills a child and waits for it, so no engine outlives the xtask.
pub(crate) fn kill_tree(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// One engine and the suites that run against it.
pub(crate) struct Engine {
    /// Short name used on the command line and in the summary.
    pub(crate) name: &'static str,
    /// If this variable is set, the engine is external: no process is started.
    pub(crate) endpoint_var: &'static str,
    /// Variables the suites read the endpoint from, when they are not
    /// `endpoint_var` itself: an external endpoint is passed under these
    /// names too (e.g. `SCYLLA_CLUSTER_URI` reaches the suites as `SCYLLA_URI`).
    pub(crate) endpoint_aliases: &'static [&'static str],
    /// Extra variables passed through from the environment with an external endpoint.
    pub(crate) passthrough_vars: &'static [&'static str],
    /// Provisions and starts the engine as a local process under `work_dir`.
    pub(crate) start: fn(work_dir: &Path) -> anyhow::Result<Started>,
    /// `(package, test target)` pairs run with `--ignored` against the engine.
    pub(crate) suites: &'static [(&'static str, &'static str)],
    /// Whether `test-drivers` without `--engine` runs it.
    pub(crate) default: bool,
    /// A second round: break the started engine, then run the suites again.
    pub(crate) degraded: Option<Degraded>,
}

impl Engine {
    /// The external endpoint named by `endpoint_var`, if set and not empty:
    /// its variables for the suites (the endpoint under `endpoint_var` and
    /// each of `endpoint_aliases`, plus the `passthrough_vars` that are set).
    pub(crate) fn external(&self) -> Option<Started> {
        let endpoint = std::env::var(self.endpoint_var)
            .ok()
            .filter(|e| !e.is_empty())?;
        Some(Started::external(
            self.external_env(&endpoint, |var| std::env::var(var).ok()),
        ))
    }

    /// The variables for an external `endpoint`; `lookup` reads the
    /// passthrough variables.
    fn external_env(
        &self,
        endpoint: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Vec<(String, String)> {
        let mut env = vec![(self.endpoint_var.to_string(), endpoint.to_string())];
        for alias in self.endpoint_aliases {
            env.push((alias.to_string(), endpoint.to_string()));
        }
        for var in self.passthrough_vars {
            if let Some(value) = lookup(var) {
                env.push((var.to_string(), value));
            }
        }
        env
    }
}

/// Breaks a running engine (e.g. kills one node) for a second round of
/// the suites, reported under its own name.
pub(crate) struct Degraded {
    /// Name of the second round in the summary.
    pub(crate) name: &'static str,
    /// Breaks the engine; only applied to engines we started ourselves.
    pub(crate) apply: fn(&mut Started) -> anyhow::Result<()>,
}

/// Every engine the project tests against, in the order they run.
pub(crate) fn all() -> Vec<Engine> {
    vec![
        Engine {
            name: "mem-real-time",
            endpoint_var: "MEM_REAL_TIME_UNUSED",
            endpoint_aliases: &[],
            passthrough_vars: &[],
            start: start_in_process,
            suites: &[("storage-mem", "suite_real_time")],
            default: true,
            degraded: None,
        },
        Engine {
            name: "redb",
            endpoint_var: "REDB_UNUSED",
            endpoint_aliases: &[],
            passthrough_vars: &[],
            start: start_in_process,
            suites: &[("storage-redb", "suite")],
            default: true,
            degraded: None,
        },
        Engine {
            name: "cassandra",
            endpoint_var: "SCYLLA_URI",
            endpoint_aliases: &[],
            passthrough_vars: &[],
            start: cassandra::start,
            // The storage-cassandra suite includes the fence suite.
            suites: &[("storage-cassandra", "suite"), ("vvm-host", "failover")],
            default: true,
            degraded: None,
        },
        Engine {
            name: "cassandra-3",
            endpoint_var: "SCYLLA_CLUSTER_URI",
            // The storage-cassandra suites read SCYLLA_URI.
            endpoint_aliases: &["SCYLLA_URI"],
            passthrough_vars: &[],
            start: cassandra3::start,
            // The cluster test first: its schema creation and LWTs also warm
            // up a freshly started cluster for the timing-sensitive suite.
            suites: &[
                ("storage-cassandra", "cluster"),
                ("storage-cassandra", "suite"),
            ],
            // In the default list (CI): 85-98 s of wall time on 2 cores
            // (cluster start 16-24 s, rows 31-41 s each; 3 runs in a row 106/0).
            default: true,
            degraded: Some(Degraded {
                name: "cassandra-3-degraded",
                apply: cassandra3::degrade,
            }),
        },
        Engine {
            name: "dynamodb",
            endpoint_var: "DYNAMODB_ENDPOINT",
            endpoint_aliases: &[],
            passthrough_vars: &["AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
            start: dynamodb::start,
            // The storage-dynamodb suite includes the fence suite.
            suites: &[("storage-dynamodb", "suite")],
            default: true,
            degraded: None,
        },
        Engine {
            name: "valkey",
            endpoint_var: "VALKEY_URL",
            endpoint_aliases: &[],
            passthrough_vars: &["VALKEY_TLS_URL"],
            start: start_valkey_with_tls,
            suites: &[
                ("coordinator", "registry"),
                ("coordinator", "http"),
                ("coordinator", "metrics"),
                ("coordinator-events", "cluster"),
                ("coordinator-events", "metrics"),
                ("storage-valkey", "suite"),
                ("vvm-host", "watch"),
            ],
            default: true,
            degraded: None,
        },
        Engine {
            name: "valkey-sentinel",
            endpoint_var: "VALKEY_SENTINEL_URL",
            // The storage-valkey suite reads VALKEY_URL.
            endpoint_aliases: &["VALKEY_URL"],
            passthrough_vars: &["VALKEY_PRIMARY_URL", "VALKEY_TLS_URL", "VALKEY_REPLICAS"],
            start: valkey_sentinel::start,
            suites: &[("storage-valkey", "suite")],
            default: true,
            degraded: Some(Degraded {
                name: "valkey-sentinel-failover",
                apply: valkey_sentinel::fail_over,
            }),
        },
        Engine {
            name: "postgres",
            endpoint_var: "POSTGRES_URL",
            endpoint_aliases: &[],
            passthrough_vars: &["POSTGRES_TLS_URL"],
            start: postgres::start_with_password,
            // vvm-host's read-only case: `status` with a role that may only
            // SELECT; `status --watch` on the store's notifications.
            suites: &[
                ("storage-postgres", "suite"),
                ("vvm-host", "read_only"),
                ("vvm-host", "watch"),
            ],
            default: true,
            degraded: None,
        },
        Engine {
            name: "postgres-pgbouncer",
            endpoint_var: "POSTGRES_PGBOUNCER_URL",
            // The storage-postgres suite reads POSTGRES_URL.
            endpoint_aliases: &["POSTGRES_URL"],
            passthrough_vars: &[
                "POSTGRES_TLS_URL",
                "POSTGRES_PGBOUNCER_TRANSACTION_URL",
                "POSTGRES_PGBOUNCER_STATEMENT_URL",
                "POSTGRES_PGBOUNCER_STRICT_URL",
                "POSTGRES_DIRECT_URL",
            ],
            start: pgbouncer::start,
            // The whole suite through PgBouncer in session mode, then the
            // refusals of transaction and statement mode and of a PgBouncer
            // that rejects the startup parameter `options`.
            suites: &[
                ("storage-postgres", "suite"),
                ("storage-postgres", "pooler"),
            ],
            default: true,
            degraded: None,
        },
        Engine {
            name: "postgres-ha",
            endpoint_var: "POSTGRES_HA_URL",
            // The storage-postgres suite reads POSTGRES_URL.
            endpoint_aliases: &["POSTGRES_URL"],
            passthrough_vars: &["POSTGRES_TLS_URL", "POSTGRES_STANDBYS"],
            start: postgres_ha::start,
            suites: &[("storage-postgres", "suite")],
            default: true,
            degraded: Some(Degraded {
                name: "postgres-ha-promoted",
                apply: postgres_ha::promote,
            }),
        },
        Engine {
            name: "etcd",
            endpoint_var: "ETCD_URL",
            endpoint_aliases: &[],
            passthrough_vars: &["ETCD_TLS_URL"],
            start: etcd::start,
            suites: &[("storage-etcd", "suite"), ("vvm-host", "watch")],
            default: true,
            degraded: None,
        },
        Engine {
            name: "etcd-3",
            endpoint_var: "ETCD_CLUSTER_URL",
            // The storage-etcd suite reads ETCD_URL.
            endpoint_aliases: &["ETCD_URL"],
            passthrough_vars: &["ETCD_TLS_URL"],
            start: etcd3::start,
            suites: &[("storage-etcd", "suite")],
            default: true,
            degraded: Some(Degraded {
                name: "etcd-3-degraded",
                apply: etcd3::degrade,
            }),
        },
        Engine {
            name: "kube",
            endpoint_var: "KUBE_URL",
            endpoint_aliases: &[],
            passthrough_vars: &[
                "KUBE_KUBECONFIG",
                "KUBECONFIG",
                "KUBE_SERVER",
                "KUBE_CA_FILE",
                "KUBE_TOKEN_FILE",
            ],
            start: kube::start,
            // A lone kube-apiserver (built from source with Go once per
            // target dir: cold 3.5-7.5 min, CI starts it early in the
            // background) on a lone etcd. The storage-kube suite includes
            // the fence suite; vvm-host's `kube` case runs the failover
            // scenario with `--storage kube://default` (`KUBECONFIG`).
            suites: &[("storage-kube", "suite"), ("vvm-host", "kube")],
            default: true,
            degraded: None,
        },
        Engine {
            name: "pg-example",
            endpoint_var: "PG_URL",
            endpoint_aliases: &[],
            passthrough_vars: &["VALKEY_URL"],
            start: start_pg_example,
            suites: &[("pg-tenants", "e2e")],
            default: true,
            degraded: None,
        },
    ]
}

/// Valkey (or Redis) from the system's packages, as a local process.
fn start_valkey(work_dir: &Path) -> anyhow::Result<Started> {
    let (child, url, _) = valkey::start(work_dir, false)?;
    Ok(Started::local(child, vec![("VALKEY_URL".to_string(), url)]))
}

/// The same, also listening with TLS (`VALKEY_TLS_URL`, for storage-valkey).
fn start_valkey_with_tls(work_dir: &Path) -> anyhow::Result<Started> {
    let (child, url, tls_url) = valkey::start(work_dir, true)?;
    let mut env = vec![("VALKEY_URL".to_string(), url)];
    env.extend(tls_url.map(|u| ("VALKEY_TLS_URL".to_string(), u)));
    Ok(Started::local(child, env))
}

/// PostgreSQL and Valkey for the `pg-tenants` example's end-to-end test.
/// With an external `PG_URL`, `VALKEY_URL` must be set too.
fn start_pg_example(work_dir: &Path) -> anyhow::Result<Started> {
    let pg = postgres::start(work_dir)?;
    let valkey = start_valkey(work_dir)?;
    Ok(pg.merge(valkey))
}

/// The in-memory driver needs no server: its real-time run checks the
/// suite's real-time mode itself, the one the network drivers use.
fn start_in_process(_work_dir: &Path) -> anyhow::Result<Started> {
    Ok(Started::external(Vec::new()))
}

/// Where engines keep their downloads and data: `<target dir>/engines`.
pub(crate) fn work_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("engines")
}

/// The workspace root (the parent of this crate's directory).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Polls `ready` every 500 ms until it returns true or `limit` passes; fails
/// early if `child` exits. Readiness is a real query, never a sleep.
pub(crate) fn wait_ready(
    name: &str,
    child: &mut Child,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        if ready() {
            return Ok(started.elapsed());
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("{name} exited before it was ready ({status})");
        }
        if started.elapsed() > limit {
            anyhow::bail!("{name} was not ready after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A free TCP port on the loopback interface for a server to listen on,
/// never handed out twice by this process, and below the kernel's
/// ephemeral range.
///
/// A port from `bind(0)` is an ephemeral one: between its release here and
/// the server's own bind, any outgoing connection (a contender's, a
/// client's) may take it as its source port, and the server exits with
/// "address in use" (one CI run lost a Sentinel set's replica that way).
/// Ports below `ip_local_port_range` are never picked for outgoing
/// connections; the counter keeps this process's servers apart, and its
/// start (from the pid) keeps two processes apart most of the time; a
/// port something already listens on is skipped.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FLOOR: u32 = 10_000;
    let ceiling = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| *low > FLOOR + 1_000)
        .unwrap_or(32_768);
    let span = ceiling - FLOOR;
    let _ = NEXT.compare_exchange(
        0,
        std::process::id() % span + 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let port = FLOOR + NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port in {FLOOR}..{ceiling}")
}

/// What the container route (`crate::docker`) shares with the process
/// route: readiness probes, throwaway TLS certificates, credentials.
pub(crate) mod shared {
    pub(crate) use super::cassandra::{KEYSPACE as CASSANDRA_KEYSPACE, cql_ping};
    pub(crate) use super::dynamodb::list_tables;
    pub(crate) use super::etcd::healthy as etcd_healthy;
    pub(crate) use super::postgres::{PASSWORD as POSTGRES_PASSWORD, PASSWORD_IN_URL};
    pub(crate) use super::tls::{Certs as TlsCerts, generate as tls_certs};
    pub(crate) use super::valkey::ping as valkey_ping;
}

/// Runs the failovers of `engine` on `started` until `stop` says so.
pub(crate) fn run_failovers(
    engine: &str,
    started: &mut Started,
    hold: Duration,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> anyhow::Result<failover::FailoverReport> {
    match engine {
        "etcd-3" => etcd3::leader_faults(started, hold, gap, stop),
        "postgres-ha" => postgres_ha::primary_fault(started, gap, stop),
        "valkey-sentinel" | "valkey-sentinel-wait" => {
            valkey_sentinel::primary_faults(started, hold, gap, stop)
        }
        other => anyhow::bail!("{other} has no failover faults"),
    }
}

/// What one failover of `engine` (as [`run_failovers`] causes it, with the
/// engine's configured timings) can add to a takeover after a contender
/// is killed, with contenders on a lease of `lease`: zero for an engine
/// without failovers. Derivations in `docs/guarantees.md`, "Takeovers
/// across a failover".
pub(crate) fn failover_takeover_slack(engine: &str, lease: Duration) -> Duration {
    match engine {
        "etcd-3" => etcd3::failover_takeover_slack(lease),
        "valkey-sentinel" | "valkey-sentinel-wait" => valkey_sentinel::failover_takeover_slack(),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_cluster_endpoint_reaches_the_suites_as_scylla_uri() {
        let all = all();
        let cluster = all.iter().find(|e| e.name == "cassandra-3").unwrap();
        let env = cluster.external_env("scylla://h1,h2,h3/ks", |_| None);
        assert_eq!(
            env,
            [
                (
                    "SCYLLA_CLUSTER_URI".to_string(),
                    "scylla://h1,h2,h3/ks".to_string()
                ),
                ("SCYLLA_URI".to_string(), "scylla://h1,h2,h3/ks".to_string()),
            ]
        );
        let single = all.iter().find(|e| e.name == "cassandra").unwrap();
        assert_eq!(single.external_env("scylla://h", |_| None).len(), 1);
        let valkey = all.iter().find(|e| e.name == "valkey").unwrap();
        let env = valkey.external_env("redis://h", |var| Some(format!("{var}-value")));
        assert_eq!(
            env[1],
            (
                "VALKEY_TLS_URL".to_string(),
                "VALKEY_TLS_URL-value".to_string()
            )
        );
    }
}
