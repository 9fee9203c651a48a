//! A 3-member etcd cluster as local processes (Debian's `etcd-server`), for
//! storage-etcd's suite against a replicated etcd, as users run it.
//!
//! [`start`] runs three members on 127.0.0.1, each with its own free client,
//! TLS client and peer ports and a fresh data directory, the single-member
//! engine's timing (50 ms heartbeat, 500 ms election timeout: a 1 s minimum
//! lease TTL, as the suite's short TTLs need) and the same throwaway CA,
//! waits until every member's `/health` answers `true` (a leader is
//! elected and reachable from each), and returns
//! `ETCD_URL=etcd://127.0.0.1:<c1>?endpoint=127.0.0.1:<c2>&endpoint=127.0.0.1:<c3>`
//! and the same over TLS in `ETCD_TLS_URL`.
//!
//! [`degrade`] finds the Raft leader (`/v3/maintenance/status` of each
//! member), SIGKILLs it, waits until the two others have elected a new
//! one, and reorders both URLs so a live member comes first (the suite's
//! proxy cases address the first endpoint; the dead one stays listed
//! last, as a client configured with all three would still have it).
//! Every member is killed and the data removed when the [`Started`] is
//! dropped, whatever happened.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

mod membership;

pub(crate) use membership::membership_changes;

use super::{
    LogTo, Started,
    etcd::healthy,
    failover::{FailoverReport, fault_line, hold_for},
    free_port, kill_tree,
};

/// How long the cluster may take to elect a leader, and a new one after a kill.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Members of the cluster.
const MEMBERS: usize = 3;
/// Raft heartbeat interval of every member (`--heartbeat-interval`).
const HEARTBEAT: Duration = Duration::from_millis(50);
/// Raft election timeout of every member (`--election-timeout`): a
/// follower that hears no heartbeat for a randomized `[1, 2)` times this
/// campaigns.
const ELECTION_TIMEOUT: Duration = Duration::from_millis(500);

/// What one leader kill can add to a takeover (see
/// `docs/guarantees.md`, "Takeovers across a failover"). etcd keeps lease
/// expiries in the leader's memory only; a new leader, once it has applied
/// its term's first entry, renews every lease to `now + TTL + election
/// timeout` (`lessor.Promote`). A contender killed just before its record's
/// lease ran out therefore leaves a record that lives on for the new
/// leader's election (followers notice the dead leader within two
/// election timeouts), plus the lease's whole TTL (whole seconds, at least
/// the lease), plus one election timeout.
pub(crate) fn failover_takeover_slack(lease: Duration) -> Duration {
    let ttl = Duration::from_secs(lease.as_secs() + u64::from(lease.subsec_nanos() > 0));
    ELECTION_TIMEOUT * 2 + ttl + ELECTION_TIMEOUT
}

/// One member's ports.
#[derive(Clone, Copy)]
struct Ports {
    client: u16,
    tls: u16,
    peer: u16,
}

/// The running members; dropping this kills them and removes their data.
pub(crate) struct Cluster {
    members: Vec<Option<Child>>,
    ports: Vec<Ports>,
    dir: PathBuf,
    ca: PathBuf,
    /// How member `i` is started (program and arguments), to restart it.
    commands: Vec<(PathBuf, Vec<String>)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.members.iter_mut().flatten() {
            kill_tree(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cluster {
    /// The client address of member `i`.
    fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports[i].client))
    }

    /// Indices of the members still running, then the others.
    fn live_first(&self) -> Vec<usize> {
        let (mut live, dead): (Vec<usize>, Vec<usize>) =
            (0..self.members.len()).partition(|&i| self.members[i].is_some());
        live.extend(dead);
        live
    }

    /// `ETCD_URL` and `ETCD_TLS_URL` naming every member, live ones first.
    fn env(&self) -> Vec<(String, String)> {
        let order = self.live_first();
        let url = |scheme: &str, port: fn(&Ports) -> u16, extra: &str| {
            let first = port(&self.ports[order[0]]);
            let rest: Vec<String> = order[1..]
                .iter()
                .map(|&i| format!("endpoint=127.0.0.1:{}", port(&self.ports[i])))
                .collect();
            format!("{scheme}://127.0.0.1:{first}?{}{extra}", rest.join("&"))
        };
        vec![
            ("ETCD_URL".to_string(), url("etcd", |p| p.client, "")),
            (
                "ETCD_TLS_URL".to_string(),
                url(
                    "etcds",
                    |p| p.tls,
                    &format!("&tls_ca_file={}", self.ca.display()),
                ),
            ),
        ]
    }

    /// Waits until every running member reports a healthy cluster; fails
    /// early if one exits.
    fn wait_healthy(&mut self) -> Result<Duration> {
        let started = Instant::now();
        loop {
            for (i, member) in self.members.iter_mut().enumerate() {
                if let Some(child) = member
                    && let Some(status) = child.try_wait()?
                {
                    bail!("etcd member m{i} exited ({status})");
                }
            }
            let all = (0..self.members.len())
                .filter(|&i| self.members[i].is_some())
                .all(|i| healthy(self.client_addr(i)));
            if all {
                return Ok(started.elapsed());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!("the etcd cluster had no healthy leader after {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts member `i` (again), its output appended to its log.
    fn spawn(&mut self, i: usize) -> Result<()> {
        let log_path = self.dir.join(format!("m{i}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let (binary, args) = &self.commands[i];
        let child = Command::new(binary)
            .args(args)
            .log_to(log)?
            .spawn()
            .with_context(|| format!("cannot run {}", binary.display()))?;
        self.members[i] = Some(child);
        Ok(())
    }

    /// Starts member `i` again as a new member of the running cluster
    /// (after a `MemberAdd`): a fresh data directory and
    /// `--initial-cluster-state existing`.
    fn rejoin(&mut self, i: usize) -> Result<()> {
        let args = &mut self.commands[i].1;
        let value =
            |args: &[String], flag: &str| args.iter().position(|a| a == flag).map(|p| p + 1);
        let state = value(args, "--initial-cluster-state").context("no --initial-cluster-state")?;
        args[state] = "existing".into();
        let data = value(args, "--data-dir").context("no --data-dir")?;
        let data = std::path::PathBuf::from(&args[data]);
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .with_context(|| format!("removing {}", data.display()))?;
        }
        self.spawn(i)
    }

    /// The index of the member that currently leads, asked of each live member.
    fn leader(&self) -> Option<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].is_some())
            .find(|&i| status(self.client_addr(i)).is_some_and(|s| s.is_leader()))
    }
}

/// Starts the three members; see the module docs.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    let binary = super::etcd::find_binary()?;
    let certs = super::tls::generate(&work_dir.join("tls"))?;
    let mut ports = Vec::new();
    for _ in 0..MEMBERS {
        ports.push(Ports {
            client: free_port()?,
            tls: free_port()?,
            peer: free_port()?,
        });
    }
    let dir = work_dir.join(format!("etcd3-{}", ports[0].client));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let initial_cluster: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("m{i}=http://127.0.0.1:{}", p.peer))
        .collect();
    let initial_cluster = initial_cluster.join(",");
    let mut cluster = Cluster {
        members: Vec::new(),
        ports: ports.clone(),
        dir: dir.clone(),
        ca: certs.ca.clone(),
        commands: Vec::new(),
    };
    for (i, p) in ports.iter().enumerate() {
        let client_urls = format!("http://127.0.0.1:{},https://127.0.0.1:{}", p.client, p.tls);
        let peer_url = format!("http://127.0.0.1:{}", p.peer);
        let data = dir.join(format!("m{i}.data"));
        let args: Vec<String> = vec![
            "--name".into(),
            format!("m{i}"),
            "--data-dir".into(),
            data.display().to_string(),
            "--listen-client-urls".into(),
            client_urls.clone(),
            "--advertise-client-urls".into(),
            client_urls,
            "--cert-file".into(),
            certs.cert.display().to_string(),
            "--key-file".into(),
            certs.key.display().to_string(),
            "--listen-peer-urls".into(),
            peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            peer_url,
            "--initial-cluster".into(),
            initial_cluster.clone(),
            "--initial-cluster-state".into(),
            "new".into(),
            "--initial-cluster-token".into(),
            format!("xtask-{}", ports[0].client),
            "--heartbeat-interval".into(),
            HEARTBEAT.as_millis().to_string(),
            "--election-timeout".into(),
            ELECTION_TIMEOUT.as_millis().to_string(),
        ];
        cluster.commands.push((binary.clone(), args));
        cluster.members.push(None);
        cluster.spawn(i)?;
    }
    let took = cluster
        .wait_healthy()
        .with_context(|| format!("see the members' logs in {}", dir.display()))?;
    println!(
        "etcd-3: 3 members healthy after {:.1}s, leader m{}",
        took.as_secs_f64(),
        cluster.leader().map_or("?".to_string(), |i| i.to_string())
    );
    let env = cluster.env();
    Ok(Started::external(env).with_guard(cluster))
}

/// SIGKILLs the leader of a cluster started by [`start`]; see the module docs.
pub(crate) fn degrade(started: &mut Started) -> Result<()> {
    let cluster = started
        .guard_mut::<Cluster>()
        .context("not an etcd-3 cluster")?;
    let victim = cluster
        .leader()
        .context("no member reports itself leader")?;
    let Some(mut child) = cluster.members.get_mut(victim).and_then(Option::take) else {
        bail!("member m{victim} is already gone");
    };
    println!("etcd-3: SIGKILL the leader m{victim} (pid {})", child.id());
    kill_tree(&mut child);
    let took = cluster.wait_healthy()?;
    println!(
        "etcd-3: the two others healthy {:.1}s after the kill, leader m{}",
        took.as_secs_f64(),
        cluster.leader().map_or("?".to_string(), |i| i.to_string())
    );
    let env = cluster.env();
    started.env = env;
    Ok(())
}

/// Chaos: SIGKILLs the leader, holds it down for `hold` (the two others
/// elect a new one), restarts it on its data (it rejoins as a follower),
/// waits `gap`, and again, until `stop`.
pub(crate) fn leader_faults(
    started: &mut Started,
    hold: Duration,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> Result<FailoverReport> {
    let cluster = started
        .guard_mut::<Cluster>()
        .context("not an etcd-3 cluster")?;
    let mut report = FailoverReport::default();
    if hold_for(gap, stop) {
        return Ok(report);
    }
    loop {
        let victim = cluster
            .leader()
            .context("no member reports itself leader")?;
        let Some(mut child) = cluster.members.get_mut(victim).and_then(Option::take) else {
            bail!("member m{victim} is already gone");
        };
        fault_line("etcd-3", &format!("SIGKILL the leader m{victim}"));
        kill_tree(&mut child);
        report.kills += 1;
        let took = cluster.wait_healthy()?;
        report.slowest_failover = report.slowest_failover.max(took);
        fault_line(
            "etcd-3",
            &format!(
                "new leader m{} after {:.1}s",
                cluster.leader().map_or("?".to_string(), |i| i.to_string()),
                took.as_secs_f64()
            ),
        );
        let stopped = hold_for(hold.saturating_sub(took), stop);
        cluster.spawn(victim)?;
        cluster.wait_healthy()?;
        report.rejoined += 1;
        fault_line("etcd-3", &format!("m{victim} restarted and healthy"));
        if stopped || hold_for(gap, stop) {
            return Ok(report);
        }
    }
}

/// What `/v3/maintenance/status` says of a member.
struct Status {
    member: String,
    leader: String,
}

impl Status {
    fn is_leader(&self) -> bool {
        !self.member.is_empty() && self.member == self.leader
    }
}

/// `POST /v3/maintenance/status` (the gRPC gateway) of the member at `addr`.
fn status(addr: SocketAddr) -> Option<Status> {
    let ask = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        let body = "{}";
        write!(
            stream,
            "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    };
    parse_status(&ask().ok()?)
}

/// The member id and leader id in a status answer (headers and JSON body).
fn parse_status(answer: &str) -> Option<Status> {
    let body = answer.split_once("\r\n\r\n").map_or(answer, |(_, b)| b);
    let json: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Some(Status {
        member: text(&json["header"]["member_id"])?,
        leader: text(&json["leader"])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_kill_can_extend_a_dead_holders_lease_by_its_ttl_and_three_election_timeouts() {
        assert_eq!(
            failover_takeover_slack(Duration::from_secs(4)),
            Duration::from_millis(5_500)
        );
        assert_eq!(
            failover_takeover_slack(Duration::from_millis(2_500)),
            Duration::from_millis(4_500)
        );
    }

    #[test]
    fn a_status_answer_names_the_leader() {
        let answer = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n\
            {\"header\":{\"cluster_id\":\"1\",\"member_id\":\"42\",\"revision\":\"5\"},\
            \"version\":\"3.4.23\",\"leader\":\"42\",\"raftTerm\":\"2\"}";
        assert!(parse_status(answer).unwrap().is_leader());
        let follower = answer.replace("\"leader\":\"42\"", "\"leader\":\"7\"");
        assert!(!parse_status(&follower).unwrap().is_leader());
        assert!(parse_status("HTTP/1.0 500\r\n\r\nnope").is_none());
    }
}
