//! The design's manual failover scenario with real `vvm-host` processes,
//! shared by the failover tests of each store (`tests/failover.rs`,
//! `tests/kube.rs`): see `tests/failover.rs` for what it proves.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;

use super::*;

/// The command each node runs while leading.
pub const SCRIPT: &str = r#"
exec 9>>"$LOCK"
flock -n 9 || { echo "overlap $NODE" >> "$EVENTS"; exit 99; }
# Before "leading": the test stops the leader as soon as it reads that.
trap 'echo "stop $NODE $(date +%s%N)" >> "$EVENTS"; exit 0' TERM
echo "start $NODE $(date +%s%N)" >> "$EVENTS"
echo "leading $NODE"
while :; do sleep 0.05; done
"#;

/// vvm-host's default lease and retry pause (`--leadership-duration`,
/// `--retry-pause`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(20);
pub const DEFAULT_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A cluster of named vvm-host nodes sharing one storage.
pub struct Cluster {
    dir: tempfile::TempDir,
    storage: Option<String>,
    /// Options given to every node (none: vvm-host's defaults).
    options: Vec<String>,
    nodes: HashMap<&'static str, Child>,
    tx: mpsc::Sender<(String, String)>,
    rx: mpsc::Receiver<(String, String)>,
}

impl Cluster {
    pub fn new(storage: Option<String>, options: &[&str]) -> Cluster {
        let (tx, rx) = mpsc::channel();
        Cluster {
            dir: tempfile::tempdir().unwrap(),
            storage,
            options: options.iter().map(|o| (*o).to_owned()).collect(),
            nodes: HashMap::new(),
            tx,
            rx,
        }
    }

    pub fn events(&self) -> PathBuf {
        self.dir.path().join("events.log")
    }

    pub fn start(&mut self, name: &'static str) {
        let mut args: Vec<&str> = self.options.iter().map(String::as_str).collect();
        if let Some(url) = &self.storage {
            args.extend(["--storage", url]);
        }
        args.extend(["--", "bash", "-c", SCRIPT]);
        let mut command = vvm_host(&args);
        if self.storage.is_none() {
            // The default storage, in a data directory of this test's own.
            command
                .env_remove("VVM_HOST_STORAGE")
                .env("XDG_DATA_HOME", self.dir.path().join("data"));
        }
        let mut child = command
            .env("NODE", name)
            .env("LOCK", self.dir.path().join("lock"))
            .env("EVENTS", self.events())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let tx = self.tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send((name.to_owned(), line));
            }
        });
        self.nodes.insert(name, child);
    }

    /// The name of the next node whose command starts leading.
    pub fn next_leader(&self) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (name, line) = self.rx.recv_timeout(left).expect("nobody took over");
            if line == format!("leading {name}") {
                return name;
            }
        }
    }

    /// Stops node `name` with `sig`; returns its exit code.
    pub fn stop(&mut self, name: &str, sig: Signal) -> Option<i32> {
        let mut child = self.nodes.remove(name).unwrap();
        signal(&child, sig);
        wait_with_limit(&mut child).code()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.nodes.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `(node, event, unix ns)` lines of the event log, and overlap reports.
pub fn read_events(path: &Path) -> (Vec<(String, String, u128)>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut events = Vec::new();
    let mut overlaps = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["overlap", node] => overlaps.push((*node).to_owned()),
            [event, node, ns] => {
                events.push(((*node).to_owned(), (*event).to_owned(), ns.parse().unwrap()))
            }
            _ => panic!("bad event line {line:?}"),
        }
    }
    (events, overlaps)
}

/// Starts and stops alternate, each stop by the node that started last
/// (a node killed with SIGKILL writes no stop: `crashed`), and nobody ever
/// found the lock taken. Returns the gaps between a stop and the next start.
pub fn check_history(path: &Path, crashed: &str) -> Vec<Duration> {
    let (events, overlaps) = read_events(path);
    assert!(overlaps.is_empty(), "overlaps: {overlaps:?}\n{events:?}");
    let mut gaps = Vec::new();
    let mut running: Option<&str> = None;
    let mut stopped_at: Option<u128> = None;
    for (node, event, ns) in &events {
        match (event.as_str(), running) {
            ("start", None) => {
                if let Some(stop) = stopped_at {
                    gaps.push(Duration::from_nanos(u64::try_from(ns - stop).unwrap()));
                }
                running = Some(node);
            }
            ("start", Some(leader)) if leader == crashed => running = Some(node),
            ("stop", Some(leader)) if leader == node => {
                running = None;
                stopped_at = Some(*ns);
            }
            _ => panic!("{node} {event} while {running:?} ran: {events:?}"),
        }
    }
    gaps
}

/// Three graceful handovers among A, B and C (each stopped leader is
/// restarted and waits); returns the cluster and the leader at the end.
pub fn three_handovers(cluster: &mut Cluster) -> &'static str {
    cluster.start("A");
    assert_eq!(cluster.next_leader(), "A");
    cluster.start("B");
    cluster.start("C");

    // Stop the leader, a standby takes over; restart the stopped node, it
    // waits.
    let mut leader = "A".to_owned();
    for _ in 0..3 {
        let stopped: &'static str = ["A", "B", "C"].into_iter().find(|n| *n == leader).unwrap();
        assert_eq!(cluster.stop(stopped, Signal::SIGTERM), Some(0));
        let next = cluster.next_leader();
        assert_ne!(next, stopped);
        cluster.start(stopped);
        leader = next;
    }
    ["A", "B", "C"].into_iter().find(|n| *n == leader).unwrap()
}

/// The whole scenario: three graceful handovers, the restarted nodes wait,
/// then SIGKILL of the leader: a standby takes over only once the lease can
/// have run out, and within the lease and a retry pause of the kill (plus
/// slack for a loaded machine).
pub fn scenario(storage: Option<String>, lease: Duration, options: &[&str]) {
    let mut cluster = Cluster::new(storage, options);
    let leader = three_handovers(&mut cluster);
    // The restarted nodes wait: nobody else leads while the leader runs.
    thread::sleep(Duration::from_millis(1500));
    assert!(cluster.rx.try_recv().is_err(), "a standby started leading");

    // A crash: the lease must run out before a standby takes over. The
    // leader renewed at most a quarter lease before the kill.
    let killed_at = Instant::now();
    cluster.stop(leader, Signal::SIGKILL);
    let next = cluster.next_leader();
    let takeover = killed_at.elapsed();
    assert_ne!(next, leader);

    let gaps = check_history(&cluster.events(), leader);
    println!(
        "graceful handover gaps (old command stopped -> new command started): {:?}",
        gaps.iter().take(3).collect::<Vec<_>>()
    );
    println!("takeover after SIGKILL of the leader: {takeover:?} (lease {lease:?})");
    assert_eq!(gaps.len(), 3, "{gaps:?}");
    assert!(
        takeover >= lease.mul_f64(0.75),
        "a standby led {takeover:?} after the kill, before the lease ({lease:?}) could have run out"
    );
    assert!(
        takeover <= lease + DEFAULT_RETRY_PAUSE + Duration::from_secs(5),
        "takeover took {takeover:?}: more than the lease ({lease:?}) and a retry pause"
    );
}
