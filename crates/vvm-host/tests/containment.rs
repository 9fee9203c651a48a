//! The job cannot leave its containment, and dies with vvm-host and its
//! guard, however they end: real `vvm-host` processes on this host's cgroup
//! v2 (so, as root: `auto` picks a cgroup with a PID namespace), real jobs
//! that move themselves between cgroups, real kills. Each job appends the
//! wall clock to a file every 100 ms; a test passes only if that work
//! stopped before the lease (granted by the last write vvm-host's store
//! saw, `VVM_HOST_FAULT_FILE`) could expire, or at once where the issue
//! says so. Every process a test started is SIGKILLed when it ends, found
//! by a mark in its environment, so a failing run (or an older binary,
//! `VVM_HOST_TEST_BIN`) leaves nothing behind.
//!
//! Ignored unless asked for: `.ci/run` (root) runs them with
//! `cargo test -p vvm-host --test containment -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime},
};

use common::{fixtures::*, *};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

/// The leadership duration: the killer fires at 3.2 s after the last
/// renewal, 0.8 s before the lease could expire.
const LEASE: Duration = Duration::from_secs(4);
/// The environment variable that marks every process of one test's hosts.
const MARK: &str = "VVM_HOST_TEST_MARK";

/// SIGKILLs every process that carries `MARK=self.0` when dropped.
struct KillMarked(String);

impl KillMarked {
    fn new(what: &str) -> KillMarked {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        KillMarked(format!("{what}-{}-{n}", std::process::id()))
    }
}

impl Drop for KillMarked {
    fn drop(&mut self) {
        for _ in 0..3 {
            for pid in processes_with(MARK, &self.0) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A vvm-host on a fresh redb file with the fault hook, its output read.
struct Host {
    child: Reaped,
    out: mpsc::Receiver<String>,
    log: Option<JoinHandle<String>>,
    dir: tempfile::TempDir,
    _mark: KillMarked,
}

impl Host {
    /// Starts `bash -c script(work file)` under vvm-host.
    fn start(extra: &[&str], script: impl FnOnce(&Path) -> String) -> Host {
        assert!(is_root(), "needs root: run with --ignored as root");
        let dir = tempfile::tempdir().unwrap();
        let mark = KillMarked::new("host");
        let script = script(&dir.path().join("work.log"));
        let mut command = faulty_host(dir.path(), LEASE, extra, &script);
        command.env(MARK, &mark.0);
        let (child, out, log) = spawn_piped(&mut command);
        Host {
            child: Reaped(child),
            out,
            log: Some(log),
            dir,
            _mark: mark,
        }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work.log")
    }

    fn fault(&self) -> PathBuf {
        self.dir.path().join("fault")
    }

    fn lease_end(&self) -> SystemTime {
        lease_end(self.dir.path(), LEASE)
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    /// Waits up to `limit` for vvm-host to exit: its status and log.
    fn exit_within(&mut self, limit: Duration, what: &str) -> (ExitStatus, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.log());
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{what}: vvm-host did not exit within {limit:?}\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// vvm-host's log (see [`log_within`]).
    fn log(&mut self) -> String {
        self.log.take().map(log_within).unwrap_or_default()
    }
}

/// vvm-host's log, once its standard error closes: within 5 s of its exit,
/// or the job (which inherited it) still runs.
fn log_within(log: JoinHandle<String>) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(log.join().unwrap_or_default());
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| {
        "(vvm-host's standard error is still open 5 s after it exited: a process of the job holds it)".to_owned()
    })
}

/// The work in `file` stops for good within `limit` of now.
fn assert_work_stops_within(file: &Path, limit: Duration, what: &str) {
    std::thread::sleep(limit);
    let stopped = last_work(file);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(last_work(file), stopped, "{what}: the job still works");
}

// --- 1. The job dies with the pair ---------------------------------------

/// `pkill -9 vvm-host` kills vvm-host and its guard in one go; here the
/// guard dies first, the case where nobody was left to kill the job (in
/// the cgroup mode, about half the time). The namespace's init dies with
/// the guard, and the namespace with it.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn the_guard_then_vvm_host_killed_ends_the_job_before_the_lease_expires() {
    let mut host = Host::start(&[], work_loop);
    wait_for_work(&host.work(), 5);
    let guard = Pid::from_raw(guard_of(host.child.id()));
    kill(guard, Signal::SIGKILL).unwrap();
    kill(host.pid(), Signal::SIGKILL).unwrap();
    let _ = host.child.wait();
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, "guard, then vvm-host SIGKILLed");
}

/// Both stopped first, then both SIGKILLed: neither can act on the
/// other's death (in the cgroup mode the job escaped every time).
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn vvm_host_and_its_guard_stopped_then_killed_together_end_the_job() {
    stopped_then_killed_together(&[]);
}

/// The same in the PID-namespace mode.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn in_pidns_mode_vvm_host_and_its_guard_stopped_then_killed_together_end_the_job() {
    stopped_then_killed_together(&["--containment", "pidns"]);
}

fn stopped_then_killed_together(extra: &[&str]) {
    let mut host = Host::start(extra, work_loop);
    wait_for_work(&host.work(), 5);
    let guard = Pid::from_raw(guard_of(host.child.id()));
    kill(host.pid(), Signal::SIGSTOP).unwrap();
    kill(guard, Signal::SIGSTOP).unwrap();
    kill(host.pid(), Signal::SIGKILL).unwrap();
    kill(guard, Signal::SIGKILL).unwrap();
    let _ = host.child.wait();
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, "both stopped, then killed");
}

// --- 2. The guard stopped, vvm-host killed, under a supervisor ----------

/// Under a supervisor of the same session that adopts orphans (`tini -s`,
/// which outlives vvm-host here), the guard stopped and then vvm-host
/// SIGKILLed: the kernel's SIGHUP + SIGCONT to an orphaned process group
/// does not come (the guard's parent is the supervisor, in the session),
/// so the guard stays stopped. The init watches vvm-host's end of the
/// lifeline itself and ends the job.
#[test]
#[ignore = "needs root (cgroups) and tini: run with --ignored as root"]
fn a_stopped_guard_and_a_killed_vvm_host_under_a_supervisor_end_the_job() {
    stopped_guard_under_a_supervisor(&[]);
}

/// The same in the PID-namespace mode (which the issue saw escape too).
#[test]
#[ignore = "needs root (cgroups) and tini: run with --ignored as root"]
fn in_pidns_mode_a_stopped_guard_and_a_killed_vvm_host_under_a_supervisor_end_the_job() {
    stopped_guard_under_a_supervisor(&["--containment", "pidns"]);
}

/// Runs vvm-host (with `extra`) under `tini -s -- sh -c 'vvm-host ...; exec
/// sleep 1000'`, stops the guard, SIGKILLs vvm-host.
fn stopped_guard_under_a_supervisor(extra: &[&str]) {
    assert!(is_root(), "needs root: run with --ignored as root");
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work.log");
    let mark = KillMarked::new("tini");
    let inner = faulty_host(dir.path(), LEASE, extra, &work_loop(&work));
    let tini = Command::new("tini")
        .args(["-s", "--", "sh", "-c", "\"$@\"; exec sleep 1000", "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env(MARK, &mark.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tini (the test's supervisor; .ci/install-deps.sh installs it)");
    let tini = Reaped(tini);
    wait_for_work(&work, 5);
    let sh = children_of(tini.id())[0];
    let host = children_of(u32::try_from(sh).unwrap())[0];
    let guard = guard_of(u32::try_from(host).unwrap());
    kill(Pid::from_raw(guard), Signal::SIGSTOP).unwrap();
    kill(Pid::from_raw(host), Signal::SIGKILL).unwrap();
    let lease_end = lease_end(dir.path(), LEASE);
    assert_work_stopped_before(&work, lease_end, "guard stopped, vvm-host killed");
    assert_eq!(state_of(guard), Some('T'), "the guard was not left stopped");
    drop(tini);
}

// --- 3. A root job moves itself to an ancestor cgroup -------------------

/// The command writes its pid to the parent's `cgroup.procs` (what the
/// cgroupfs driver of container runtimes, `cgexec` and docker-in-docker
/// entrypoints do); then vvm-host is SIGKILLed.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn a_job_moved_to_an_ancestor_cgroup_dies_with_vvm_host() {
    let mut host = Host::start(&[], |work| {
        format!("{}; {}", move_into(&own_cgroup()), work_loop(work))
    });
    wait_for_work(&host.work(), 5);
    kill(host.pid(), Signal::SIGKILL).unwrap();
    let _ = host.child.wait();
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, "moved to an ancestor, SIGKILL");
}

/// The same job, and an orderly stop: vvm-host ends it (SIGTERM reaches it
/// where it moved) and exits 0 within the grace period, not after.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn a_job_moved_to_an_ancestor_cgroup_stops_in_order() {
    let mut host = Host::start(&["--grace-period", "2s"], |work| {
        format!("{}; {}", move_into(&own_cgroup()), work_loop(work))
    });
    wait_for_work(&host.work(), 5);
    kill(host.pid(), Signal::SIGTERM).unwrap();
    let (status, log) = host.exit_within(Duration::from_secs(8), "SIGTERM");
    assert_eq!(status.code(), Some(0), "{log}");
    assert_work_stops_within(&host.work(), Duration::ZERO, "after an orderly stop");
}

/// The same job, and a store that hangs: the killer says "the job is gone"
/// only once it is, and it is before the lease could expire; exit 123.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn a_job_moved_to_an_ancestor_cgroup_is_killed_by_the_killer_for_good() {
    let mut host = Host::start(&[], |work| {
        format!("{}; {}", move_into(&own_cgroup()), work_loop(work))
    });
    wait_for_work(&host.work(), 5);
    std::fs::write(host.fault(), "hang").unwrap();
    let (status, log) = host.exit_within(Duration::from_secs(20), "a hung store");
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, "moved, store hung");
    assert_eq!(status.code(), Some(123), "{log}");
    assert!(log.contains("the job is gone"), "{log}");
    let gone_said = log.find("the job is gone").unwrap();
    assert!(!log[gone_said..].contains("not confirmed"), "{log}");
}

// --- 4. The command moves into a child cgroup and exits ------------------

/// The command makes a child cgroup, moves a worker into it (the "move
/// into a leaf to enable controllers" pattern), and exits 0: the worker is
/// killed, vvm-host exits 0 at once, and both cgroups are removed.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn a_worker_in_a_child_cgroup_dies_when_the_command_exits() {
    let mut host = Host::start(&[], |work| {
        format!(
            "{}; echo cg=$cg; mkdir \"$cg/leaf\"; (echo 0 > \"$cg/leaf/cgroup.procs\" || exit 99; {}) & sleep 1; exit 0",
            own_cgroup_in_shell(),
            work_loop(work)
        )
    });
    let cgroup = PathBuf::from(wait_for_line(&host.out, "cg=").trim_start_matches("cg="));
    wait_for_work(&host.work(), 3);
    assert!(cgroup.join("leaf").is_dir(), "{cgroup:?}");
    let (status, log) = host.exit_within(Duration::from_secs(8), "the command exited");
    assert_eq!(status.code(), Some(0), "{log}");
    assert_work_stops_within(&host.work(), Duration::ZERO, "after the command exited");
    assert!(!cgroup.exists(), "{cgroup:?} is left behind\n{log}");
}

// --- 5. Non-root, in a delegated cgroup ---------------------------------

/// The user the delegated case runs vvm-host as (made if missing).
const TEST_USER: &str = "vvm-host-test";

/// The uid and gid of [`TEST_USER`], made first if missing.
fn test_user() -> (u32, u32) {
    let id = |flag| {
        Command::new("id")
            .args([flag, TEST_USER])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(TEST_USER)
            .status()
            .unwrap();
        assert!(made.success(), "useradd {TEST_USER}");
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

/// A cgroup delegated to `uid` (as systemd's `Delegate=yes` does: the
/// directory and its `cgroup.procs`, `cgroup.threads` and
/// `cgroup.subtree_control` belong to the user); removed when dropped.
struct Delegated(PathBuf);

impl Delegated {
    fn new(uid: u32, gid: u32) -> Delegated {
        let path = own_cgroup().join(format!("vvm-host-test-delegated-{}", std::process::id()));
        std::fs::create_dir(&path).unwrap();
        let owner = (Some(uid), Some(gid));
        std::os::unix::fs::chown(&path, owner.0, owner.1).unwrap();
        for file in ["cgroup.procs", "cgroup.threads", "cgroup.subtree_control"] {
            std::os::unix::fs::chown(path.join(file), owner.0, owner.1).unwrap();
        }
        Delegated(path)
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for _ in 0..100 {
            let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
            if let Ok(entries) = std::fs::read_dir(&self.0) {
                for entry in entries.flatten().filter(|e| e.path().is_dir()) {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// vvm-host runs as an unprivileged user in a cgroup delegated to it
/// (systemd user services, rootless tools); the job moves itself to the
/// delegated parent (allowed: the user owns it); vvm-host is SIGKILLed.
/// `auto` picks a cgroup with a PID namespace (in a user namespace) there,
/// and the job dies with vvm-host.
#[test]
#[ignore = "needs root (useradd, chown of a cgroup): run with --ignored as root"]
fn as_a_delegated_user_a_job_moved_to_the_delegated_parent_dies_with_vvm_host() {
    assert!(is_root(), "needs root: run with --ignored as root");
    let (uid, gid) = test_user();
    let delegated = Delegated::new(uid, gid);
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let work = dir.path().join("work.log");
    let mark = KillMarked::new("delegated");
    let script = format!("{}; {}", move_into(&delegated.0), work_loop(&work));
    let inner = faulty_host(dir.path(), LEASE, &[], &script);
    // Root moves the shell into the delegated cgroup, which then becomes
    // the user and execs vvm-host: vvm-host starts there, as the user.
    let mut command = Command::new("bash");
    command
        .args([
            "-c",
            "cg=$1 uid=$2 gid=$3; shift 3; echo $$ > \"$cg/cgroup.procs\" && exec setpriv --reuid=\"$uid\" --regid=\"$gid\" --clear-groups -- \"$@\"",
            "bash",
        ])
        .arg(&delegated.0)
        .arg(uid.to_string())
        .arg(gid.to_string())
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env(MARK, &mark.0);
    let (child, _out, log) = spawn_piped(&mut command);
    let mut host = Reaped(child);
    wait_for_work(&work, 5);
    kill(
        Pid::from_raw(i32::try_from(host.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    let _ = host.wait();
    let log = log_within(log);
    let lease_end = lease_end(dir.path(), LEASE);
    assert_work_stopped_before(&work, lease_end, "delegated user, moved to the parent");
    assert!(log.contains("containment=\"cgroup+pidns\""), "{log}");
    drop(mark);
    drop(delegated);
}

// --- 6. An orderly stop reaches a child cgroup --------------------------

/// A worker lives in a child cgroup of the job's; on SIGTERM of vvm-host it
/// gets SIGTERM too (it traps it and says so; the command waits for it, as
/// a supervisor would, since what is left once the command exits is
/// SIGKILLed), and once the job has ended the job's cgroup and its child
/// are gone.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn an_orderly_stop_reaches_a_child_cgroup_and_removes_every_cgroup() {
    let mut host = Host::start(&["--grace-period", "2s"], |work| {
        let said = work.with_file_name("term");
        format!(
            "trap 'wait; exit 0' TERM; {}; echo cg=$cg; mkdir \"$cg/leaf\"; sh -c 'echo 0 > \"$0/leaf/cgroup.procs\" || exit 99; trap \"echo got-term > {}; exit 0\" TERM; echo ready; while :; do sleep 0.1; done' \"$cg\" & wait",
            own_cgroup_in_shell(),
            said.display()
        )
    });
    let cgroup = PathBuf::from(wait_for_line(&host.out, "cg=").trim_start_matches("cg="));
    wait_for_line(&host.out, "ready");
    assert!(cgroup.join("leaf").is_dir(), "{cgroup:?}");
    kill(host.pid(), Signal::SIGTERM).unwrap();
    let (status, log) = host.exit_within(Duration::from_secs(10), "SIGTERM");
    let said = std::fs::read_to_string(host.dir.path().join("term")).unwrap_or_default();
    assert_eq!(
        said.trim(),
        "got-term",
        "the worker never got SIGTERM\n{log}"
    );
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        !cgroup.join("leaf").exists(),
        "the child cgroup is left behind"
    );
    assert!(!cgroup.exists(), "the job's cgroup is left behind");
}

// --- 7. No start window -------------------------------------------------

/// SIGKILL of vvm-host at every instant around the start of the command:
/// as soon as the guard exists, as soon as the guard's child exists, and a
/// little later (0.2 ms more each round). Each time, every process of the
/// job, and the guard, must be gone within 0.5 s.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn a_kill_at_any_instant_of_the_start_ends_the_job_at_once() {
    kill_at_every_instant_of_the_start(&[], &[], 36);
}

/// The same in the PID-namespace mode.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn in_pidns_mode_a_kill_at_any_instant_of_the_start_ends_the_job_at_once() {
    kill_at_every_instant_of_the_start(&[], &["--containment", "pidns"], 30);
}

/// The same in the cgroup mode without a PID namespace, which `auto`
/// picks (with a warning) where none can be made: here vvm-host runs in a
/// user namespace whose `max_pid_namespaces` is 0. The guard kills the
/// trampoline first, then the cgroup, and again until it is empty.
#[test]
#[ignore = "needs root (cgroups): run with --ignored as root"]
fn without_a_pid_namespace_a_kill_at_any_instant_of_the_start_ends_the_job_at_once() {
    let no_pidns = [
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        "echo 0 > /proc/sys/user/max_pid_namespaces && exec \"$@\"",
        "sh",
    ];
    kill_at_every_instant_of_the_start(&no_pidns, &[], 30);
}

/// `rounds` times: vvm-host (run through `wrapper`, which execs it, if
/// any) SIGKILLed at another instant of the start.
fn kill_at_every_instant_of_the_start(wrapper: &[&str], extra: &[&str], rounds: u32) {
    for round in 0..rounds {
        let mark = KillMarked::new("race");
        let mut args = vec!["--leadership-duration", "4s"];
        args.extend(extra);
        args.extend(["--", "bash", "-c", "while :; do sleep 0.05; done"]);
        let inner = vvm_host(&args);
        let mut command = match wrapper.split_first() {
            None => inner,
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command
                    .args(rest)
                    .arg(inner.get_program())
                    .args(inner.get_args())
                    .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))));
                command
            }
        };
        command
            .env(MARK, &mark.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut host = Reaped(command.spawn().unwrap());
        let started = Instant::now();
        let guard = loop {
            // Not the PID-namespace probe vvm-host runs first.
            let guard = children_of(host.id()).into_iter().find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| cmdline.windows(16).any(|w| w == b"__vvm-host-guard"))
            });
            if let Some(guard) = guard {
                break guard;
            }
            assert!(started.elapsed() < LIMIT, "no guard");
        };
        if round % 3 != 0 {
            while children_of(u32::try_from(guard).unwrap()).is_empty() {
                assert!(started.elapsed() < LIMIT, "the guard started nothing");
            }
            if round % 3 == 2 {
                std::thread::sleep(Duration::from_micros(200 * u64::from(round / 3)));
            }
        }
        kill(
            Pid::from_raw(i32::try_from(host.id()).unwrap()),
            Signal::SIGKILL,
        )
        .unwrap();
        let killed = Instant::now();
        let _ = host.wait();
        loop {
            let left = processes_with(MARK, &mark.0);
            if left.is_empty() {
                break;
            }
            if killed.elapsed() > Duration::from_millis(500) {
                let names: Vec<String> = left
                    .iter()
                    .map(|pid| {
                        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .unwrap_or_default();
                        format!("{pid} {}", comm.trim())
                    })
                    .collect();
                panic!(
                    "round {round}: still running 0.5 s after vvm-host was SIGKILLed: {names:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
