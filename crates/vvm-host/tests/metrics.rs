//! `--metrics-listen`: two real vvm-host processes share one redb file;
//! their `/metrics` show the leader gauge move across a handover (1 -> 0 on
//! the old leader, 0 -> 1 on the new one) and their `/healthz` answer as
//! docs/metrics.md says: 200 with the role while healthy, 503 once the
//! store fails, the leadership is lost or shutdown has begun.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

/// Ignores SIGTERM, so the process stays up for its grace period after it
/// was asked to stop: long enough to be scraped.
const COMMAND: &str = "trap '' TERM; echo leading; while :; do sleep 0.05; done";

const KEY: &str = "e2e/1";

/// One HTTP/1.1 GET; the status code and the body.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// The leader gauge of [`KEY`] in a `/metrics` text, if it is there.
fn leader_gauge(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|line| {
            line.starts_with("elections_leader{") && line.contains(&format!("key=\"{KEY}\""))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

fn health(addr: SocketAddr) -> Option<(u16, Value)> {
    let (code, body) = get(addr, "/healthz")?;
    Some((code, serde_json::from_str(&body).unwrap()))
}

/// Polls `check` every 20 ms until it returns `Some`; panics after [`LIMIT`].
fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(started.elapsed() < LIMIT, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

struct Node {
    child: Child,
    addr: SocketAddr,
    /// The command's output: it prints `leading` once it runs (and ignores
    /// SIGTERM).
    stdout: mpsc::Receiver<String>,
    _stderr: mpsc::Receiver<String>,
}

/// A failed assertion must not leave the node running (its command ignores
/// SIGTERM).
impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(storage: &str, fault_file: &Path, grace: &str) -> Node {
    std::fs::write(fault_file, "").unwrap();
    let mut child = vvm_host(&[
        "--storage",
        storage,
        "--leadership-duration",
        "4s",
        "--retry-pause",
        "200ms",
        "--grace-period",
        grace,
        "--metrics-listen",
        "127.0.0.1:0",
        "--",
        "bash",
        "-c",
        COMMAND,
    ])
    .env("VVM_HOST_FAULT_FILE", fault_file)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (stdout, _) = lines(child.stdout.take().unwrap());
    let (rx, _) = lines(child.stderr.take().unwrap());
    let line = wait_for_line(&rx, "metrics endpoint listening");
    let addr = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("address="))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .parse()
        .unwrap();
    Node {
        child,
        addr,
        stdout,
        _stderr: rx,
    }
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn leader_gauge_moves_across_a_handover_and_healthz_follows() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("redb://{}", dir.path().join("x.redb").display());
    let (fault_a, fault_b) = (dir.path().join("fault-a"), dir.path().join("fault-b"));

    // A leads.
    let mut a = start(&storage, &fault_a, "1s");
    let (code, leader) = until("A to lead", || {
        health(a.addr).filter(|(_, body)| body["role"] == "leader")
    });
    assert_eq!(code, 200, "{leader}");
    assert_eq!(leader["status"], "ok");
    assert_eq!(leader["key"], KEY);
    assert_eq!(leader["key_index"], 1);
    assert_eq!(leader["lease_duration_ms"], 4000);
    let expires = leader["expires_in_ms"]
        .as_u64()
        .expect("expiry while leading");
    assert!(expires <= 4000, "{leader}");
    let token_a = leader["fencing_token"].as_u64().expect("a fencing token");
    let metrics = get(a.addr, "/metrics").unwrap().1;
    assert_eq!(leader_gauge(&metrics), Some(1.0), "{metrics}");
    // The storage decorator reports the real driver's calls.
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ttl_storage_operations_total{") && l.contains("store=\"redb\"")),
        "{metrics}"
    );
    // Every metric family has its `# HELP` line.
    for family in metrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = family.split_whitespace().next().unwrap_or_default();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(&format!("# HELP {name} "))),
            "no # HELP for {name}: {metrics}"
        );
    }

    // B waits as a standby, its gauge at 0.
    let mut b = start(&storage, &fault_b, "3s");
    let (code, standby) = until("B on standby", || {
        health(b.addr).filter(|(_, body)| body["role"] == "standby")
    });
    assert_eq!(code, 200, "{standby}");
    assert_eq!(standby["status"], "ok");
    assert!(standby["key"].is_null() && standby["fencing_token"].is_null());
    until("B's gauge at 0", || {
        leader_gauge(&get(b.addr, "/metrics")?.1).filter(|v| *v == 0.0)
    });

    // B's store fails: 503 store_lost; it recovers when the store does.
    std::fs::write(&fault_b, "error").unwrap();
    let (code, lost) = until("B to report its store lost", || {
        health(b.addr).filter(|(_, body)| body["status"] == "store_lost")
    });
    assert_eq!(code, 503, "{lost}");
    assert!(lost["store_error"].as_str().unwrap().contains("injected"));
    std::fs::write(&fault_b, "").unwrap();
    until("B healthy again", || {
        health(b.addr).filter(|(code, body)| *code == 200 && body["role"] == "standby")
    });

    // Handover: A's store says the lease was taken. A's gauge drops to 0
    // while it is still up (its command ignores SIGTERM for a second)...
    wait_for_line(&a.stdout, "leading");
    std::fs::write(&fault_a, "lost").unwrap();
    until("A's gauge at 0", || {
        leader_gauge(&get(a.addr, "/metrics")?.1).filter(|v| *v == 0.0)
    });
    let (code, after) = until("A unhealthy", || {
        health(a.addr).filter(|(code, _)| *code == 503)
    });
    assert!(
        ["leadership_lost", "shutting_down"].contains(&after["status"].as_str().unwrap()),
        "{after}"
    );
    assert_eq!(code, 503);
    // ...and B takes over: its gauge goes to 1.
    until("B's gauge at 1", || {
        leader_gauge(&get(b.addr, "/metrics")?.1).filter(|v| *v == 1.0)
    });
    let (code, leader) = until("B to lead", || {
        health(b.addr).filter(|(_, body)| body["role"] == "leader")
    });
    assert_eq!(code, 200, "{leader}");
    assert!(
        leader["fencing_token"].as_u64().unwrap() > token_a,
        "{leader}"
    );
    assert_eq!(
        wait_with_limit(&mut a.child).code(),
        Some(123),
        "A lost its lease"
    );

    // Shutdown: B answers 503 while its command gets its grace period. Only
    // once the command runs (and ignores SIGTERM): a vvm-host stopped while
    // its command is still starting shuts down in milliseconds, too fast to
    // be seen answering.
    wait_for_line(&b.stdout, "leading");
    signal(&b.child, Signal::SIGTERM);
    let (_, stopping) = until("B to report shutting down", || {
        health(b.addr).filter(|(code, _)| *code == 503)
    });
    assert_eq!(stopping["status"], "shutting_down", "{stopping}");
    assert_eq!(wait_with_limit(&mut b.child).code(), Some(0));
}
