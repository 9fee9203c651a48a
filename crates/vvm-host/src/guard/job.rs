//! The job as the guard holds it: the process it started (the command, or
//! in the PID-namespace mode the namespace's init), the containment that
//! reaches everything else, and how to end and empty it.

use std::{
    ffi::OsString,
    io::{self, Write},
    os::{fd::OwnedFd, unix::net::UnixStream, unix::process::CommandExt},
    process::{Command, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicBool, AtomicI32, Ordering},
    },
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        signal::{Signal, kill, killpg},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};

use super::{exec::EXEC_ARG, init::INIT_ARG, report::Reporter};
use crate::containment::{JobCgroup, Mode, pidfd, tree};

/// The executable the guard's helpers run as: this very binary.
const SELF_EXE: &str = "/proc/self/exe";
/// How often the final wait looks again for processes left.
const SWEEP_PAUSE: Duration = Duration::from_millis(2);
/// How often a job that will not end is reported (pid, state, wchan).
const STUCK_REPORT: Duration = Duration::from_secs(5);

/// What the panic hook needs to end the job without the [`Job`] itself.
static ANCHOR: OnceLock<PanicAnchor> = OnceLock::new();

struct PanicAnchor {
    cgroup: Option<JobCgroup>,
    child: AtomicI32,
    reaped: AtomicBool,
}

/// Makes any panic of the guard SIGKILL the job, then exit, saying nothing
/// (standard error may be a stalled pipe or a terminal that stops us).
pub(crate) fn kill_on_panic() {
    std::panic::set_hook(Box::new(|_| {
        if let Some(anchor) = ANCHOR.get() {
            if let Some(cgroup) = &anchor.cgroup {
                let _ = cgroup.kill();
            }
            let child = anchor.child.load(Ordering::SeqCst);
            if child > 0 && !anchor.reaped.load(Ordering::SeqCst) {
                let _ = killpg(Pid::from_raw(child), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
            }
        }
        std::process::exit(101);
    }));
}

/// How the job is reached beyond the process the guard started.
enum Anchor {
    Cgroup(JobCgroup),
    /// The namespace's init; `term` goes to it on this socket.
    Pidns(UnixStream),
    Subreaper,
}

/// The process the guard started, and everything the job holds.
pub(crate) struct Job {
    anchor: Anchor,
    /// The guard's child: the command (cgroup, subreaper) or the init.
    child: Pid,
    /// Names `child` for as long as the guard lives.
    child_fd: Option<OwnedFd>,
    /// The command's end (in the PID-namespace mode, as the init reports).
    pub(crate) status: Option<WaitStatus>,
    /// The init's report (PID-namespace mode).
    init_report: Option<String>,
}

impl Job {
    /// Starts `program args...` contained as `mode` says. The guard must be
    /// single-threaded here in the PID-namespace mode (checked by the
    /// caller: it calls this before its runtime exists).
    pub(crate) fn start(mode: &Mode, program: &OsString, args: &[OsString]) -> io::Result<Job> {
        let mut command;
        let anchor = match mode {
            Mode::Cgroup(path) => {
                command = Command::new(SELF_EXE);
                command
                    .arg0(program)
                    .arg(EXEC_ARG)
                    .arg(path)
                    .arg("--")
                    .arg(program)
                    .args(args);
                Anchor::Cgroup(JobCgroup::at(path.clone()))
            }
            Mode::Pidns => {
                crate::containment::pidns::enter().map_err(io::Error::other)?;
                let (ours, its) = UnixStream::pair()?;
                command = Command::new(SELF_EXE);
                command
                    .arg0("vvm-host-init")
                    .arg(INIT_ARG)
                    .arg("--")
                    .arg(program)
                    .args(args)
                    .stdin(Stdio::from(OwnedFd::from(its)));
                ours.set_nonblocking(true)?;
                Anchor::Pidns(ours)
            }
            Mode::Subreaper => {
                command = Command::new(program);
                command.args(args);
                Anchor::Subreaper
            }
        };
        if !matches!(anchor, Anchor::Pidns(_)) {
            command.stdin(Stdio::null());
        }
        let child = command.process_group(0).spawn()?;
        let child = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        let _ = ANCHOR.set(PanicAnchor {
            cgroup: match &anchor {
                Anchor::Cgroup(cgroup) => Some(JobCgroup::at(cgroup.path().to_owned())),
                _ => None,
            },
            child: AtomicI32::new(child.as_raw()),
            reaped: AtomicBool::new(false),
        });
        Ok(Job {
            anchor,
            child,
            child_fd: pidfd::open(child.as_raw()),
            status: None,
            init_report: None,
        })
    }

    /// The pid to report as the command's (the init's, in the PID-namespace
    /// mode: the command's own pid there is the namespace's).
    pub(crate) fn pid(&self) -> Pid {
        self.child
    }

    /// The mode's name.
    pub(crate) fn mode(&self) -> &'static str {
        match self.anchor {
            Anchor::Cgroup(_) => "cgroup",
            Anchor::Pidns(_) => "pidns",
            Anchor::Subreaper => "subreaper",
        }
    }

    fn child_unreaped(&self) -> bool {
        self.status.is_none()
    }

    /// `signal` to the guard's own child, which is still unreaped, so its
    /// pid (and process group) cannot belong to anybody else.
    fn signal_child(&self, signal: Signal) {
        if !self.child_unreaped() {
            return;
        }
        match &self.child_fd {
            Some(fd) => {
                pidfd::send(fd, signal);
            }
            None => {
                let _ = kill(self.child, signal);
            }
        }
    }

    /// SIGTERM to every process of the job.
    pub(crate) fn terminate(&mut self) {
        match &mut self.anchor {
            Anchor::Cgroup(cgroup) => {
                cgroup.signal_all(Signal::SIGTERM);
            }
            Anchor::Pidns(socket) => {
                let _ = socket.write_all(b"term\n");
            }
            Anchor::Subreaper => self.signal_tree(Signal::SIGTERM),
        }
    }

    /// SIGKILL to every process of the job.
    pub(crate) fn kill(&mut self) {
        match &self.anchor {
            Anchor::Cgroup(cgroup) => {
                if cgroup.kill().is_err() {
                    // Removed or unwritable: fall back to what we can reach.
                    self.signal_tree(Signal::SIGKILL);
                }
            }
            // The kernel kills the namespace once its init dies.
            Anchor::Pidns(_) => self.signal_child(Signal::SIGKILL),
            Anchor::Subreaper => self.signal_tree(Signal::SIGKILL),
        }
    }

    /// The subreaper mode's reach: the command's group and the command
    /// while unreaped, then every descendant found in `/proc`.
    fn signal_tree(&self, signal: Signal) {
        if self.child_unreaped() {
            let _ = killpg(self.child, signal);
            self.signal_child(signal);
        }
        tree::signal_descendants(own_pid(), signal);
    }

    /// Reaps every ended child; records the started process's status.
    pub(crate) fn reap(&mut self) {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => {
                    if status.pid() == Some(self.child)
                        && matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                    {
                        if let Some(anchor) = ANCHOR.get() {
                            anchor.reaped.store(true, Ordering::SeqCst);
                        }
                        self.status = Some(status);
                    }
                }
            }
        }
    }

    /// Reads the init's report, if one is waiting (PID-namespace mode).
    pub(crate) fn read_init_report(&mut self) {
        use std::io::Read;
        if let Anchor::Pidns(socket) = &mut self.anchor {
            let mut buf = [0u8; 256];
            if let Ok(n) = socket.read(&mut buf)
                && n > 0
            {
                let text = String::from_utf8_lossy(&buf[..n]);
                if let Some(line) = text.lines().find(|line| line.starts_with("exited ")) {
                    self.init_report = Some(line.to_owned());
                }
            }
        }
    }

    /// The command's end, as vvm-host's report words it.
    pub(crate) fn outcome(&self) -> String {
        if let Some(report) = &self.init_report {
            return report.clone();
        }
        match self.status {
            Some(WaitStatus::Signaled(_, signal, _)) => format!("exited signal {}", signal as i32),
            Some(WaitStatus::Exited(_, code)) => format!("exited code {code}"),
            _ => "exited code 1".to_owned(),
        }
    }

    /// Once the started process has ended: SIGKILL to whatever is left,
    /// then waits until the job is empty (a process stuck in
    /// uninterruptible sleep holds this up; it is reported every few
    /// seconds), reaps everything, and removes the cgroup. Returns how many
    /// processes other than the command were still there.
    pub(crate) async fn empty(&mut self, reports: &mut Reporter) -> usize {
        self.read_init_report();
        let mut left = 0;
        let mut last_report = Instant::now();
        loop {
            let present = match &self.anchor {
                Anchor::Cgroup(cgroup) => {
                    let pids = cgroup.pids();
                    if !pids.is_empty() {
                        let _ = cgroup.kill();
                    }
                    pids
                }
                // The init is reaped only once its namespace is empty.
                Anchor::Pidns(_) => Vec::new(),
                Anchor::Subreaper => {
                    let pids = tree::descendants(own_pid());
                    tree::signal_descendants(own_pid(), Signal::SIGKILL);
                    pids
                }
            };
            left = left.max(present.len());
            let mut any_child = true;
            loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(_) => {
                        any_child = false; // ECHILD
                        break;
                    }
                }
            }
            let populated = match &self.anchor {
                Anchor::Cgroup(cgroup) => cgroup.populated(),
                _ => false,
            };
            if !any_child && !populated {
                break;
            }
            if last_report.elapsed() >= STUCK_REPORT {
                last_report = Instant::now();
                report_stuck(&present, reports);
            }
            tokio::time::sleep(SWEEP_PAUSE).await;
        }
        if let Anchor::Cgroup(cgroup) = &self.anchor {
            cgroup.remove();
        }
        left
    }
}

impl Job {
    /// The processes of the job now (the guard's descendants outside the
    /// cgroup mode).
    pub(crate) fn processes(&self) -> Vec<i32> {
        match &self.anchor {
            Anchor::Cgroup(cgroup) => cgroup.pids(),
            _ => tree::descendants(own_pid()),
        }
    }
}

/// Tells vvm-host the pid, state and kernel wait channel of each process.
pub(crate) fn report_stuck(pids: &[i32], reports: &mut Reporter) {
    for &pid in pids {
        if let Some((state, wchan)) = tree::state_and_wchan(pid) {
            let _ = reports.send(&format!("stuck {pid} {state} {wchan}"));
        }
    }
}

fn own_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}
