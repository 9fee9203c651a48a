//! Escapes that need root to stage: a file system frozen with `fsfreeze`
//! (a loop-mounted ext4, thawed and unmounted afterwards even when a test
//! fails), a pid handed out again through `ns_last_pid`, and the job's own
//! cgroup. Ignored unless asked for: `.ci/run` (root) runs them with
//! `cargo test -p vvm-host --test root -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, SystemTime},
};

use common::{fixtures::*, *};
use nix::sys::signal::Signal;

/// The leadership duration (killer at 3.2 s after the last renewal).
const LEASE: Duration = Duration::from_secs(4);
const ROOT: &str =
    "needs root (loop mount, fsfreeze, ns_last_pid, cgroups): run with --ignored as root";

struct Host {
    child: Reaped,
    out: std::sync::mpsc::Receiver<String>,
    dir: tempfile::TempDir,
}

impl Host {
    fn start(extra: &[&str], script: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        Host::start_in(dir, extra, script, Stdio::null())
    }

    /// A vvm-host whose store is `dir`'s redb file (shared by the
    /// processes that use it), its log sent to `log`.
    fn start_in(dir: tempfile::TempDir, extra: &[&str], script: &str, log: Stdio) -> Host {
        assert!(is_root(), "{ROOT}");
        let mut child = faulty_host(dir.path(), LEASE, extra, script)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let (out, _) = lines(child.stdout.take().unwrap());
        Host {
            child: Reaped(child),
            out,
            dir,
        }
    }

    fn lease_end(&self) -> SystemTime {
        lease_end(self.dir.path(), LEASE)
    }
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display())
}

/// Escape 3: a process of the job sleeps uninterruptibly (it writes to a
/// frozen file system) and so cannot die; the worker it started with
/// `setsid` must still be killed when vvm-host dies. Before, it was reached
/// only once its parent died, which it could not.
#[test]
#[ignore = "needs root (loop mount, fsfreeze): run with --ignored as root"]
fn a_process_stuck_in_uninterruptible_sleep_does_not_shield_its_setsid_child() {
    let mut fs = FreezableFs::new();
    let work = fs.dir().join("work.log");
    let script = format!(
        "( setsid sh -c {} & sleep 1; echo stuck > {}/file; sleep 1000 ) & echo ready; wait",
        quoted_script(&work_loop(&work)),
        quoted(&fs.mount)
    );
    let mut host = Host::start(&[], &script);
    wait_for_line(&host.out, "ready");
    fs.freeze();
    wait_for_work(&work, 15); // the writer to the frozen fs is stuck by now
    signal(&host.child, Signal::SIGKILL);
    let _ = host.child.wait();
    let lease_end = host.lease_end();
    assert_work_stopped_before(&work, lease_end, "sibling of a stuck process");
    fs.thaw();
}

fn quoted_script(script: &str) -> String {
    format!("\"{}\"", script.replace('"', "\\\""))
}

/// Escape 4: the command exits, leaving a helper stuck in uninterruptible
/// sleep; its pid is handed to an unrelated process that makes it its
/// process group (`setsid sleep`). That process must not be signalled.
/// Before, the guard's final sweep sent SIGKILL to the command's old
/// process group every 2 ms.
#[test]
#[ignore = "needs root (loop mount, fsfreeze, ns_last_pid): run with --ignored as root"]
fn a_reused_pid_is_never_signalled() {
    let mut fs = FreezableFs::new();
    let script = format!(
        "{ECHO_PID}; setsid sh -c 'sleep 0.5; echo stuck > {}/file' & echo ready; sleep 1; exit 0",
        fs.mount.display()
    );
    let mut host = Host::start(&[], &script);
    let command = read_number(&host.out, "pid=");
    wait_for_line(&host.out, "ready");
    fs.freeze();
    wait_gone(command);
    // Hand the command's pid to an unrelated process group leader.
    let mut victim: Option<Child> = None;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (command - 1).to_string()).unwrap();
        let child = Command::new("setsid")
            .args(["sleep", "30"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        if i32::try_from(child.id()).unwrap() == command {
            victim = Some(child);
            break;
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut victim = victim.expect("could not get the command's pid handed out again");
    std::thread::sleep(Duration::from_millis(800));
    let status = victim.try_wait().unwrap();
    let _ = victim.kill();
    let _ = victim.wait();
    fs.thaw();
    assert_eq!(
        status, None,
        "an unrelated process with the command's old pid was signalled"
    );
    signal(&host.child, Signal::SIGTERM);
    let _ = wait_with_limit(&mut host.child);
}

/// In the cgroup mode the command runs in the job's own cgroup, which is
/// gone once the job has ended.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn in_cgroup_mode_the_command_runs_in_the_jobs_own_cgroup_which_is_removed_after() {
    let mut host = Host::start(
        &["--containment", "cgroup"],
        "echo cgroup=$(grep '^0::' /proc/self/cgroup); echo ready; sleep 1000",
    );
    let line = wait_for_line(&host.out, "cgroup=");
    let path = line.trim().trim_start_matches("cgroup=0::").to_owned();
    assert!(
        path.contains("vvm-host-") && path.contains("-job-"),
        "{line}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mounts
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split_whitespace().nth(4))
        .unwrap()
        .to_owned();
    let dir = Path::new(&mount).join(path.trim_start_matches('/'));
    assert!(dir.is_dir(), "{dir:?}");
    wait_for_line(&host.out, "ready");
    signal(&host.child, Signal::SIGTERM);
    let status = wait_with_limit(&mut host.child);
    assert_eq!(status.code(), Some(0));
    assert!(!dir.exists(), "{dir:?} is left behind");
}

/// An orderly stop while a process of the job sleeps uninterruptibly (a
/// write to a frozen file system): vvm-host keeps the lease, renewed, and
/// says which process holds it up, until the process is gone; only then
/// may the next leader start.
#[test]
#[ignore = "needs root (loop mount, fsfreeze): run with --ignored as root"]
fn a_process_stuck_in_uninterruptible_sleep_keeps_the_lease_until_it_is_gone() {
    let mut fs = FreezableFs::new();
    let shared = tempfile::tempdir().unwrap();
    let store = shared.path().to_owned();
    let script = format!(
        "echo leading; echo ready; sleep 0.5; echo stuck > {}/file; sleep 1000",
        fs.mount.display()
    );
    let log_file = shared.path().join("a.log");
    let log = std::fs::File::create(&log_file).unwrap();
    let mut a = Host::start_in(shared, &["--grace-period", "1s"], &script, log.into());
    wait_for_line(&a.out, "ready");
    fs.freeze();
    std::thread::sleep(Duration::from_secs(1)); // the write is stuck now
    let b_dir = tempfile::TempDir::new_in(&store).unwrap();
    let mut b = {
        // B uses A's store file.
        let url = format!("redb://{}", store.join("leases.redb").display());
        let lease = format!("{}s", LEASE.as_secs());
        let mut child = vvm_host(&[
            "--storage",
            &url,
            "--leadership-duration",
            &lease,
            "--",
            "sh",
            "-c",
            "echo leading-b; sleep 1000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let (out, _) = lines(child.stdout.take().unwrap());
        (child, out, b_dir)
    };
    signal(&a.child, Signal::SIGTERM);
    // Three leases long: A must keep it, B must not lead.
    let held_until = std::time::Instant::now() + 3 * LEASE;
    while std::time::Instant::now() < held_until {
        assert!(b.1.try_recv().is_err(), "B led while A's job was stuck");
        assert!(
            a.child.try_wait().unwrap().is_none(),
            "A exited with its job stuck"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(log.contains("has not ended after SIGKILL"), "{log}");
    assert!(log.contains("wchan="), "{log}");
    fs.thaw();
    wait_for_line(&b.1, "leading-b");
    let status = wait_with_limit(&mut a.child);
    assert_eq!(status.code(), Some(0));
    let _ = b.0.kill();
    let _ = b.0.wait();
}
