//! Topology changes of the 3-node cluster while `cargo xtask chaos
//! --engine cassandra-3 --topology` runs: a fourth node joins (bootstraps
//! its range), then one of the original nodes is decommissioned, then
//! another is SIGKILLed and, once the others see it down, replaced by a
//! fresh node (`replace_address_first_boot`: it takes over the dead node's
//! token and streams its data), so range movements of all three kinds
//! happen under the contenders' lightweight transactions.
//!
//! Before Cassandra 4.1, LWTs were not linearizable across range
//! movements (CASSANDRA-15837 / CEP-14: a joining or leaving node could
//! miss accepted Paxos proposals); Cassandra 4.1's Paxos v2 repairs Paxos
//! state before a range moves. The cluster here runs 5.0 with
//! `paxos_variant: v2` (see [`super::super::cassandra`]).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use super::{
    ADDRESSES, Cluster, JMX_PORTS, NATIVE_PORT, STORAGE_PORT, fault_line, hold_for, node_dir,
    nodetool, wait_cql,
};
use crate::engines::{
    Started,
    cassandra::{Node, log_tail, spawn_node},
    kill_tree,
};

/// The node that joins.
const JOINER: &str = "127.0.0.4";
/// Its token: half-way between the third node's and the end of the ring,
/// so it takes half of the third node's primary range.
const JOINER_TOKEN: &str = "6148914691236517204";
/// Its JMX port.
const JOINER_JMX: u16 = 17499;
/// The node decommissioned once the joiner is up (not the seed).
const LEAVER: usize = 1;
/// The node killed and replaced, and its replacement.
const DEAD: usize = 2;
const REPLACEMENT: &str = "127.0.0.5";
const REPLACEMENT_JMX: u16 = 17599;
/// How long a join or a decommission may take.
const LIMIT: Duration = Duration::from_secs(240);

/// What the topology changes of one run did.
#[derive(Debug, Default)]
pub(crate) struct TopologyReport {
    /// Time from starting the joiner until the seed saw it `UN`.
    pub(crate) joined: Option<Duration>,
    /// Time `nodetool decommission` took.
    pub(crate) decommissioned: Option<Duration>,
    /// Time from the SIGKILL until the others saw the node down.
    pub(crate) seen_down: Option<Duration>,
    /// Time from starting the replacement until it was `UN`.
    pub(crate) replaced: Option<Duration>,
}

impl std::fmt::Display for TopologyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // "UN after 37.6s", or what the run ended before.
        let step = |d: Option<Duration>, done: &str, missing: &str| {
            d.map_or(format!("{missing} when the run ended"), |d| {
                format!("{done} {:.1}s", d.as_secs_f64())
            })
        };
        write!(
            f,
            "topology: {JOINER} joined (bootstrap, {}), {} decommissioned ({}), \
             {} SIGKILLed (seen down {}) and replaced by {REPLACEMENT} ({})",
            step(self.joined, "UN after", "not UN"),
            ADDRESSES[LEAVER],
            step(self.decommissioned, "took", "not done"),
            ADDRESSES[DEAD],
            step(self.seen_down, "after", "not yet"),
            step(self.replaced, "UN after", "not UN")
        )
    }
}

/// Adds [`JOINER`], waits until it is `UN`, waits `gap`, decommissions
/// [`ADDRESSES`]`[LEAVER]` and stops its process, then holds until `stop`.
pub(crate) fn topology_changes(
    started: &mut Started,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> anyhow::Result<TopologyReport> {
    let cluster = started
        .guard_mut::<Cluster>()
        .context("not a cassandra-3 cluster")?;
    let mut report = TopologyReport::default();
    if hold_for(gap, stop) {
        return Ok(report);
    }
    // Join.
    fault_line(&format!("start {JOINER} (bootstrap, token {JOINER_TOKEN})"));
    report.joined = start_until_normal(cluster, JOINER, &joiner(), "join", stop)?;
    if report.joined.is_none() || hold_for(gap, stop) {
        return Ok(report);
    }
    // Decommission (nodetool blocks until the node has left the ring).
    let leaver = ADDRESSES[LEAVER];
    fault_line(&format!("decommission {leaver}"));
    let leaving = Instant::now();
    nodetool(
        &cluster.lib,
        &cluster.dir,
        JMX_PORTS[LEAVER],
        &["decommission"],
    )
    .with_context(|| format!("decommissioning {leaver}"))?;
    report.decommissioned = Some(leaving.elapsed());
    fault_line(&format!(
        "{leaver} decommissioned in {:.1}s; stopping it",
        leaving.elapsed().as_secs_f64()
    ));
    if let Some(mut child) = cluster.nodes.get_mut(LEAVER).and_then(Option::take) {
        kill_tree(&mut child);
    }
    let status = nodetool(&cluster.lib, &cluster.dir, JMX_PORTS[0], &["status"])?;
    if state(&status, leaver).is_some() {
        bail!("{leaver} is still in the ring after its decommission:\n{status}");
    }
    if hold_for(gap, stop) {
        return Ok(report);
    }
    // Replace a dead node.
    let dead = ADDRESSES[DEAD];
    let Some(mut child) = cluster.nodes.get_mut(DEAD).and_then(Option::take) else {
        bail!("node {dead} is gone");
    };
    fault_line(&format!("SIGKILL {dead} (to be replaced)"));
    kill_tree(&mut child);
    let killed = Instant::now();
    if wait_state(cluster, dead, Some("DN"), killed, stop)? {
        return Ok(report);
    }
    report.seen_down = Some(killed.elapsed());
    fault_line(&format!(
        "{dead} seen down after {:.1}s; start {REPLACEMENT} replacing it",
        killed.elapsed().as_secs_f64()
    ));
    report.replaced = start_until_normal(cluster, REPLACEMENT, &replacement(), "start", stop)?;
    if report.replaced.is_none() {
        return Ok(report);
    }
    hold_for(Duration::from_secs(3600), stop);
    Ok(report)
}

/// Polls the seed's `nodetool status` until `address` is in `want`
/// state (`None`: out of the ring); `Ok(true)` if `stop` said so first;
/// an error after [`LIMIT`] from `since`.
/// Starts node `name` (`node`) as the cluster's next one and waits until
/// it answers CQL and is `UN`: `Ok(Some(time since it started))`, or
/// `Ok(None)` if `stop` said so first. An error says it did not `verb`
/// (`join`, `start`), with the node's log tail.
fn start_until_normal(
    cluster: &mut Cluster,
    name: &str,
    node: &Node,
    verb: &str,
    stop: &mut dyn FnMut() -> bool,
) -> anyhow::Result<Option<Duration>> {
    let run = node_dir(&cluster.dir, cluster.nodes.len());
    std::fs::create_dir_all(&run)?;
    let started = Instant::now();
    let mut child = spawn_node(&cluster.lib, &run, node)?;
    let addr: SocketAddr = format!("{name}:{NATIVE_PORT}").parse()?;
    let up = wait_cql(&mut child, addr, stop);
    cluster.nodes.push(Some(child));
    match up {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(err) => {
            let tail = log_tail(&run.join("system.log"), &run.join("console.log"));
            return Err(err.context(format!("{name} did not {verb}:\n{tail}")));
        }
    }
    if wait_state(cluster, name, Some("UN"), started, stop)? {
        return Ok(None);
    }
    let took = started.elapsed();
    fault_line(&format!(
        "{name} is UN {:.1}s after it started",
        took.as_secs_f64()
    ));
    Ok(Some(took))
}

fn wait_state(
    cluster: &Cluster,
    address: &str,
    want: Option<&str>,
    since: Instant,
    stop: &mut dyn FnMut() -> bool,
) -> anyhow::Result<bool> {
    loop {
        let status = nodetool(&cluster.lib, &cluster.dir, JMX_PORTS[0], &["status"])?;
        if state(&status, address) == want {
            return Ok(false);
        }
        if since.elapsed() > LIMIT {
            bail!("{address} was not {want:?} after {LIMIT:?}:\n{status}");
        }
        if hold_for(Duration::from_secs(1), stop) {
            return Ok(true);
        }
    }
}

/// The replacement's settings: no token of its own (it takes the dead
/// node's).
fn replacement() -> Node {
    Node {
        address: REPLACEMENT,
        native_port: NATIVE_PORT,
        storage_port: STORAGE_PORT,
        seed: ADDRESSES[0],
        initial_token: None,
        lean: true,
        jmx_port: Some(REPLACEMENT_JMX),
        bootstrap: true,
        replaces: Some(ADDRESSES[DEAD]),
        password_auth: false,
    }
}

/// The joining node's settings.
fn joiner() -> Node {
    Node {
        address: JOINER,
        native_port: NATIVE_PORT,
        storage_port: STORAGE_PORT,
        seed: ADDRESSES[0],
        initial_token: Some(JOINER_TOKEN),
        lean: true,
        jmx_port: Some(JOINER_JMX),
        bootstrap: true,
        replaces: None,
        password_auth: false,
    }
}

/// The state column (`UN`, `UJ`, `UL`, `DN`, ...) of `address` in
/// `nodetool status`, if it is in the ring.
fn state<'a>(status: &'a str, address: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let state = words.next()?;
        (words.next() == Some(address) && state.len() == 2).then_some(state)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_of_nodes_in_the_ring() {
        let status = "--  Address    Load       Tokens  Owns (effective)  Host ID  Rack\n\
            UN  127.0.0.1  104.5 KiB  1       75.0%             a  rack1\n\
            UL  127.0.0.2  99 KiB     1       75.0%             b  rack1\n\
            UJ  127.0.0.4  12 KiB     1       ?                 d  rack1\n";
        assert_eq!(state(status, "127.0.0.1"), Some("UN"));
        assert_eq!(state(status, "127.0.0.2"), Some("UL"));
        assert_eq!(state(status, "127.0.0.4"), Some("UJ"));
        assert_eq!(state(status, "127.0.0.3"), None);
        assert_eq!(state(status, "127.0.0.40"), None);
    }

    #[test]
    fn the_joiner_bootstraps_between_the_third_token_and_the_ring_end() {
        let node = joiner();
        assert!(node.bootstrap);
        let third: i128 = super::super::TOKENS[2].parse().unwrap();
        let token: i128 = JOINER_TOKEN.parse().unwrap();
        assert_eq!(token, (third + i128::from(i64::MAX)) / 2);
        assert_eq!(
            TopologyReport::default().to_string(),
            "topology: 127.0.0.4 joined (bootstrap, not UN when the run ended), 127.0.0.2 \
             decommissioned (not done when the run ended), 127.0.0.3 SIGKILLed (seen down not \
             yet when the run ended) and replaced by 127.0.0.5 (not UN when the run ended)"
        );
        let replacement = replacement();
        assert_eq!(replacement.replaces, Some("127.0.0.3"));
        assert_eq!(replacement.initial_token, None);
    }
}
