//! Nothing the command starts may outlive the leadership, whatever the job
//! does and whatever happens around vvm-host: real `vvm-host` processes,
//! real jobs, and faults injected from outside — a stalled log pipe, Ctrl-Z
//! on a terminal with `tostop`, a command that leaves its process group, a
//! stopped guard. Each job appends the wall clock to a file every 100 ms;
//! a test passes only if that work stopped before the lease (granted by
//! the last write vvm-host's store saw, `VVM_HOST_FAULT_FILE`) could
//! expire. The root-only cases (a frozen file system, PID reuse, cgroup
//! naming) are in `tests/root.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    io::Read,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use common::{fixtures::*, *};
use nix::sys::signal::Signal;

/// The leadership duration: the killer fires 0.8 x this after the last
/// renewal, 0.2 x this (0.8 s) before the lease could expire.
const LEASE: Duration = Duration::from_secs(4);

/// A vvm-host on a fresh redb file, with the fault hook recording writes.
struct Host {
    child: Reaped,
    dir: tempfile::TempDir,
}

impl Host {
    fn command(dir: &Path, extra: &[&str], script: &str) -> Command {
        faulty_host(dir, LEASE, extra, script)
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work.log")
    }

    fn lease_end(&self) -> SystemTime {
        lease_end(self.dir.path(), LEASE)
    }
}

fn start(extra: &[&str], script: impl FnOnce(&Path) -> String, stdio: Option<OwnedFd>) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let script = script(&dir.path().join("work.log"));
    let mut command = Host::command(dir.path(), extra, &script);
    match stdio {
        Some(fd) => {
            command
                .stdout(Stdio::from(fd.try_clone().unwrap()))
                .stderr(Stdio::from(fd));
        }
        None => {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        }
    }
    let child = Reaped(command.spawn().unwrap());
    Host { child, dir }
}

/// Once the job works: SIGKILL of vvm-host, then its work must stop
/// before the lease it was granted could expire.
fn sigkill_and_check(host: &mut Host, what: &str) {
    wait_for_work(&host.work(), 5);
    signal(&host.child, Signal::SIGKILL);
    let _ = host.child.wait();
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, what);
}

/// Escape 1: vvm-host's and the guard's log is a pipe nobody reads any
/// more (journald, `docker logs` or `| tee` behind a slow disk), filled by
/// the job itself. With vvm-host stopped, the guard must kill at the
/// deadline; before, it blocked writing its notice first.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_stalled_log_pipe_does_not_keep_the_job_past_the_lease() {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    let mut host = start(
        &[],
        |work| format!("({}) & exec yes flood", work_loop(work)),
        Some(writer),
    );
    wait_for_work(&host.work(), 5);
    signal(&host.child, Signal::SIGSTOP);
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, "stalled log pipe");
    signal(&host.child, Signal::SIGKILL);
    let _ = host.child.wait();
    drop(reader);
}

/// Escape 2: Ctrl-Z on a terminal with `stty tostop`. vvm-host (the
/// foreground job) stops; the guard, in a background process group, must
/// still kill the job at the deadline; before, its notice to the terminal
/// got it stopped by SIGTTOU.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn ctrl_z_on_a_tostop_terminal_does_not_keep_the_job_past_the_lease() {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut modes = tcgetattr(&pty.slave).unwrap();
    modes.local_flags |= LocalFlags::TOSTOP;
    tcsetattr(&pty.slave, SetArg::TCSANOW, &modes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work.log");
    let inner = Host::command(dir.path(), &[], &work_loop(&work));
    // As from a login shell: a session leader (bash with job control, `-m`)
    // whose terminal is the pty runs vvm-host as its foreground job, in a
    // process group of its own (a group whose parent is outside the session
    // would be orphaned, and the kernel does not stop those).
    let mut command = Command::new("setsid");
    command
        .args(["--ctty", "bash", "-mc", "\"$0\" \"$@\"; sleep 1000"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave));
    let child = Reaped(command.spawn().unwrap());
    let host = Host { child, dir };
    // The terminal's reader, so the pty never fills.
    let mut master = std::fs::File::from(pty.master);
    let mut echo = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while matches!(echo.read(&mut buf), Ok(n) if n > 0) {}
    });
    wait_for_work(&host.work(), 5);
    // Ctrl-Z: the line discipline sends SIGTSTP to the foreground group.
    std::io::Write::write_all(&mut master, b"\x1a").unwrap();
    let vvm_host = children_of(host.child.id())
        .into_iter()
        .find(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "sleep")
        })
        .expect("vvm-host under the shell");
    wait_until_stopped(vvm_host);
    let lease_end = host.lease_end();
    assert_work_stopped_before(&host.work(), lease_end, "Ctrl-Z with tostop");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(vvm_host), Signal::SIGKILL);
}

/// Waits until `pid` is stopped (state `T`).
fn wait_until_stopped(pid: i32) {
    let started = std::time::Instant::now();
    while state_of(pid) != Some('T') {
        assert!(
            started.elapsed() < LIMIT,
            "{pid} never stopped: {:?}",
            state_of(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Escape 5: a command that moves itself into its parent's (the guard's)
/// process group: signals to the command's group miss it. SIGKILL of
/// vvm-host must still end it before the lease expires.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn a_command_that_leaves_its_process_group_is_still_killed() {
    leaves_its_process_group(&[]);
}

/// The same escape with the PID-namespace mode forced.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn in_a_pid_namespace_a_command_that_leaves_its_process_group_is_still_killed() {
    leaves_its_process_group(&["--containment", "pidns"]);
}

fn leaves_its_process_group(extra: &[&str]) {
    let mut host = start(
        extra,
        |work| {
            format!(
                "exec perl -e 'setpgrp(0, getpgrp(getppid())) or die \"setpgrp: $!\"; exec \"sh\", \"-c\", q({})'",
                work_loop(work)
            )
        },
        None,
    );
    sigkill_and_check(&mut host, "left its process group");
}

/// The guard stopped (SIGSTOP) and vvm-host asked to shut down: vvm-host
/// must end the job itself once the grace period is over, and exit 125;
/// before, it waited for the guard for ever.
#[test]
fn a_stopped_guard_gets_the_job_ended_by_vvm_host_and_exit_125() {
    let mut host = start(
        &["--grace-period", "2s"],
        |work| format!("trap '' TERM; {}", work_loop(work)),
        None,
    );
    wait_for_work(&host.work(), 5);
    let guard = guard_of(host.child.id());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(guard), Signal::SIGSTOP).unwrap();
    signal(&host.child, Signal::SIGTERM);
    exits_125_with_the_job_ended(&mut host);
    assert!(
        !exists(guard) || state_of(guard) == Some('Z'),
        "the guard is left behind"
    );
}

/// `--containment pidns`: the command runs in a PID namespace of its own
/// (its `$$` there is small: the namespace's init is 1).
#[test]
fn pidns_mode_runs_the_command_in_its_own_pid_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Host::command(dir.path(), &["--containment", "pidns"], "echo ns-pid=$$");
    let output = command.stderr(Stdio::piped()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{log}");
    let pid: u32 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("ns-pid="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(pid < 10, "pid {pid} in the namespace\n{log}");
    assert!(log.contains("containment=\"pidns\""), "{log}");
}

/// The guard SIGKILLed: vvm-host ends the job itself (in the cgroup mode
/// with `cgroup.kill`; in the PID-namespace mode the init dies with the
/// guard) before it releases anything, and exits 125.
#[test]
fn a_killed_guard_gets_the_job_ended_and_exit_125() {
    let mut host = start(&[], work_loop, None);
    wait_for_work(&host.work(), 5);
    let guard = guard_of(host.child.id());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(guard), Signal::SIGKILL).unwrap();
    exits_125_with_the_job_ended(&mut host);
}

/// vvm-host, its guard gone, exits 125, and the job is gone by then: it
/// does no work after that.
fn exits_125_with_the_job_ended(host: &mut Host) {
    let status = wait_with_limit(&mut host.child);
    let ended = SystemTime::now();
    assert_eq!(status.code(), Some(125), "{status:?}");
    std::thread::sleep(Duration::from_millis(500));
    let last = last_work(&host.work()).unwrap();
    assert!(last < ended, "the job worked on after vvm-host exited");
}

/// The subreaper mode (the last resort) still reaches a `setsid` worker
/// whose parent is alive, through the process tree.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "VVM_HOST_FAULT_FILE works in debug builds only"
)]
fn in_subreaper_mode_a_setsid_worker_is_killed_with_vvm_host() {
    let mut host = start(
        &["--containment", "subreaper"],
        |work| {
            format!(
                "setsid sh -c \"{}\" & wait",
                work_loop(work).replace('"', "\\\"")
            )
        },
        None,
    );
    sigkill_and_check(&mut host, "subreaper mode");
}
