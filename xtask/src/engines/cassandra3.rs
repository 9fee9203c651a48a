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
/// The node [`degrade`] kills.
const VICTIM: usize = 2;

/// The running nodes; dropping this kills them and removes their data.
struct Cluster {
    nodes: Vec<Option<Child>>,
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
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
    };
    for (i, address) in ADDRESSES.into_iter().enumerate() {
        let run = node_dir(&dir, i);
        fs::create_dir_all(&run)?;
        let node = Node {
            address,
            native_port: NATIVE_PORT,
            storage_port: STORAGE_PORT,
            seed: ADDRESSES[0],
            initial_token: Some(TOKENS[i]),
            lean: true,
            jmx_port: Some(JMX_PORTS[i]),
        };
        cluster.nodes.push(Some(spawn_node(&lib, &run, &node)?));
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
    Ok(Started::external(vec![("SCYLLA_URI".into(), uri)]).with_guard(cluster))
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
                if cql_ping(addr).is_ok() {
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
/// nodetool needs the server's `--add-exports`/`--add-opens` flags and
/// writes `~/.cassandra`, hence `-Duser.home`.
fn nodes_up_normal(lib: &Path, dir: &Path) -> anyhow::Result<usize> {
    let output = Command::new("java")
        .args(["-Xms64m", "-Xmx128m"])
        .args(JVM_OPTIONS)
        .arg(format!("-Duser.home={}", dir.display()))
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg("org.apache.cassandra.tools.NodeTool")
        .args(["-h", "127.0.0.1", "-p"])
        .arg(JMX_PORTS[0].to_string())
        .arg("status")
        .stdin(Stdio::null())
        .output()
        .context("running nodetool")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok(count_up_normal(&stdout))
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
}
