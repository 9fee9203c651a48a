//! A 3-node Apache Cassandra cluster as local processes: the single-node
//! engine's jars and JVM options (see [`super::cassandra`]), one node on each
//! of 127.0.0.1, 127.0.0.2 and 127.0.0.3, memory-lean settings (512 MiB heap,
//! small caches and pools, no mlock), a balanced ring (`num_tokens: 1`), and
//! the suites run with replication factor 3.
//!
//! [`degrade`] SIGKILLs one node so the suites can run again on 2 of 3.
//! Every node is killed and the data directories removed when the
//! [`Started`] is dropped, whatever happened.

use std::{
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

mod topology;

pub(crate) use topology::topology_changes;

use super::{
    Started,
    cassandra::{JVM_OPTIONS, Node, cql_ping, fetch_jars, log_tail, spawn_node},
    kill_tree,
};

/// The nodes' addresses; the first is the seed.
const ADDRESSES: [&str; 3] = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
/// Evenly spread tokens of a 3-node Murmur3 ring.
const TOKENS: [&str; 3] = [
    "-9223372036854775808",
    "-3074457345618258603",
    "3074457345618258602",
];
/// Local JMX ports (JMX always binds 127.0.0.1, so they must differ).
const JMX_PORTS: [u16; 3] = [17199, 17299, 17399];
/// The inter-node port, the same on every address.
const STORAGE_PORT: u16 = 17000;
/// The CQL port, the same on every address.
pub(crate) const NATIVE_PORT: u16 = 19042;
/// How long the cluster may take until every node is up and normal.
const READY_LIMIT: Duration = Duration::from_secs(300);
/// The elections suite's real-time margin on this cluster (the default is
/// 1 s): an acquisition attempt whose lightweight transaction meets Paxos
/// contention or a replica that is down or starved of CPU (three JVMs and
/// 16 test threads on 2 cores) fails only at the election's call budget,
/// `d/4` = 1.25 s, and then its read-back, another 1.25 s: a takeover can
/// come one such attempt (2.5 s) later than on one node. Measured: an
/// acquisition `OutcomeUnknown` ("did not answer within 1.25s") in 1 of 4
/// runs of the degraded round.
const SUITE_MARGIN_MS: u64 = 3500;
/// The variable the suite reads it from (`elections_testsuite::MARGIN_VAR`).
const MARGIN_VAR: &str = "ELECTIONS_SUITE_MARGIN_MS";
/// The node [`degrade`] kills.
const VICTIM: usize = 2;

/// The running nodes; dropping this kills them and removes their data.
struct Cluster {
    nodes: Vec<Option<Child>>,
    dir: PathBuf,
    /// The jars, to restart a node.
    lib: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            // A SIGSTOPped JVM ignores nothing but SIGKILL; continue it anyway.
            signal(child, "CONT");
            kill_tree(child);
        }
        if let Err(err) = fs::remove_dir_all(&self.dir) {
            eprintln!("cassandra-3: removing {}: {err}", self.dir.display());
        }
    }
}

/// Starts the three nodes together and waits until all are `UN` in
/// `nodetool status` and answer CQL; `SCYLLA_URI` names all three.
pub(crate) fn start(work_dir: &Path) -> anyhow::Result<Started> {
    // The jars are the single-node engine's download.
    let lib = fetch_jars(&work_dir.with_file_name("cassandra"))?;
    let dir = work_dir.join("cluster");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let mut cluster = Cluster {
        nodes: Vec::new(),
        dir: dir.clone(),
        lib: lib.clone(),
    };
    for i in 0..ADDRESSES.len() {
        let run = node_dir(&dir, i);
        fs::create_dir_all(&run)?;
        cluster.nodes.push(Some(spawn_node(&lib, &run, &node(i))?));
    }
    if let Err(err) = wait_all_up(&mut cluster, &lib) {
        let mut tails = String::new();
        for i in 0..ADDRESSES.len() {
            let run = node_dir(&dir, i);
            tails.push_str(&log_tail(&run.join("system.log"), &run.join("console.log")));
        }
        return Err(err.context(format!(
            "cassandra-3 did not start; last log lines:\n{tails}"
        )));
    }
    let hosts: Vec<String> = ADDRESSES
        .iter()
        .map(|a| format!("{a}:{NATIVE_PORT}"))
        .collect();
    let uri = format!(
        "scylla://{}/ttl_suite?replication=simple:3&create_schema=true",
        hosts.join(",")
    );
    Ok(Started::external(vec![
        ("SCYLLA_URI".into(), uri),
        (MARGIN_VAR.into(), SUITE_MARGIN_MS.to_string()),
    ])
    .with_guard(cluster))
}

/// SIGKILLs one node (127.0.0.3) of a cluster started by [`start`].
pub(crate) fn degrade(started: &mut Started) -> anyhow::Result<()> {
    let cluster = started
        .guard_mut::<Cluster>()
        .context("not a cassandra-3 cluster")?;
    let Some(mut child) = cluster.nodes.get_mut(VICTIM).and_then(Option::take) else {
        bail!("node {} is already gone", ADDRESSES[VICTIM]);
    };
    println!(
        "cassandra-3: SIGKILL node {} (pid {})",
        ADDRESSES[VICTIM],
        child.id()
    );
    kill_tree(&mut child);
    Ok(())
}

/// Node `i`'s settings.
fn node(i: usize) -> Node {
    Node {
        address: ADDRESSES[i],
        native_port: NATIVE_PORT,
        storage_port: STORAGE_PORT,
        seed: ADDRESSES[0],
        initial_token: Some(TOKENS[i]),
        lean: true,
        jmx_port: Some(JMX_PORTS[i]),
        bootstrap: false,
        replaces: None,
        password_auth: false,
    }
}

fn node_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("node{}", i + 1))
}

/// Polls until every node answers CQL and the seed's `nodetool status`
/// shows all three `UN`; fails early if a node exits.
fn wait_all_up(cluster: &mut Cluster, lib: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut cql_up = [false; 3];
    loop {
        for (i, node) in cluster.nodes.iter_mut().enumerate() {
            if let Some(child) = node
                && let Some(status) = child.try_wait()?
            {
                bail!("node {} exited ({status})", ADDRESSES[i]);
            }
        }
        for (i, up) in cql_up.iter_mut().enumerate() {
            if !*up {
                let addr: SocketAddr = format!("{}:{NATIVE_PORT}", ADDRESSES[i]).parse()?;
                if cql_ping(addr, None).is_ok() {
                    *up = true;
                    println!(
                        "cassandra-3: {} answered CQL after {:.1}s",
                        ADDRESSES[i],
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }
        if cql_up.iter().all(|u| *u) {
            match nodes_up_normal(lib, &cluster.dir) {
                Ok(n) if n == ADDRESSES.len() => {
                    println!(
                        "cassandra-3: all {n} nodes UN after {:.1}s",
                        started.elapsed().as_secs_f64()
                    );
                    return Ok(());
                }
                Ok(n) => println!("cassandra-3: {n} of 3 nodes UN"),
                Err(err) => println!("cassandra-3: nodetool status: {err:#}"),
            }
        }
        if started.elapsed() > READY_LIMIT {
            bail!("not every node was up after {READY_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// How many of our addresses the seed's `nodetool status` shows `UN`.
fn nodes_up_normal(lib: &Path, dir: &Path) -> anyhow::Result<usize> {
    Ok(count_up_normal(&nodetool(
        lib,
        dir,
        JMX_PORTS[0],
        &["status"],
    )?))
}

/// `nodetool -h 127.0.0.1 -p <jmx_port> <args>`'s output (nodetool needs
/// the server's `--add-exports`/`--add-opens` flags and writes
/// `~/.cassandra`, hence `-Duser.home`).
fn nodetool(lib: &Path, dir: &Path, jmx_port: u16, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("java")
        .args(["-Xms64m", "-Xmx128m"])
        .args(JVM_OPTIONS)
        .arg(format!("-Duser.home={}", dir.display()))
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg("org.apache.cassandra.tools.NodeTool")
        .args(["-h", "127.0.0.1", "-p", &jmx_port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running nodetool")?;
    if !output.status.success() {
        bail!(
            "nodetool {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Counts the lines of `nodetool status` that say one of our nodes is `UN`.
fn count_up_normal(status: &str) -> usize {
    ADDRESSES
        .iter()
        .filter(|address| {
            status.lines().any(|line| {
                let mut words = line.split_whitespace();
                words.next() == Some("UN") && words.next() == Some(**address)
            })
        })
        .count()
}

/// Sends `kill -s <sig>` to a child (best effort: it may be gone).
fn signal(child: &Child, sig: &str) -> bool {
    Command::new("kill")
        .args(["-s", sig, &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What `cargo xtask chaos --engine cassandra-3` did to single nodes while
/// the contenders ran (see [`node_faults`]).
#[derive(Debug, Default)]
pub(crate) struct NodeFaultReport {
    /// Nodes SIGKILLed (and restarted on their data).
    pub(crate) kills: u32,
    /// Nodes SIGSTOPped (and continued).
    pub(crate) pauses: u32,
    /// Nodes cut off on the storage port (and healed).
    pub(crate) cuts: u32,
    /// How long each fault was held.
    pub(crate) hold: Duration,
    /// Longest time from a restart until the node answered CQL again.
    pub(crate) slowest_restart: Duration,
}

impl std::fmt::Display for NodeFaultReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node faults: {} SIGKILL+restart (each back on CQL within {:.1}s), {} SIGSTOP, \
             {} storage-port cuts, each held {}s",
            self.kills,
            self.slowest_restart.as_secs_f64(),
            self.pauses,
            self.cuts,
            self.hold.as_secs()
        )
    }
}

/// Injects faults into single nodes of a cluster started by [`start`], in
/// turn, until `stop` says so: cut one off on the storage port for `hold`
/// ([`StoragePortCut`]); SIGSTOP one for `hold`, then SIGCONT; SIGKILL one
/// and restart it on its data after `hold`. One fault at a time, `gap`
/// between them, each node in turn for each kind. Every fault is undone
/// before this returns, even on error (the cut's rules by its guard).
pub(crate) fn node_faults(
    started: &mut Started,
    hold: Duration,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> anyhow::Result<NodeFaultReport> {
    let cluster = started
        .guard_mut::<Cluster>()
        .context("not a cassandra-3 cluster")?;
    let mut cut = StoragePortCut::install()?;
    let mut report = NodeFaultReport {
        hold,
        ..NodeFaultReport::default()
    };
    // Let the contenders connect and elect a first leader.
    if hold_for(gap, stop) {
        return Ok(report);
    }
    for round in 0usize.. {
        // Cut, pause, kill: the kill (with its ~17 s restart) last, so all
        // three kinds fit in a 60 s run.
        let kind = round % 3;
        let victim = (round + round / 3) % ADDRESSES.len();
        let address = ADDRESSES[victim];
        let stopped = match kind {
            2 => {
                let Some(mut child) = cluster.nodes.get_mut(victim).and_then(Option::take) else {
                    bail!("node {address} is gone");
                };
                fault_line(&format!("SIGKILL {address}"));
                kill_tree(&mut child);
                report.kills += 1;
                let stopped = hold_for(hold, stop);
                fault_line(&format!("restart {address}"));
                let run = node_dir(&cluster.dir, victim);
                let mut child = spawn_node(&cluster.lib, &run, &node(victim))?;
                let restarted = Instant::now();
                let addr: SocketAddr = format!("{address}:{NATIVE_PORT}").parse()?;
                let up = wait_cql(&mut child, addr, stop);
                cluster.nodes[victim] = Some(child);
                match up {
                    Ok(true) => {
                        report.slowest_restart = report.slowest_restart.max(restarted.elapsed());
                        fault_line(&format!(
                            "{address} answers CQL {:.1}s after its restart",
                            restarted.elapsed().as_secs_f64()
                        ));
                        stopped
                    }
                    Ok(false) => true,
                    Err(err) => {
                        let tail = log_tail(&run.join("system.log"), &run.join("console.log"));
                        return Err(err.context(format!("restarting {address}:\n{tail}")));
                    }
                }
            }
            1 => {
                let Some(child) = cluster.nodes.get(victim).and_then(Option::as_ref) else {
                    bail!("node {address} is gone");
                };
                fault_line(&format!("SIGSTOP {address}"));
                anyhow::ensure!(signal(child, "STOP"), "SIGSTOP {address} failed");
                report.pauses += 1;
                let stopped = hold_for(hold, stop);
                fault_line(&format!("SIGCONT {address}"));
                anyhow::ensure!(signal(child, "CONT"), "SIGCONT {address} failed");
                stopped
            }
            _ => {
                // 0: the cut.
                fault_line(&format!("cut {address} off on port {STORAGE_PORT}"));
                cut.isolate(address)?;
                report.cuts += 1;
                let stopped = hold_for(hold, stop);
                fault_line(&format!("heal {address}"));
                cut.heal()?;
                stopped
            }
        };
        if stopped || hold_for(gap, stop) {
            break;
        }
    }
    cut.remove()?;
    Ok(report)
}

/// Prints a node fault with the wall time (ms since the epoch, as the
/// chaos harness's event lines).
fn fault_line(what: &str) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    println!("[cassandra-3] {ms} node fault: {what}");
}

/// Sleeps `time` in small steps; true as soon as `stop` says so.
fn hold_for(time: Duration, stop: &mut dyn FnMut() -> bool) -> bool {
    let until = Instant::now() + time;
    while Instant::now() < until {
        if stop() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop()
}

/// Waits until a restarted node answers CQL: `Ok(true)`; `Ok(false)` if
/// `stop` said so first; an error if it exits or takes longer than
/// [`READY_LIMIT`].
fn wait_cql(
    child: &mut Child,
    addr: SocketAddr,
    stop: &mut dyn FnMut() -> bool,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    loop {
        if cql_ping(addr, None).is_ok() {
            return Ok(true);
        }
        if let Some(status) = child.try_wait()? {
            bail!("{addr} exited after its restart ({status})");
        }
        if started.elapsed() > READY_LIMIT {
            bail!("{addr} did not answer CQL {READY_LIMIT:?} after its restart");
        }
        if stop() {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The iptables chain of [`StoragePortCut`].
const CUT_CHAIN: &str = "TTL_CHAOS_CASSANDRA3";

/// Cuts one node off from the others with iptables: every packet to its
/// storage port and every packet from it is dropped (rules in their own
/// chain, jumped to from INPUT, which sees all loopback traffic).
///
/// Why by the node's storage port and not by address pairs: the nodes'
/// outgoing inter-node connections all leave from 127.0.0.1 (Cassandra does
/// not bind them to its listen address), so a rule cannot tell which node
/// sent a packet, only which node's port it goes to. Dropping everything
/// to the victim's storage port cuts every message the others send it
/// (requests and the answers to its own requests, which come back on their
/// connections to it); what it sends still arrives, unanswered: a
/// one-way-in cut, which gossip and Paxos see as the node being away.
/// CQL (port 19042) is untouched, so clients keep reaching it.
///
/// The chain is removed when this is dropped, whatever happened, and any
/// leftover of an earlier run (one killed before it could clean up) when
/// it is installed.
struct StoragePortCut {
    installed: bool,
}

impl StoragePortCut {
    /// Creates the empty chain and the jump to it, after removing leftovers.
    fn install() -> anyhow::Result<Self> {
        Self::teardown();
        iptables(&["-N", CUT_CHAIN])?;
        iptables(&["-I", "INPUT", "-j", CUT_CHAIN])?;
        Ok(StoragePortCut { installed: true })
    }

    /// Drops every packet to `address`'s storage port and from it.
    fn isolate(&mut self, address: &str) -> anyhow::Result<()> {
        let port = STORAGE_PORT.to_string();
        for rule in isolate_rules(address, &port) {
            let mut args = vec!["-A", CUT_CHAIN];
            args.extend(rule);
            iptables(&args)?;
        }
        Ok(())
    }

    /// Removes every cut (the chain stays, empty).
    fn heal(&mut self) -> anyhow::Result<()> {
        iptables(&["-F", CUT_CHAIN])
    }

    /// Removes the chain and its jump.
    fn remove(mut self) -> anyhow::Result<()> {
        self.installed = false;
        iptables(&["-F", CUT_CHAIN])?;
        iptables(&["-D", "INPUT", "-j", CUT_CHAIN])?;
        iptables(&["-X", CUT_CHAIN])
    }

    /// Best-effort removal of the chain and its jump (it may not exist).
    fn teardown() {
        for args in [
            &["-F", CUT_CHAIN][..],
            &["-D", "INPUT", "-j", CUT_CHAIN],
            &["-X", CUT_CHAIN],
        ] {
            let _ = iptables_quiet(args);
        }
    }
}

impl Drop for StoragePortCut {
    fn drop(&mut self) {
        if self.installed {
            Self::teardown();
        }
    }
}

/// The rules (after `-A <chain>`) that cut `address` off on `port`:
/// packets to its port, and packets from its port (its answers on the
/// connections the others opened to it).
fn isolate_rules<'a>(address: &'a str, port: &'a str) -> [[&'a str; 8]; 2] {
    [
        ["-p", "tcp", "-d", address, "--dport", port, "-j", "DROP"],
        ["-p", "tcp", "-s", address, "--sport", port, "-j", "DROP"],
    ]
}

/// Runs `iptables -w <args>`; an error names the command and its stderr.
fn iptables(args: &[&str]) -> anyhow::Result<()> {
    let output = iptables_quiet(args)?;
    if !output.status.success() {
        bail!(
            "iptables {} failed ({}): {} (the cassandra-3 chaos run needs root and iptables)",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

fn iptables_quiet(args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new("iptables")
        .arg("-w")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running iptables (the cassandra-3 chaos run needs it, as root)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_normal_nodes() {
        let status = "Datacenter: datacenter1\n=======================\n\
            Status=Up/Down\n|/ State=Normal/Leaving/Joining/Moving\n\
            --  Address    Load       Tokens  Owns (effective)  Host ID  Rack\n\
            UN  127.0.0.1  104.5 KiB  1       100.0%            a  rack1\n\
            DN  127.0.0.2  99 KiB     1       100.0%            b  rack1\n\
            UN  127.0.0.3  101 KiB    1       100.0%            c  rack1\n\
            UN  127.0.0.30 101 KiB    1       100.0%            c  rack1\n";
        assert_eq!(count_up_normal(status), 2);
        assert_eq!(count_up_normal(""), 0);
    }

    #[test]
    fn a_cut_drops_the_victims_storage_port_both_ways_and_nothing_else() {
        let rules = isolate_rules("127.0.0.3", "17000");
        assert_eq!(
            rules[0].join(" "),
            "-p tcp -d 127.0.0.3 --dport 17000 -j DROP"
        );
        assert_eq!(
            rules[1].join(" "),
            "-p tcp -s 127.0.0.3 --sport 17000 -j DROP"
        );
    }

    #[test]
    fn node_fault_report_names_every_kind() {
        let report = NodeFaultReport {
            kills: 2,
            pauses: 1,
            cuts: 1,
            hold: Duration::from_secs(15),
            slowest_restart: Duration::from_millis(17_300),
        };
        assert_eq!(
            report.to_string(),
            "node faults: 2 SIGKILL+restart (each back on CQL within 17.3s), 1 SIGSTOP, \
             1 storage-port cuts, each held 15s"
        );
    }
}
