//! Issue 34 with real `vvm-host` processes on one shared redb file: the
//! cases that are about the program (2, 3, 5, 8). Each node's command
//! prints `leading NAME TOKEN` when it starts and takes a while to stop
//! (`stopping NAME`, then `stopped NAME`); faults come from outside
//! (SIGKILL, SIGTERM). Run these against another build with
//! `VVM_HOST_TEST_BIN=/path/to/vvm-host`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use common::*;
use nix::sys::signal::Signal;

/// The command: says when it leads, takes `stop` seconds to stop on SIGTERM.
fn script(stop: u32) -> String {
    format!(
        r#"trap 'echo "stopping $N"; sleep {stop}; echo "stopped $N"; exit 0' TERM; echo "leading $N $VVM_HOST_FENCING_TOKEN"; while :; do sleep 0.05; done"#
    )
}

struct Node {
    child: Child,
    out: mpsc::Receiver<String>,
    seen: Vec<String>,
}

/// A failed assertion must not leave a node running.
impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Lines printed so far (kept).
    fn lines(&mut self) -> &[String] {
        while let Ok(line) = self.out.try_recv() {
            self.seen.push(line);
        }
        &self.seen
    }

    fn said(&mut self, what: &str) -> bool {
        self.lines().iter().any(|l| l.contains(what))
    }

    fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + LIMIT;
        while !self.said(what) {
            assert!(Instant::now() < deadline, "never printed {what:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// alpha (3 s to stop its command) leading `common::NAME`, and bravo (1 s)
/// listed as its candidate.
fn alpha_leading_bravo_waiting(storage: &str) -> (Node, Node) {
    let mut alpha = node(storage, common::NAME, "alpha", 3);
    alpha.wait_for("leading alpha");
    let bravo = node(storage, common::NAME, "bravo", 1);
    wait_for_candidates(storage, common::NAME, 1);
    (alpha, bravo)
}

fn node(storage: &str, lock: &str, name: &str, stop: u32) -> Node {
    let script = script(stop);
    let rest = ["--grace-period", "10s", lock, "--", "sh", "-c", &script];
    let (child, out) = spawn_node(storage, name, &rest, ("N", name));
    Node {
        child,
        out,
        seen: Vec::new(),
    }
}

fn handover(storage: &str, lock: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command
        .args(["handover", "--storage", storage])
        .args(args)
        .arg(lock)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn redb(dir: &tempfile::TempDir) -> String {
    format!("redb://{}", dir.path().join("locks.redb").display())
}

/// The longest lock name accepted: its candidate slots of the largest
/// cluster still fit the 512-byte key limit.
fn longest_name() -> String {
    "n".repeat(512 - "__candidates__/00/".len() - "/1024".len())
}

/// Case 2: a hand-over request of lock `web` never touches lock
/// `web/handover-bell`'s lease. (Before: its bell key was
/// `web/handover-bell/1`, the other lock's lease, and the requester deleted
/// it: that lock's standby started beside its running holder.)
#[test]
fn case2_a_hand_over_request_never_touches_another_locks_lease() {
    let dir = tempfile::tempdir().unwrap();
    let storage = redb(&dir);
    let mut holder = node(&storage, "web/handover-bell", "holder", 1);
    holder.wait_for("leading holder");
    let mut standby = node(&storage, "web/handover-bell", "standby", 1);
    wait_for_candidates(&storage, "web/handover-bell", 1);
    let mut w1 = node(&storage, "web", "w1", 1);
    w1.wait_for("leading w1");
    let mut w2 = node(&storage, "web", "w2", 1);
    wait_for_candidates(&storage, "web", 1);

    let (code, out, err) = text(&handover(&storage, "web", &[]).output().unwrap());
    assert_eq!(code, 0, "handover web: {out}{err}");
    w2.wait_for("leading w2");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !standby.said("leading standby"),
        "the other lock's standby started beside its holder: {:?}",
        standby.lines()
    );
    assert!(!holder.said("stopping"), "the other lock's holder stopped");
}

/// Case 2, every name at once: locks whose names are other locks' record
/// names (`a/1`, `a/size`, `a/handover`, `a/handover-bell`), a unicode
/// name and the longest name accepted all lead side by side; hand-overs of
/// `a` and of the longest name work, and touch nobody else. (Before: the
/// request of `a` was `a/handover/1`, the lease of lock `a/handover`:
/// "another request is pending", exit 7.)
#[test]
fn case2_locks_named_like_records_are_independent_locks() {
    let dir = tempfile::tempdir().unwrap();
    let storage = redb(&dir);
    let longest = longest_name();
    let names = [
        "a",
        "a/1",
        "a/size",
        "a/handover",
        "a/handover-bell",
        "ключ/🔒",
        longest.as_str(),
    ];
    let mut leaders: Vec<Node> = names
        .iter()
        .enumerate()
        .map(|(i, lock)| node(&storage, lock, &format!("l{i}"), 1))
        .collect();
    for (i, leader) in leaders.iter_mut().enumerate() {
        leader.wait_for(&format!("leading l{i}"));
    }
    for (lock, leader) in [("a", 0), (longest.as_str(), names.len() - 1)] {
        let mut successor = node(&storage, lock, "successor", 1);
        wait_for_candidates(&storage, lock, 1);
        let (code, out, err) = text(&handover(&storage, lock, &[]).output().unwrap());
        assert_eq!(code, 0, "handover {lock}: {out}{err}");
        successor.wait_for("leading successor");
        leaders[leader].wait_for("stopped");
    }
    std::thread::sleep(Duration::from_secs(2));
    for (i, leader) in leaders.iter_mut().enumerate() {
        if i != 0 && i != names.len() - 1 {
            assert!(
                !leader.said("stopping"),
                "lock {:?} was touched: {:?}",
                names[i],
                leader.lines()
            );
        }
    }
    // One byte more is refused up front.
    let (code, _, err) = text(
        &handover(&storage, &format!("{longest}n"), &[])
            .output()
            .unwrap(),
    );
    assert_eq!(code, 2, "{err}");
}

/// Case 3: the leader accepted the request and is stopping its command
/// when it is SIGKILLed, before it could answer. Whoever leads next (once
/// the lease expires) finds the request addressed to its predecessor and
/// ignores it: one request moves the lock once. (Before: the next leader
/// served it again and handed the lock on at once.) The requester says
/// what the store shows.
#[test]
fn case3_a_request_is_served_once_when_its_leader_dies_before_answering() {
    let dir = tempfile::tempdir().unwrap();
    let storage = redb(&dir);
    let (mut alpha, mut bravo) = alpha_leading_bravo_waiting(&storage);
    let mut charlie = node(&storage, common::NAME, "charlie", 1);
    wait_for_candidates(&storage, common::NAME, 2);

    let requester = handover(&storage, common::NAME, &["--timeout", "40s"])
        .spawn()
        .unwrap();
    alpha.wait_for("stopping alpha");
    signal(&alpha.child, Signal::SIGKILL);
    let deadline = Instant::now() + LIMIT;
    let first = loop {
        if bravo.said("leading bravo") {
            break "bravo";
        }
        if charlie.said("leading charlie") {
            break "charlie";
        }
        assert!(Instant::now() < deadline, "nobody led after alpha died");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_secs(4));
    let (successor, other, other_name) = if first == "bravo" {
        (&mut bravo, &mut charlie, "charlie")
    } else {
        (&mut charlie, &mut bravo, "bravo")
    };
    assert!(
        !successor.said("stopping"),
        "{first} led, then stopped: the same request was served again"
    );
    assert!(
        !other.said(&format!("leading {other_name}")),
        "{first} led, then the same request moved the lock on to {other_name}"
    );
    let (code, out, err) = text(&requester.wait_with_output().unwrap());
    std::thread::sleep(Duration::from_secs(2));
    let successor = if first == "bravo" {
        &mut bravo
    } else {
        &mut charlie
    };
    assert!(
        successor.child.try_wait().unwrap().is_none(),
        "{first} led, then the same request ended its leadership (the requester was told: {out}{err})"
    );
    // What the store shows: the accepted candidate leads (0), or alpha's
    // leadership ended without handing over (125). Any other answer came
    // from a later leader serving a request that was not its own.
    match code {
        0 => assert!(out.contains(first), "{out}{err}"),
        125 => assert!(
            err.contains("without handing over"),
            "answered by a later leader: {err}"
        ),
        _ => panic!("handover exited {code}: {out}{err}"),
    }
}

/// Case 5: `--to bravo`, and bravo leaves (SIGTERM) while alpha's command
/// stops. alpha must not hand over to charlie instead: it releases, and
/// the requester is told so (not "handed over to charlie"). With --to
/// naming nobody, the request is refused and nothing stops.
#[test]
fn case5_to_a_candidate_that_left_is_never_handed_to_another() {
    let dir = tempfile::tempdir().unwrap();
    let storage = redb(&dir);
    let (mut alpha, mut bravo) = alpha_leading_bravo_waiting(&storage);
    let _charlie = node(&storage, common::NAME, "charlie", 1);
    wait_for_candidates(&storage, common::NAME, 2);

    let (code, out, err) = text(
        &handover(&storage, common::NAME, &["--to", "ghost"])
            .output()
            .unwrap(),
    );
    assert_eq!(code, 5, "--to ghost: {out}{err}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !alpha.said("stopping"),
        "alpha stopped for a refused request"
    );

    let requester = handover(&storage, common::NAME, &["--to", "bravo"])
        .spawn()
        .unwrap();
    alpha.wait_for("stopping alpha");
    signal(&bravo.child, Signal::SIGTERM);
    wait_with_limit(&mut bravo.child);
    let (code, out, err) = text(&requester.wait_with_output().unwrap());
    assert!(
        !out.contains("charlie"),
        "asked for bravo, told it went to charlie: {out}{err}"
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("released") && err.contains("bravo"), "{err}");
}

/// Case 8: the requester gives up (--timeout 1s) while the leader's
/// command takes 3 s to stop. Either its withdrawal won (exit 6) and
/// nothing happens, or it is told the leader had begun: never exit 6 and
/// then a hand-over anyway. Also with --to and a 1 ms timeout.
#[test]
fn case8_a_withdrawn_request_is_never_served() {
    for args in [
        &["--timeout", "1s"][..],
        &["--to", "bravo", "--timeout", "1ms"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let storage = redb(&dir);
        let (mut alpha, mut bravo) = alpha_leading_bravo_waiting(&storage);
        let (code, out, err) = text(&handover(&storage, common::NAME, args).output().unwrap());
        eprintln!("{args:?}: exit {code}: {out}{err}");
        std::thread::sleep(Duration::from_secs(5));
        let handed = bravo.said("leading bravo");
        assert_eq!(
            code == 6,
            !handed,
            "{args:?}: exit {code} ({out}{err}), and bravo led: {handed}"
        );
        if code == 6 {
            assert!(err.contains("withdrawn"), "{err}");
            assert!(
                !alpha.said("stopping"),
                "alpha stopped for a withdrawn request"
            );
        }
    }
}
