//! Membership changes of the 3-member cluster while `cargo xtask chaos
//! --engine etcd-3 --topology` runs: a member is removed from the cluster
//! (`MemberRemove`: it shuts itself down), then added back as a new member
//! (`MemberAdd`, a fresh data directory, `--initial-cluster-state
//! existing`: it catches up from the leader's snapshot and log). The first
//! victim is the Raft leader (a removed leader steps down: an election),
//! then a follower, in turn.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{Cluster, READY_TIMEOUT};
use crate::engines::{
    Started,
    failover::{fault_line, hold_for},
    kill_tree,
};

/// What the membership changes of one run did.
#[derive(Debug, Default)]
pub(crate) struct MembershipReport {
    /// Members removed (the leader among them: `leaders_removed`).
    pub(crate) removed: u32,
    /// Of those, the Raft leader at the time.
    pub(crate) leaders_removed: u32,
    /// Members added back and healthy again.
    pub(crate) readded: u32,
    /// Slowest time from a `MemberAdd` until every member was healthy.
    pub(crate) slowest_rejoin: Duration,
}

impl std::fmt::Display for MembershipReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "membership: {} members removed ({} of them the leader), {} added back \
             (healthy within {:.1}s of MemberAdd)",
            self.removed,
            self.leaders_removed,
            self.readded,
            self.slowest_rejoin.as_secs_f64()
        )
    }
}

/// Removes a member (the leader first, then a follower, in turn), holds
/// it out for `hold`, adds it back on a fresh data directory, waits until
/// all three are healthy, waits `gap`, and again, until `stop`.
pub(crate) fn membership_changes(
    started: &mut Started,
    hold: Duration,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> Result<MembershipReport> {
    let cluster = started
        .guard_mut::<Cluster>()
        .context("not an etcd-3 cluster")?;
    let mut report = MembershipReport::default();
    if hold_for(gap, stop) {
        return Ok(report);
    }
    let mut round = 0usize;
    loop {
        round += 1;
        let leader = cluster
            .leader()
            .context("no member reports itself leader")?;
        let victim = match round % 2 {
            1 => leader,
            _ => (leader + 1) % cluster.members.len(),
        };
        let other = (victim + 1) % cluster.members.len();
        let name = format!("m{victim}");
        let members = member_list(cluster.client_addr(other))?;
        let id = members
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.id.clone())
            .with_context(|| format!("{name} is not in the member list"))?;
        fault_line(
            "etcd-3",
            &format!(
                "MemberRemove {name}{}",
                if victim == leader {
                    " (the leader)"
                } else {
                    ""
                }
            ),
        );
        // etcd refuses a removal ("unhealthy cluster") until every other
        // member has been connected for its health interval (5 s): retry.
        let body = format!("{{\"ID\":\"{id}\"}}");
        let asked = Instant::now();
        loop {
            match post(
                cluster.client_addr(other),
                "/v3/cluster/member/remove",
                &body,
            ) {
                Ok(_) => break,
                Err(err)
                    if err.to_string().contains("unhealthy cluster")
                        && asked.elapsed() < READY_TIMEOUT =>
                {
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(err) => return Err(err),
            }
        }
        report.removed += 1;
        report.leaders_removed += u32::from(victim == leader);
        // A removed member shuts itself down; make sure.
        if let Some(mut child) = cluster.members.get_mut(victim).and_then(Option::take) {
            let until = Instant::now() + Duration::from_secs(5);
            while child.try_wait()?.is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
            kill_tree(&mut child);
        }
        cluster.wait_healthy()?;
        fault_line(
            "etcd-3",
            &format!(
                "{name} removed; leader m{}",
                cluster.leader().map_or("?".to_string(), |i| i.to_string())
            ),
        );
        let stopped = hold_for(hold, stop);
        // Back as a new member: the same name and URLs, a fresh data dir.
        let peer = format!("http://127.0.0.1:{}", cluster.ports[victim].peer);
        fault_line("etcd-3", &format!("MemberAdd {name} ({peer})"));
        post(
            cluster.client_addr(other),
            "/v3/cluster/member/add",
            &format!("{{\"peerURLs\":[\"{peer}\"]}}"),
        )?;
        let adding = Instant::now();
        cluster.rejoin(victim)?;
        cluster.wait_healthy()?;
        let took = adding.elapsed();
        report.readded += 1;
        report.slowest_rejoin = report.slowest_rejoin.max(took);
        fault_line(
            "etcd-3",
            &format!(
                "{name} added back, all healthy {:.1}s after MemberAdd",
                took.as_secs_f64()
            ),
        );
        if stopped || hold_for(gap, stop) {
            return Ok(report);
        }
    }
}

/// A member as `/v3/cluster/member/list` names it.
#[derive(Debug, PartialEq)]
struct Member {
    id: String,
    name: String,
}

/// `POST /v3/cluster/member/list` of the member at `addr`.
fn member_list(addr: SocketAddr) -> Result<Vec<Member>> {
    parse_members(&post(addr, "/v3/cluster/member/list", "{}")?)
}

/// The members of a member-list answer's JSON body (a member added but
/// not started yet has an empty name).
fn parse_members(body: &str) -> Result<Vec<Member>> {
    let json: serde_json::Value =
        serde_json::from_str(body.trim()).with_context(|| format!("bad member list {body:?}"))?;
    let members = json["members"]
        .as_array()
        .with_context(|| format!("no members in {body:?}"))?;
    Ok(members
        .iter()
        .filter_map(|m| {
            let id = match &m["ID"] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                _ => return None,
            };
            let name = m["name"].as_str()?.to_string();
            Some(Member { id, name })
        })
        .collect())
}

/// `POST path` with a JSON `body` to the gRPC gateway at `addr`; the
/// answer's body, or an error with it if the status is not 200.
fn post(addr: SocketAddr, path: &str, body: &str) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(READY_TIMEOUT))?;
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if !head.lines().next().is_some_and(|l| l.contains(" 200 ")) {
        bail!("POST {path} to {addr}: {}", answer.trim());
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lists_name_ids_as_strings() {
        let body = r#"{"header":{"cluster_id":"1"},"members":[
            {"ID":"10276657743932975437","name":"m0","peerURLs":["http://127.0.0.1:1"]},
            {"ID":"2","name":"","peerURLs":["http://127.0.0.1:2"]},
            {"ID":"3","name":"m2"}]}"#;
        let members = parse_members(body).unwrap();
        assert_eq!(
            members,
            [
                Member {
                    id: "10276657743932975437".into(),
                    name: "m0".into()
                },
                Member {
                    id: "2".into(),
                    name: String::new()
                },
                Member {
                    id: "3".into(),
                    name: "m2".into()
                },
            ]
        );
        assert!(parse_members("{}").is_err());
    }
}
