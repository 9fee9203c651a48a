//! The command never outlives its leadership: real `vvm-host` processes, real
//! commands (ignoring SIGTERM, with a grandchild that escapes the process
//! group with `setsid`), and real faults: a store that hangs or fails, a
//! lease taken away, SIGKILL and SIGSTOP of vvm-host, SIGHUP and SIGQUIT.
//!
//! Storage faults are injected from outside through `VVM_HOST_FAULT_FILE`
//! (see `src/fault.rs`), which also records when the last successful write
//! started, so a test knows when the lease it granted ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::Child,
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, SystemTime},
};

use common::*;
use nix::sys::signal::Signal;

/// The leadership duration of these tests: the killer fires at 0.8 x this
/// after the last renewal, 0.2 x this (1.6 s) before the lease could expire.
const LEASE: Duration = Duration::from_secs(8);

/// A vvm-host on a fresh redb file with fault injection, running `script`.
struct Host {
    child: Child,
    out: mpsc::Receiver<String>,
    log: Option<JoinHandle<String>>,
    fault: PathBuf,
    _dir: tempfile::TempDir,
}

impl Host {
    fn start(extra: &[&str], script: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let fault = dir.path().join("fault");
        let (child, out, log) = spawn_piped(&mut faulty_host(dir.path(), LEASE, extra, script));
        Host {
            child,
            out,
            log: Some(log),
            fault,
            _dir: dir,
        }
    }

    fn inject(&self, fault: &str) {
        std::fs::write(&self.fault, fault).unwrap();
    }

    /// Waits for vvm-host to exit; its exit code and log.
    fn finish(&mut self) -> (Option<i32>, String) {
        let status = wait_with_limit(&mut self.child);
        let log = self.log.take().unwrap().join().unwrap();
        (status.code(), log)
    }

    fn lease_end(&self) -> SystemTime {
        last_write(&self.fault) + LEASE
    }
}

impl Host {
    /// [`Host::start`] with the job [`job_with_escaping_grandchild`]`(rest)`,
    /// once the job is ready: the host and the pids of the command and of
    /// its escaped grandchild.
    fn start_job(extra: &[&str], rest: &str) -> (Host, i32, i32) {
        let host = Host::start(extra, &job_with_escaping_grandchild(rest));
        let (pid, grandchild) = job_pids(&host.out);
        (host, pid, grandchild)
    }

    /// The job `pids` of this vvm-host, stopped now (SIGSTOP), are killed
    /// by the guard alone before the lease the last write granted ends;
    /// continued, vvm-host exits 123.
    fn assert_the_guard_alone_kills(mut self, pids: [i32; 2]) {
        for pid in pids {
            wait_gone(pid);
        }
        let lease_end = self.lease_end();
        signal(&self.child, Signal::SIGCONT);
        let (code, log) = self.finish();
        assert_gone_before(pids, lease_end, &log);
        assert!(
            log.contains("the leadership deadline passed without word from vvm-host"),
            "{log}"
        );
        assert_eq!(code, Some(123), "{log}");
    }
}

/// The pids of the command and its escaped grandchild, once it is ready.
fn job_pids(out: &mpsc::Receiver<String>) -> (i32, i32) {
    let pid = read_number(out, "pid=");
    let grandchild = read_number(out, "gc=");
    wait_for_line(out, "ready");
    (pid, grandchild)
}

fn assert_gone_before(pids: [i32; 2], lease_end: SystemTime, log: &str) {
    for pid in pids {
        let gone = wait_gone(pid);
        assert!(
            gone < lease_end,
            "process {pid} was still running {:?} after the lease could expire\n{log}",
            gone.duration_since(lease_end).unwrap_or_default()
        );
    }
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_store_that_hangs_gets_the_whole_command_killed_before_the_lease_expires() {
    let (mut host, pid, grandchild) =
        Host::start_job(&["--grace-period", "60s"], "trap '' TERM; exec sleep 1000");
    host.inject("hang");
    for pid in [pid, grandchild] {
        wait_gone(pid);
    }
    let (code, log) = host.finish();
    // The lease granted by the last write that got through.
    assert_gone_before([pid, grandchild], host.lease_end(), &log);
    assert_eq!(code, Some(123), "{log}");
    assert!(log.contains("killer deadline passed"), "{log}");
    assert!(log.contains("the job is gone"), "{log}");
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_stopped_vvm_host_has_its_command_killed_by_the_guard_before_the_lease_expires() {
    let (host, pid, grandchild) = Host::start_job(&[], "trap '' TERM; exec sleep 1000");
    signal(&host.child, Signal::SIGSTOP);
    // vvm-host was stopped all along: the guard acted alone.
    host.assert_the_guard_alone_kills([pid, grandchild]);
}

/// The earliest stop there is: the command itself stops vvm-host (its
/// guard's parent) as its first act, before vvm-host has even read the
/// guard's "started" report. The guard must already know the deadline.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_vvm_host_stopped_as_the_command_starts_still_has_it_killed_in_time() {
    // The job cannot signal vvm-host from its PID namespace: it asks the
    // test to, and goes on only once vvm-host is stopped.
    let fifo_dir = tempfile::tempdir().unwrap();
    let fifo = fifo_dir.path().join("go");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let script = format!(
        "echo stop-me; read -r _ < '{}'; {}",
        fifo.display(),
        job_with_escaping_grandchild("trap '' TERM; exec sleep 1000")
    );
    let host = Host::start(&[], &script);
    wait_for_line(&host.out, "stop-me");
    signal(&host.child, Signal::SIGSTOP);
    std::fs::write(&fifo, "go\n").unwrap();
    let (pid, grandchild) = job_pids(&host.out);
    host.assert_the_guard_alone_kills([pid, grandchild]);
}

#[test]
fn sigkill_of_vvm_host_kills_the_command_and_its_escaped_grandchild() {
    let (mut host, pid, grandchild) = Host::start_job(&[], "trap '' TERM; exec sleep 1000");
    assert!(exists(pid) && exists(grandchild));
    signal(&host.child, Signal::SIGKILL);
    let (code, _log) = host.finish();
    assert_eq!(code, None, "killed by a signal");
    // Nothing of the job survives vvm-host.
    wait_gone(pid);
    wait_gone(grandchild);
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_failing_store_ends_in_an_orderly_stop_and_the_lost_status() {
    let (mut host, pid, grandchild) = Host::start_job(
        &["--grace-period", "60s"],
        "trap 'echo got-term; exit 0' TERM; while :; do sleep 0.05; done",
    );
    host.inject("error");
    wait_for_line(&host.out, "got-term");
    let (code, log) = host.finish();
    assert_gone_before([pid, grandchild], host.lease_end(), &log);
    assert_eq!(code, Some(123), "{log}");
    assert!(log.contains("renewal attempts failed"), "{log}");
    let stopped = log.find("command stopped").expect(&log);
    let lost = log
        .find("leadership lost; the command was stopped")
        .expect(&log);
    assert!(stopped < lost, "{log}");
    assert!(!log.contains("killer deadline passed"), "{log}");
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_lease_taken_away_stops_the_command_with_the_configured_status() {
    let (mut host, pid, grandchild) = Host::start_job(
        &["--exit-code-lost", "99"],
        "trap 'exit 0' TERM; while :; do sleep 0.05; done",
    );
    host.inject("lost");
    let (code, log) = host.finish();
    assert_gone_before([pid, grandchild], host.lease_end(), &log);
    assert_eq!(code, Some(99), "{log}");
    assert!(log.contains("the record was taken"), "{log}");
}

/// SIGHUP and SIGQUIT shut down like SIGTERM: the command (and what it
/// started, even outside its process group) stops, then leadership is
/// released, and vvm-host exits 0.
#[test]
fn sighup_and_sigquit_shut_down_in_order() {
    for sig in [Signal::SIGHUP, Signal::SIGQUIT] {
        let (mut host, pid, grandchild) = Host::start_job(
            &[],
            "trap 'echo got-term; exit 0' TERM; while :; do sleep 0.05; done",
        );
        signal(&host.child, sig);
        wait_for_line(&host.out, "got-term");
        let (code, log) = host.finish();
        assert_eq!(code, Some(0), "{sig}: {log}");
        assert!(!exists(pid) && !exists(grandchild), "{sig}: {log}");
        let stopped = log.find("command stopped").expect(&log);
        let released = log.find("leadership released").expect(&log);
        assert!(stopped < released, "{sig}: {log}");
    }
}

/// A command that exits by itself takes what it started with it, and its
/// status passes through even where it equals one of vvm-host's own (with a
/// warning in the log).
#[test]
fn a_command_that_exits_leaves_nothing_behind_and_its_status_passes_through() {
    let (mut host, _pid, grandchild) = Host::start_job(&[], "exit 123");
    let (code, log) = host.finish();
    assert_eq!(code, Some(123), "{log}");
    assert!(
        log.contains("also vvm-host's status for \"leadership lost\""),
        "{log}"
    );
    assert!(!exists(grandchild), "{log}");
    assert!(log.contains("swept=1"), "{log}");
}

/// Exit 124 (or the configured status) when no leadership is acquired in
/// time: a crashed leader's lease is still in the file.
#[test]
fn no_leadership_in_time_has_its_own_status() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("leases.redb").display());
    let held = hold_lease_and_crash(&url);
    assert!(held);
    for (extra, expected) in [(None, 124), (Some("77"), 77)] {
        let mut args = vec!["--storage", &url, "--acquisition-duration", "1s"];
        if let Some(code) = extra {
            args.extend(["--exit-code-no-leadership", code]);
        }
        args.extend(["--", "true"]);
        let output = vvm_host(&args).output().unwrap();
        let log = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(expected), "{log}");
    }
}

/// Starts a vvm-host that leads on `url` for a minute, SIGKILLs it.
fn hold_lease_and_crash(url: &str) -> bool {
    let mut leader = leader_on(url);
    leader.kill().unwrap();
    leader.wait().unwrap();
    stored_key1(Path::new(url.trim_start_matches("redb://"))).is_some()
}

#[test]
fn ambiguous_exit_codes_are_refused() {
    let output = vvm_host(&["--exit-code-lost", "125", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--exit-code-lost and --exit-code-error"),
        "{stderr}"
    );
}
