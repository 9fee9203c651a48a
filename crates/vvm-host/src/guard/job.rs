//! The job as the guard holds it: the process it started (the namespace's
//! init in the PID-namespace modes, else the command), the containment that
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
};

use nix::{
    errno::Errno,
    sys::{
        signal::{Signal, kill, killpg},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};

use super::{
    exec::EXEC_ARG,
    init::{self, INIT_ARG},
    report::Reporter,
};
use crate::containment::{JobCgroup, Mode, pidfd, tree};

/// The executable the guard's helpers run as: this very binary.
const SELF_EXE: &str = "/proc/self/exe";

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
    /// A PID namespace whose init is the guard's child (`term` goes to it
    /// on this socket), in the job's cgroup in the cgroup mode.
    Init {
        socket: UnixStream,
        cgroup: Option<JobCgroup>,
    },
    /// The job's cgroup alone (no PID namespace could be made).
    Cgroup(JobCgroup),
    Subreaper,
}

/// The process the guard started, and everything the job holds.
pub(crate) struct Job {
    anchor: Anchor,
    mode: &'static str,
    /// The guard's child: the namespace's init, the trampoline that becomes
    /// the command, or the command.
    child: Pid,
    /// Names `child` for as long as the guard lives.
    child_fd: Option<OwnedFd>,
    /// The child's end (in the PID-namespace modes, the init's: the
    /// command's own is in its report).
    pub(crate) status: Option<WaitStatus>,
    /// False once the guard has no child left to reap.
    children_left: bool,
    /// The init's report: the command's end and how many processes it
    /// swept after it.
    init_report: Option<(String, usize)>,
}

/// The command's standard input: vvm-host's, passed down with
/// `--pass-stdin`, or `/dev/null`.
fn stdin_of(passed: Option<&OwnedFd>) -> io::Result<Stdio> {
    Ok(match passed {
        Some(fd) => Stdio::from(fd.try_clone()?),
        None => Stdio::null(),
    })
}

impl Job {
    /// Starts `program args...` contained as `mode` says; in the
    /// PID-namespace modes the init gets `lifeline` (the guard's end of its
    /// socket to vvm-host) to watch. The guard must be single-threaded here
    /// in those modes (checked by the caller: it calls this before its
    /// runtime exists).
    pub(crate) fn start(
        mode: &Mode,
        program: &OsString,
        args: &[OsString],
        lifeline: &UnixStream,
        stdin: Option<OwnedFd>,
    ) -> io::Result<Job> {
        let mut command;
        let anchor = match mode {
            Mode::Pidns | Mode::Cgroup { pidns: true, .. } => {
                crate::containment::pidns::enter().map_err(io::Error::other)?;
                let (ours, its) = UnixStream::pair()?;
                command = Command::new(SELF_EXE);
                command.arg0("vvm-host-init").arg(INIT_ARG);
                if let Some(path) = mode.cgroup() {
                    command.arg("--cgroup").arg(path);
                }
                command
                    .arg("--")
                    .arg(program)
                    .args(args)
                    .stdin(Stdio::from(OwnedFd::from(its)));
                Anchor::Init {
                    socket: ours,
                    cgroup: mode.cgroup().map(|path| JobCgroup::at(path.to_owned())),
                }
            }
            Mode::Cgroup { path, pidns: false } => {
                command = Command::new(SELF_EXE);
                command
                    .arg0(program)
                    .arg(EXEC_ARG)
                    .arg(path)
                    .arg("--")
                    .arg(program)
                    .args(args)
                    .stdin(stdin_of(stdin.as_ref())?);
                Anchor::Cgroup(JobCgroup::at(path.clone()))
            }
            Mode::Subreaper => {
                command = Command::new(program);
                command.args(args).stdin(stdin_of(stdin.as_ref())?);
                Anchor::Subreaper
            }
        };
        let child = command.process_group(0).spawn()?;
        let child = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        let _ = ANCHOR.set(PanicAnchor {
            cgroup: mode.cgroup().map(|path| JobCgroup::at(path.to_owned())),
            child: AtomicI32::new(child.as_raw()),
            reaped: AtomicBool::new(false),
        });
        if let Anchor::Init { socket, .. } = &anchor {
            // The init starts nothing before it has this; if it cannot be
            // sent the init is gone already, and its namespace with it.
            let _ = init::send_lifeline(socket, lifeline, stdin.as_ref());
            socket.set_nonblocking(true)?;
        }
        Ok(Job {
            anchor,
            mode: mode.name(),
            child,
            child_fd: pidfd::open(child.as_raw()),
            status: None,
            children_left: true,
            init_report: None,
        })
    }

    /// The pid to report as the command's (the init's, in the PID-namespace
    /// modes: the command's own pid there is the namespace's).
    pub(crate) fn pid(&self) -> Pid {
        self.child
    }

    /// The mode's name.
    pub(crate) fn mode(&self) -> &'static str {
        self.mode
    }

    fn cgroup(&self) -> Option<&JobCgroup> {
        match &self.anchor {
            Anchor::Init { cgroup, .. } => cgroup.as_ref(),
            Anchor::Cgroup(cgroup) => Some(cgroup),
            Anchor::Subreaper => None,
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

    /// SIGTERM to every process of the job, in every cgroup below the
    /// job's too.
    pub(crate) fn terminate(&mut self) {
        match &mut self.anchor {
            // `kill(-1, SIGTERM)` in the namespace, wherever they are.
            Anchor::Init { socket, .. } => {
                let _ = socket.write_all(b"term\n");
            }
            Anchor::Cgroup(cgroup) => signal_cgroup_and_tree(cgroup, Signal::SIGTERM),
            Anchor::Subreaper => self.signal_tree(Signal::SIGTERM),
        }
    }

    /// SIGKILL to every process of the job. The launcher first (the init,
    /// the trampoline, the command): whatever it has not started yet it
    /// never will, and what it has is inside the namespace or the cgroup.
    pub(crate) fn kill(&mut self) {
        self.signal_child(Signal::SIGKILL);
        match &self.anchor {
            // The kernel kills the namespace once its init dies; the cgroup
            // is killed too, for anything else in it.
            Anchor::Init { cgroup, .. } => {
                if let Some(cgroup) = cgroup {
                    let _ = cgroup.kill();
                }
            }
            Anchor::Cgroup(cgroup) => {
                let _ = cgroup.kill();
                // Orphans come to the guard (a subreaper): those that left
                // the cgroup are still its descendants.
                tree::signal_descendants(own_pid(), Signal::SIGKILL);
            }
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
                Ok(WaitStatus::StillAlive) => {
                    self.children_left = true;
                    return;
                }
                Err(Errno::ECHILD) => {
                    self.children_left = false;
                    return;
                }
                Err(Errno::EINTR) => {}
                Err(_) => return,
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

    /// Once the started process has ended: SIGKILL to whatever is left of
    /// the job (`cgroup.kill` whenever the cgroup or one below it is
    /// populated; the guard's descendants outside the PID-namespace modes),
    /// and reaps. Returns how many processes were still there.
    pub(crate) fn sweep(&mut self) -> usize {
        if self.init_report.is_none() {
            self.read_init_report();
        }
        let present = self.processes();
        if let Some(cgroup) = self.cgroup()
            && cgroup.populated()
        {
            let _ = cgroup.kill();
        }
        if !matches!(self.anchor, Anchor::Init { .. }) {
            tree::signal_descendants(own_pid(), Signal::SIGKILL);
        }
        self.reap();
        present.len()
    }

    /// True once the started process has ended and nothing of the job is
    /// left: no child to reap (in the PID-namespace modes the init is
    /// reaped only once its namespace is empty) and the cgroup, with every
    /// cgroup below it, empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.status.is_some()
            && !self.children_left
            && self.cgroup().is_none_or(|cgroup| !cgroup.populated())
    }

    /// Removes the job's cgroup and every cgroup the job made below it
    /// (once [`Job::is_empty`]).
    pub(crate) fn remove_cgroup(&self) {
        if let Some(cgroup) = self.cgroup() {
            cgroup.remove();
        }
    }

    /// Reads the init's report, if one is waiting (PID-namespace modes).
    fn read_init_report(&mut self) {
        use std::io::Read;
        if let Anchor::Init { socket, .. } = &mut self.anchor {
            let mut buf = [0u8; 256];
            if let Ok(n) = socket.read(&mut buf)
                && n > 0
            {
                let text = String::from_utf8_lossy(&buf[..n]);
                self.init_report = text.lines().find_map(parse_init_report);
            }
        }
    }

    /// The command's end, as vvm-host's report words it, and how many
    /// processes the init swept after it.
    pub(crate) fn outcome(&self) -> (String, usize) {
        if let Some(report) = &self.init_report {
            return report.clone();
        }
        let outcome = match self.status {
            Some(WaitStatus::Signaled(_, signal, _)) => format!("exited signal {}", signal as i32),
            Some(WaitStatus::Exited(_, code)) => format!("exited code {code}"),
            _ => "exited code 1".to_owned(),
        };
        (outcome, 0)
    }

    /// The processes of the job now: the guard's descendants (the init and
    /// its namespace included) and whatever is in the job's cgroups.
    pub(crate) fn processes(&self) -> Vec<i32> {
        let mut pids = tree::descendants(own_pid());
        if let Some(cgroup) = self.cgroup() {
            pids.extend(cgroup.pids());
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// `exited code N swept K` (or `exited signal N ...`): the init's report.
fn parse_init_report(line: &str) -> Option<(String, usize)> {
    let (outcome, swept) = line.split_once(" swept ")?;
    outcome
        .starts_with("exited ")
        .then(|| (outcome.to_owned(), swept.trim().parse().unwrap_or(0)))
}

/// `signal` to every process in `cgroup` or below it, and to every
/// descendant of the guard that left it, each once, each through a pidfd
/// and checked first.
fn signal_cgroup_and_tree(cgroup: &JobCgroup, signal: Signal) {
    let inside = cgroup.pids();
    cgroup.signal_all(signal);
    let me = own_pid();
    for pid in tree::descendants(me) {
        if !inside.contains(&pid) {
            pidfd::signal_verified(pid, signal, || tree::is_descendant(pid, me));
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
