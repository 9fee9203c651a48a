//! Priorities with hold-down, with real processes on a shared redb store
//! and 2 s leases: a higher-priority node started after a lower one leads
//! after the hold-down, by a graceful hand-over (the old command stopped
//! first, the fencing token grows); equal priorities never preempt; a
//! higher-priority node that comes and goes (killed every second) never
//! takes over; the leader that took over by a preemption is not preempted
//! again within its minimum tenure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use common::*;

/// What each node runs while leading: says so (with its fencing token) on
/// stdout and in the shared events file, and, told to stop, notes that in
/// the events file before it exits.
const SCRIPT: &str = r#"trap 'echo "stopped $ADDR" >> "$EVENTS"; exit 0' TERM
echo "leading $ADDR $VVM_HOST_FENCING_TOKEN" >> "$EVENTS"
echo "leading $ADDR $VVM_HOST_FENCING_TOKEN"
sleep 1000 & wait"#;

struct Node {
    child: Child,
    out: mpsc::Receiver<String>,
    log: Option<thread::JoinHandle<String>>,
}

/// A failed assertion must not leave a node running.
impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Its log, once it has exited.
    fn log(&mut self) -> String {
        self.log
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default()
    }

    fn assert_silent(&self, what: &str, for_: Duration) {
        if let Ok(line) = self.out.recv_timeout(for_) {
            panic!("{what} started its command: {line}");
        }
    }

    fn assert_running(&mut self, what: &str) {
        assert!(self.child.try_wait().unwrap().is_none(), "{what} exited");
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    storage: String,
    events: PathBuf,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let storage = format!("redb://{}", dir.path().join("locks.redb").display());
        let events = dir.path().join("events");
        Cluster {
            _dir: dir,
            storage,
            events,
        }
    }

    fn node(&self, address: &str, priority: i32, extra: &[&str]) -> Node {
        let mut child = Command::new(bin())
            .args(["run", "--address", address, "--log", "info"])
            .args(["--storage", &self.storage, "--leadership-duration", "2s"])
            .args(["--priority", &priority.to_string()])
            .args(extra)
            .args([NAME, "--", "sh", "-c", SCRIPT])
            .env("ADDR", address)
            .env("EVENTS", &self.events)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, _) = lines(child.stdout.take().unwrap());
        let (_, log) = lines(child.stderr.take().unwrap());
        Node {
            child,
            out,
            log: Some(log),
        }
    }

    fn events(&self) -> Vec<String> {
        read_lines(&self.events)
    }

    /// `vvm-host status --json` for key 1.
    fn status(&self) -> serde_json::Value {
        let out = Command::new(bin())
            .args(["status", "--json", "--storage", &self.storage, NAME])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        json.pointer("/keys/0").cloned().unwrap_or_default()
    }

    /// Waits until `address` is listed as waiting; its `waiting` entry.
    fn wait_waiting(&self, address: &str) -> serde_json::Value {
        let deadline = Instant::now() + LIMIT;
        loop {
            let status = self.status();
            if let Some(found) = status["waiting"].as_array().and_then(|w| {
                w.iter().find(|c| {
                    c["address"]
                        .as_str()
                        .is_some_and(|a| a.starts_with(&format!("{address}#")))
                })
            }) {
                return found.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{address} never listed: {status}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn token(line: &str) -> u64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_higher_priority_node_leads_after_the_hold_down_by_a_graceful_hand_over() {
    let cluster = Cluster::new();
    let mut alpha = cluster.node("alpha", 0, &[]);
    let first = wait_for_line(&alpha.out, "leading alpha");

    let started = Instant::now();
    let bravo = cluster.node("bravo", 5, &[]);
    let listed = cluster.wait_waiting("bravo");
    assert_eq!(listed["priority"], 5, "{listed}");
    // Default hold-down: two 2 s leases. Not before it.
    bravo.assert_silent("bravo, before the hold-down", Duration::from_secs(3));
    let second = wait_for_line(&bravo.out, "leading bravo");
    let after = started.elapsed();
    assert!(after >= Duration::from_secs(4), "bravo led after {after:?}");
    println!("bravo led {after:?} after it started");

    // Graceful: alpha's command stopped before bravo's started, alpha
    // exited 0 saying why, and the token grew.
    assert_eq!(wait_with_limit(&mut alpha.child).code(), Some(0));
    let log = alpha.log();
    assert!(log.contains("higher-priority candidate"), "{log}");
    let events = cluster.events();
    assert_eq!(
        events,
        [first.clone(), "stopped alpha".into(), second.clone()],
        "events"
    );
    assert!(token(&second) > token(&first), "{first} then {second}");
}

#[test]
fn equal_priorities_never_preempt() {
    let cluster = Cluster::new();
    let hold = ["--preempt-after", "2s", "--min-tenure", "0s"];
    let mut alpha = cluster.node("alpha", 3, &hold);
    let first = wait_for_line(&alpha.out, "leading alpha");
    let bravo = cluster.node("bravo", 3, &hold);
    cluster.wait_waiting("bravo");
    // Four hold-downs: bravo still waits, alpha still leads.
    bravo.assert_silent("bravo (equal priority)", Duration::from_secs(8));
    alpha.assert_running("alpha");
    let waiting = cluster.wait_waiting("bravo");
    assert_eq!(waiting["priority"], 3, "{waiting}");
    let standing = waiting["standing_ms"].as_u64().unwrap();
    assert!(standing >= 7_000, "bravo standing for {standing} ms");
    let text = Command::new(bin())
        .args(["status", "--storage", &cluster.storage, NAME])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("waiting: bravo#") && l.contains("(priority 3, for ")),
        "{text}"
    );
    assert_eq!(cluster.events(), [first]);
}

#[test]
fn a_higher_priority_node_that_comes_and_goes_never_takes_over() {
    let cluster = Cluster::new();
    let mut alpha = cluster.node("alpha", 0, &[]);
    let first = wait_for_line(&alpha.out, "leading alpha");
    // Up 1 s, down 1 s (SIGKILL: its record stays until it expires), for
    // three hold-downs (default: 4 s).
    let until = Instant::now() + Duration::from_secs(12);
    let mut rounds = 0;
    while Instant::now() < until {
        let flapper = cluster.node("flapper", 9, &[]);
        flapper.assert_silent("the flapping node", Duration::from_secs(1));
        drop(flapper);
        thread::sleep(Duration::from_secs(1));
        rounds += 1;
    }
    alpha.assert_running("alpha");
    assert_eq!(cluster.events(), [first], "after {rounds} flaps");
    // The control: one that stays takes over after its hold-down.
    let steady = cluster.node("steady", 9, &[]);
    wait_for_line(&steady.out, "leading steady");
    assert_eq!(wait_with_limit(&mut alpha.child).code(), Some(0));
}

#[test]
fn a_leader_that_took_over_is_not_preempted_again_within_its_tenure() {
    let cluster = Cluster::new();
    let hold = ["--preempt-after", "2s", "--min-tenure", "6s"];
    let mut alpha = cluster.node("alpha", 0, &["--preempt-after", "2s"]);
    wait_for_line(&alpha.out, "leading alpha");
    // alpha has led longer than its tenure once bravo has stood 2 s.
    thread::sleep(Duration::from_secs(2));
    let mut bravo = cluster.node("bravo", 5, &hold);
    let second = wait_for_line(&bravo.out, "leading bravo");
    let took_over = Instant::now();
    assert_eq!(wait_with_limit(&mut alpha.child).code(), Some(0));

    // charlie outranks bravo and stands for three hold-downs, but bravo's
    // tenure (6 s) comes first.
    let charlie = cluster.node("charlie", 9, &hold);
    let third = wait_for_line(&charlie.out, "leading charlie");
    let tenure = took_over.elapsed();
    assert!(
        tenure >= Duration::from_millis(5_500),
        "bravo preempted after {tenure:?}"
    );
    println!("bravo led for {tenure:?}");
    assert_eq!(wait_with_limit(&mut bravo.child).code(), Some(0));
    assert!(token(&third) > token(&second));
    let events = cluster.events();
    assert_eq!(
        &events[events.len() - 3..],
        [second, "stopped bravo".into(), third],
        "events"
    );
}
