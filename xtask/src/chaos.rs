//! `cargo xtask chaos`: contender processes under faults against a real
//! engine (crate `chaos`): kills, pauses and partitions of the leader, with
//! fencing checked at a guarded resource. Exits non-zero on any violation.
//!
//! On `cassandra-3` (three nodes, replication factor 3) the contenders
//! connect straight to the cluster (`--direct`), and meanwhile single
//! nodes are SIGKILLed and restarted, SIGSTOPped and continued, and cut off
//! on their storage port with iptables, one at a time
//! ([`engines::node_faults`]).
//!
//! `--engine coordinator` is coordinator chaos (the chaos crate's
//! `chaos-fleet`): pod and coordinator processes of the `coordinator` crate
//! on one Valkey, pods killed (and restarted at their old address, every
//! other time under the same id after hanging), paused and cut from Valkey,
//! coordinators killed, destinations deregistered; one coordinator's Valkey
//! replies delayed in windows (its reads and the claims it sends on them
//! seconds apart) and another with an address policy that rejects one pod
//! slot; it fails when a destination was served by two pods at once.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context;

use crate::engines::{self, Started, server_clock};

/// Options of `chaos`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Engines to run against (default: every one the harness supports).
    #[arg(long = "engine", value_name = "NAME")]
    engines: Vec<String>,
    /// How long faults are injected, per engine (engines run one after
    /// another), e.g. `120s` or `3m`.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    duration: u64,
    /// Lease in whole seconds (default: 4, and 8 on cassandra-3; see
    /// `default_lease`).
    #[arg(long)]
    lease: Option<u64>,
    /// Contender processes.
    #[arg(long, default_value_t = 3)]
    contenders: usize,
    /// Negative control: the guarded resource accepts any token, so the run
    /// must report stale writes accepted and fail.
    #[arg(long)]
    unfenced: bool,
    /// Clock-rate fault: one contender slot runs under libfaketime at this
    /// rate of real time (`1.15`: 15 % fast; `0.77`: 1.3 times slower).
    #[arg(long)]
    clock_rate: Option<f64>,
    /// Server clock fault (valkey, postgres, etcd): the engine server runs
    /// with a movable wall clock (`engines::server_clock`) that the
    /// harness steps (`step:+30s`, `step:-30s`) or strobes (`strobe`,
    /// `strobe:30s`) mid-run; see `chaos::server_clock`.
    #[arg(long, value_name = "FAULT", value_parser = parse_server_clock)]
    server_clock: Option<String>,
    /// Topology changes instead of node faults (cassandra-3: a fourth node
    /// joins, then an original one is decommissioned; etcd-3: a member is
    /// removed and added back, the leader first).
    #[arg(long)]
    topology: bool,
}

/// The engines `--topology` runs on.
const TOPOLOGY: &[&str] = &["cassandra-3", "etcd-3"];

/// A `--server-clock` value, checked before any engine starts (the
/// harness parses it again).
fn parse_server_clock(text: &str) -> Result<String, String> {
    let valid = text == "strobe"
        || text.starts_with("strobe:")
        || text.starts_with("step:+")
        || text.starts_with("step:-");
    match valid {
        true => Ok(text.to_string()),
        false => Err(format!(
            "{text:?}: expected step:+<duration>, step:-<duration>, strobe or strobe:<duration>"
        )),
    }
}

/// `(chaos engine name, engines::all() entry, variable the engine sets)`.
const SUPPORTED: &[(&str, &str, &str)] = &[
    ("cassandra", "cassandra", "SCYLLA_URI"),
    ("dynamodb", "dynamodb", "DYNAMODB_ENDPOINT"),
    ("valkey", "valkey", "VALKEY_URL"),
    ("postgres", "postgres", "POSTGRES_URL"),
    ("etcd", "etcd", "ETCD_URL"),
    // Lease objects of a lone kube-apiserver; each contender's proxy
    // forwards to the `server=` of the URL (TLS passes through: the
    // certificate names 127.0.0.1, where the proxies listen).
    ("kube", "kube", "KUBE_URL"),
    ("cassandra-3", "cassandra-3", "SCYLLA_URI"),
    ("etcd-3", "etcd-3", "ETCD_URL"),
    ("postgres-ha", "postgres-ha", "POSTGRES_URL"),
    ("valkey-sentinel", "valkey-sentinel", "VALKEY_URL"),
    // The same, each write confirmed by the replica (`WAIT 1`).
    ("valkey-sentinel-wait", "valkey-sentinel", "VALKEY_URL"),
    // Coordinator chaos: pods and coordinators on one Valkey (`chaos-fleet`).
    ("coordinator", "valkey", "VALKEY_URL"),
];

/// Engines whose leader member or primary is SIGKILLed and failed over
/// during the run ([`engines::failover`]); contenders connect directly.
const FAILOVER: &[&str] = &[
    "etcd-3",
    "postgres-ha",
    "valkey-sentinel",
    "valkey-sentinel-wait",
];

/// `valkey-sentinel-wait`'s durability setting.
const WAIT_ONE_REPLICA: &str = "wait_replicas=1&wait_timeout=1s";

/// The store URL for the harness from the variable the engine set.
pub(crate) fn store_url(engine: &str, value: &str) -> String {
    match engine {
        // DYNAMODB_ENDPOINT is an endpoint, not a URL.
        "dynamodb" => {
            format!("dynamodb://chaos_leases?region=us-east-1&endpoint={value}&create_table=true")
        }
        "valkey-sentinel-wait" => match value.contains('?') {
            true => format!("{value}&{WAIT_ONE_REPLICA}"),
            false => format!("{value}?{WAIT_ONE_REPLICA}"),
        },
        _ => value.to_string(),
    }
}

/// Whole seconds from `90`, `90s`, `3m` or `1m 30s` (`humantime`).
fn parse_duration(text: &str) -> Result<u64, String> {
    let seconds = match text.trim().parse::<u64>() {
        Ok(seconds) => seconds,
        Err(_) => humantime::parse_duration(text)
            .map_err(|err| format!("{text:?} is not a duration like 120s or 3m: {err}"))?
            .as_secs(),
    };
    if seconds == 0 {
        return Err(format!("{text:?}: the duration must be at least 1 s"));
    }
    Ok(seconds)
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let wanted: Vec<String> = if args.engines.is_empty() {
        SUPPORTED.iter().map(|(n, _, _)| n.to_string()).collect()
    } else {
        args.engines.clone()
    };
    for name in &wanted {
        if !SUPPORTED.iter().any(|(n, _, _)| n == name) {
            let names: Vec<&str> = SUPPORTED.iter().map(|(n, _, _)| *n).collect();
            anyhow::bail!("unknown engine {name:?}; supported: {}", names.join(", "));
        }
        if args.topology && !TOPOLOGY.contains(&name.as_str()) {
            anyhow::bail!(
                "--topology runs on {} only, not {name}",
                TOPOLOGY.join(", ")
            );
        }
        if args.server_clock.is_some() && !server_clock::ENGINES.contains(&name.as_str()) {
            anyhow::bail!(
                "--server-clock runs on {} only, not {name}",
                server_clock::ENGINES.join(", ")
            );
        }
    }
    // The harness's programs from the workspace's one test build (a
    // `-p chaos` build would recompile ~100 dependencies with other features).
    let build = crate::workspace_build::build()?;
    let harness = build.bin("chaos")?;
    let fleet = build.bin("chaos-fleet")?;

    let work_dir = engines::work_dir();
    std::fs::create_dir_all(&work_dir)?;
    let summary = work_dir.join(format!("chaos-summary-{}.txt", std::process::id()));
    let mut failed = Vec::new();
    let mut node_reports = Vec::new();
    for name in &wanted {
        let Some((_, entry, var)) = SUPPORTED.iter().find(|(n, _, _)| n == name) else {
            continue;
        };
        let all = engines::all();
        let engine = all
            .iter()
            .find(|e| e.name == *entry)
            .with_context(|| format!("no engine {entry}"))?;
        println!("== chaos {name}: starting the engine ==");
        let clock = match &args.server_clock {
            Some(_) => Some(server_clock::ClockDir::create()?),
            None => None,
        };
        let started = match (&clock, engine.external()) {
            (Some(_), Some(_)) => Err(anyhow::anyhow!(
                "--server-clock starts its own engine: unset {}",
                engine.endpoint_var
            )),
            (Some(clock), None) => {
                server_clock::start(engine.name, &work_dir.join(engine.name), clock)
            }
            (None, Some(external)) => Ok(external),
            (None, None) => (engine.start)(&work_dir.join(engine.name)),
        };
        let running: Started = match started {
            Ok(started) => started,
            Err(err) => {
                eprintln!("chaos {name}: the engine did not start: {err:#}");
                failed.push(name.clone());
                continue;
            }
        };
        if let (Some(clock), Some(fault)) = (&clock, &args.server_clock) {
            // What the offset file actually moves, measured on this server.
            let probe = server_clock::probe(engine.name, &running, clock)
                .map_or_else(|err| format!("probe FAILED: {err:#}"), |p| p.to_string());
            println!("chaos {name}: --server-clock {fault}: {probe}");
            node_reports.push(format!("{name}: --server-clock {fault}: {probe}"));
        }
        let url = running
            .env
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| store_url(name, v))
            .with_context(|| format!("the engine did not set {var}"))?;
        let failover = FAILOVER.contains(&name.as_str());
        let cluster = *name == "cassandra-3" || failover;
        let lease = args.lease.unwrap_or_else(|| default_lease(name));
        let mut command = if *name == "coordinator" {
            fleet_command(&fleet, &url, &args, &work_dir, &summary)
        } else {
            let mut command = Command::new(&harness);
            command
                .args(["--url", &url, "--engine", name])
                .args(["--duration-secs", &args.duration.to_string()])
                .args(["--lease-secs", &lease.to_string()])
                .args(["--contenders", &args.contenders.to_string()])
                .args(args.unfenced.then_some("--unfenced"))
                .args([
                    "--takeover-slack-ms",
                    &takeover_slack(name, args.duration, lease)
                        .as_millis()
                        .to_string(),
                ])
                .args(
                    args.clock_rate
                        .map(|rate| ["--clock-rate".to_string(), rate.to_string()])
                        .into_iter()
                        .flatten(),
                )
                .args(cluster.then_some("--direct"))
                .args(
                    clock
                        .as_ref()
                        .zip(args.server_clock.as_ref())
                        .map(|(clock, fault)| {
                            [
                                "--server-clock".into(),
                                fault.into(),
                                "--server-clock-file".into(),
                                clock.file().into_os_string(),
                            ]
                        })
                        .into_iter()
                        .flatten()
                        .collect::<Vec<std::ffi::OsString>>(),
                )
                .arg("--work-dir")
                .arg(work_dir.join(format!("chaos-{name}")))
                .arg("--summary")
                .arg(&summary)
                .envs(local_aws_credentials(name));
            command
        };
        let mut harness = command
            .stdout(Stdio::piped())
            .spawn()
            .context("running the chaos harness")?;
        // The harness's lines, passed through; its first acquisition starts
        // the node faults (it may need a while to connect first).
        let acquired = Arc::new(AtomicBool::new(false));
        let printer = harness.stdout.take().map(|stdout| {
            let acquired = acquired.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.contains(" ev=acquired ") {
                        acquired.store(true, Ordering::Relaxed);
                    }
                    println!("{line}");
                }
            })
        });
        let mut running = running;
        let mut status = None;
        if cluster && engine.external().is_none() {
            while !acquired.load(Ordering::Relaxed) && !exited(&mut harness, &mut status) {
                std::thread::sleep(Duration::from_millis(100));
            }
            // Faults of the cluster's own nodes while the harness runs.
            let hold = node_fault_hold(args.duration, lease);
            let mut stop = || exited(&mut harness, &mut status);
            let gap = Duration::from_secs(lease) / 2;
            let faults = match (args.topology, failover) {
                (true, true) => engines::membership_changes(&mut running, hold, gap, &mut stop)
                    .map(|report| report.to_string()),
                (true, false) => engines::topology_changes(&mut running, gap, &mut stop)
                    .map(|report| report.to_string()),
                (false, true) => engines::run_failovers(name, &mut running, hold, gap, &mut stop)
                    .map(|report| report.to_string()),
                (false, false) => engines::node_faults(&mut running, hold, gap, &mut stop)
                    .map(|report| report.to_string()),
            };
            match faults {
                Ok(report) => node_reports.push(format!("{name}: {report}")),
                Err(err) => {
                    eprintln!("chaos {name}: node faults failed: {err:#}");
                    node_reports.push(format!("{name}: node faults FAILED: {err:#}"));
                    failed.push(name.clone());
                }
            }
        } else if cluster {
            node_reports.push(format!("{name}: external cluster, no node faults"));
        }
        let status = match status {
            Some(status) => status,
            None => harness.wait().context("waiting for the chaos harness")?,
        };
        if let Some(printer) = printer {
            let _ = printer.join();
        }
        drop(running);
        drop(clock);
        println!("== chaos {name}: engine stopped ==");
        if !status.success() && !failed.contains(name) {
            failed.push(name.clone());
        }
    }
    println!();
    println!(
        "== chaos summary ({} s of faults per engine) ==",
        args.duration
    );
    let lines = std::fs::read_to_string(&summary).unwrap_or_default();
    let _ = std::fs::remove_file(&summary);
    for name in &wanted {
        match lines.lines().find(|l| l.starts_with(&format!("{name}: "))) {
            Some(line) => println!("{line}"),
            None => {
                println!("{name}: no report (the engine or the harness failed before checking)")
            }
        }
    }
    for line in &node_reports {
        println!("{line}");
    }
    anyhow::ensure!(failed.is_empty(), "chaos failed on {failed:?}");
    Ok(())
}

/// `chaos-fleet` (coordinator chaos, `chaos::fleet` in the chaos crate):
/// pods and coordinators on the started Valkey; `--lease`, `--contenders`
/// and `--clock-rate` do not apply.
fn fleet_command(
    program: &std::path::Path,
    url: &str,
    args: &Args,
    work_dir: &std::path::Path,
    summary: &std::path::Path,
) -> Command {
    let mut command = Command::new(program);
    command
        .args(["--url", url])
        .args(["--duration-secs", &args.duration.to_string()])
        .args(args.unfenced.then_some("--unfenced"))
        .arg("--work-dir")
        .arg(work_dir.join(format!("chaos-coordinator-{}", std::process::id())))
        .arg("--summary")
        .arg(summary);
    command
}

/// Whether the harness has exited (its status kept in `status`).
fn exited(
    harness: &mut std::process::Child,
    status: &mut Option<std::process::ExitStatus>,
) -> bool {
    if status.is_none() {
        *status = harness.try_wait().ok().flatten();
    }
    status.is_some()
}

/// The lease of an engine's contenders: 4 s, and 8 s on cassandra-3. An
/// election gives each storage call `d/4`; on a 3-node cluster sharing two
/// cores, lightweight transactions take well over the 1 s of a 4 s lease
/// while a node restarts (its JVM's start-up takes the CPU) or a frozen
/// replica is still counted on, and contenders keep failing their
/// acquisitions (liveness, not safety: measured, 1 s budgets, "no leader
/// within 12 s").
fn default_lease(engine: &str) -> u64 {
    match engine {
        "cassandra-3" => 8,
        _ => 4,
    }
}

/// How long each node fault of a cassandra-3 run is held: a sixth of the
/// run (so a cut, a pause and a kill with its ~17 s restart fit in it, half
/// a lease apart), at least a lease (longer than an election's call budget,
/// `d/4`, and its renewal period) and at most 20 s (past the driver's
/// keepalive timeout, 12 s, and gossip's failure detection, ~19 s).
fn node_fault_hold(duration_secs: u64, lease_secs: u64) -> Duration {
    Duration::from_secs((duration_secs / 6).clamp(lease_secs, 20.max(lease_secs)))
}

/// Added to the takeover bound: what one failover of the engine can add
/// to a takeover, derived from its configured timings
/// ([`engines::failover_takeover_slack`]: on `etcd-3` a new Raft leader
/// renews a dead holder's lease by its whole TTL; on `valkey-sentinel`
/// nobody writes until Sentinel has promoted the replica and the clients
/// have found it).
///
/// `valkey-sentinel-wait` (each write confirmed by the one replica) also
/// refuses every write from a failover until the old primary is back as a
/// replica: held down [`node_fault_hold`], then about 2 s to restart and
/// resync (measured 6.9-7.0 s from the kill in all), with 1 s of margin.
fn takeover_slack(engine: &str, duration_secs: u64, lease_secs: u64) -> Duration {
    let failover = engines::failover_takeover_slack(engine, Duration::from_secs(lease_secs));
    match engine {
        "valkey-sentinel-wait" => {
            node_fault_hold(duration_secs, lease_secs) + Duration::from_secs(3) + failover
        }
        _ => failover,
    }
}

/// DynamoDB Local accepts any credentials, but the AWS SDK wants some:
/// dummy ones unless the environment has real ones.
fn local_aws_credentials(engine: &str) -> Vec<(&'static str, &'static str)> {
    if engine != "dynamodb" || std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
        return Vec::new();
    }
    vec![
        ("AWS_ACCESS_KEY_ID", "chaos"),
        ("AWS_SECRET_ACCESS_KEY", "chaos"),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{node_fault_hold, parse_duration};

    #[test]
    fn node_faults_are_held_a_sixth_of_the_run_within_bounds() {
        assert_eq!(node_fault_hold(60, 8), Duration::from_secs(10));
        assert_eq!(node_fault_hold(30, 8), Duration::from_secs(8));
        assert_eq!(node_fault_hold(600, 8), Duration::from_secs(20));
        assert_eq!(node_fault_hold(600, 30), Duration::from_secs(30));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("120s"), Ok(120));
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("3m"), Ok(180));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
