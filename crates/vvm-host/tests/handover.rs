//! `vvm-host handover` with real processes: alpha leads, bravo and charlie
//! wait (bravo longer); `handover --to charlie` moves the lock to charlie
//! while bravo keeps waiting; `handover` (no --to) moves it to bravo, the
//! candidate that has waited longest; with nobody waiting, `handover`
//! refuses and the leader keeps leading. A `status --watch` started first
//! sees alpha, then charlie, then bravo.
//!
//! The store is a shared redb file (vvm-host's default kind), whose watch
//! wakes the leader and the candidate at once. The gaps from the request to
//! the successor's command start are printed (`-- --nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use common::*;

/// What each node runs while leading.
const SCRIPT: &str =
    r#"echo "leading $VVM_HOST_ADDRESS_FOR_TEST $VVM_HOST_FENCING_TOKEN"; exec sleep 1000"#;

struct Node {
    child: Child,
    out: mpsc::Receiver<String>,
}

/// A failed assertion must not leave a node running.
impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node(storage: &str, address: &str) -> Node {
    let rest = [NAME, "--", "sh", "-c", SCRIPT];
    let env = ("VVM_HOST_ADDRESS_FOR_TEST", address);
    let (child, out) = spawn_node(storage, address, &rest, env);
    Node { child, out }
}

fn handover(storage: &str, to: Option<&str>) -> (i32, String, String) {
    let mut command = Command::new(bin());
    command.args(["handover", "--storage", storage, "--timeout", "30s"]);
    if let Some(to) = to {
        command.args(["--to", to]);
    }
    text(&command.arg(NAME).stdin(Stdio::null()).output().unwrap())
}

fn assert_silent(node: &Node, what: &str) {
    if let Ok(line) = node.out.recv_timeout(Duration::from_millis(300)) {
        panic!("{what} started its command: {line}");
    }
}

#[test]
fn handover_to_a_named_candidate_then_to_the_longest_waiting_then_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("redb://{}", dir.path().join("locks.redb").display());

    let mut alpha = node(&storage, "alpha");
    let first = wait_for_line(&alpha.out, "leading alpha");
    let mut watch = Command::new(bin())
        .args(["status", "--watch", "--json", "--storage", &storage, NAME])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (watched, _) = lines(watch.stdout.take().unwrap());
    wait_for_line(&watched, "alpha");

    let mut bravo = node(&storage, "bravo");
    wait_for_candidates(&storage, NAME, 1);
    let mut charlie = node(&storage, "charlie");
    wait_for_candidates(&storage, NAME, 2);

    // To charlie by name: charlie leads, bravo keeps waiting, alpha exits 0.
    let asked = Instant::now();
    let (code, out, err) = handover(&storage, Some("charlie"));
    assert_eq!(code, 0, "handover --to charlie: {out}{err}");
    let started = wait_for_line(&charlie.out, "leading charlie");
    println!(
        "handover to charlie: command started {:?} after the request",
        asked.elapsed()
    );
    assert!(out.contains("charlie"), "{out}");
    assert_eq!(
        wait_with_limit(&mut alpha.child).code(),
        Some(0),
        "alpha's exit"
    );
    assert_silent(&bravo, "bravo");
    let token = |line: &str| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
    assert!(token(&started) > token(&first), "{first} then {started}");
    // handover prints the successor's real token, read back, not guessed
    let said = |out: &str| {
        out.rsplit("fencing token ")
            .next()
            .and_then(|t| t.trim().trim_end_matches(')').parse::<u64>().ok())
    };
    assert_eq!(said(&out), Some(token(&started)), "{out} / {started}");

    // The watcher polls (a hand-over is a swap, not a removal): let it see
    // charlie before the lock moves on.
    wait_for_line(&watched, "charlie");

    // No --to: bravo, the candidate that has waited longest.
    wait_for_candidates(&storage, NAME, 1);
    let asked = Instant::now();
    let (code, out, err) = handover(&storage, None);
    assert_eq!(code, 0, "handover: {out}{err}");
    let third = wait_for_line(&bravo.out, "leading bravo");
    println!(
        "handover to bravo: command started {:?} after the request",
        asked.elapsed()
    );
    assert_eq!(
        wait_with_limit(&mut charlie.child).code(),
        Some(0),
        "charlie's exit"
    );
    assert!(token(&third) > token(&started));
    assert_eq!(said(&out), Some(token(&third)), "{out} / {third}");

    // Nobody waits: refused (5), and bravo keeps leading.
    let (code, out, err) = handover(&storage, None);
    assert_eq!(code, 5, "handover with no candidate: {out}{err}");
    assert!(err.contains("no candidate"), "{err}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(bravo.child.try_wait().unwrap().is_none(), "bravo stopped");
    let status = Command::new(bin())
        .args(["status", "--storage", &storage, NAME])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("bravo"));

    // The watcher saw alpha, then charlie, then bravo.
    wait_for_line(&watched, "bravo");
    let _ = watch.kill();
    let _ = watch.wait();
}
