//! The host's side of a guarded command (see [`crate::guard`]): start the
//! guard, learn the command's pid, ask for SIGTERM or SIGKILL, and read how
//! the command ended.

use std::{
    ffi::OsString,
    io::{self, Write},
    os::{fd::OwnedFd, unix::net::UnixStream as StdUnixStream},
    process::Stdio,
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use nix::{
    sys::{
        signal::Signal,
        wait::{Id, WaitPidFlag, WaitStatus, waitid},
    },
    unistd::Pid,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    net::{
        UnixStream,
        unix::{OwnedReadHalf, OwnedWriteHalf},
    },
    process::{Child, Command},
};

pub(crate) use crate::guard::report::Outcome;
use crate::{
    containment::{JobCgroup, Plan, pidfd},
    guard::{
        GUARD_ARG, GUARD_NAME, KILL, TERMINATE, boot_time,
        report::{log_note, parse_exit},
    },
};

/// The executable the guard runs as: this very binary, even if the file on
/// disk was replaced since it started.
const SELF_EXE: &str = "/proc/self/exe";

/// Why a guarded command could not be run or followed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error("cannot start the guard process: {0}")]
    Guard(#[source] io::Error),
    #[error("cannot start {program:?}: {message}")]
    Spawn { program: OsString, message: String },
    #[error("the guard process ended without reporting ({0})")]
    GuardLost(String),
    #[error(
        "the guard process did not answer within {0:?} (stopped?); vvm-host ended the job itself"
    )]
    GuardUnresponsive(Duration),
    #[error("lifeline to the guard: {0}")]
    Io(#[from] io::Error),
}

/// What the elections killer needs to end a running job synchronously.
#[derive(Debug)]
pub(crate) struct JobHandle {
    guard: Pid,
    /// Names the guard for as long as vvm-host lives (our own child).
    guard_fd: Option<OwnedFd>,
    /// The job's cgroup, in the cgroup modes: ended without the guard.
    cgroup: Option<JobCgroup>,
    /// True when the job runs in a PID namespace of its own.
    pidns: bool,
    /// Known once the guard has reported it started the command.
    command: OnceLock<Pid>,
    /// Names the namespace's init (PID-namespace modes), once started: it
    /// exits only once every process of its namespace is gone.
    init_fd: OnceLock<OwnedFd>,
    lifeline: StdUnixStream,
}

impl JobHandle {
    /// Tells the guard the killer deadline, as an absolute `CLOCK_BOOTTIME`
    /// instant (which, unlike the monotonic clock, counts a suspended host).
    fn send_deadline(&self, deadline: Option<Instant>) {
        let line = match deadline {
            None => "disarm\n".to_owned(),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                match boot_time() {
                    Some(now) => format!("deadline {}\n", now.saturating_add(left.as_nanos())),
                    None => return,
                }
            }
        };
        if let Err(err) = (&self.lifeline).write_all(line.as_bytes()) {
            tracing::warn!(%err, "cannot tell the guard the killer deadline");
        }
    }

    /// Ends the job at once, then says nothing: the caller logs. In the
    /// cgroup modes, `cgroup.kill` first (no guard needed); then the guard
    /// is asked to kill (it reaches everything in every mode). Waits up to
    /// `limit` for the job to be gone (see [`JobHandle::gone`]). If it is
    /// not, the guard is SIGKILLed too (in the PID-namespace modes its death
    /// takes the namespace's init, and so the namespace, with it) and the
    /// wait goes on for up to `limit` more. True only if the job is known
    /// to be gone.
    pub(crate) fn kill_now(&self, limit: Duration) -> bool {
        if let Some(cgroup) = &self.cgroup {
            let _ = cgroup.kill();
        }
        let asked = (&self.lifeline).write_all(KILL).is_ok();
        if asked && self.wait_gone(limit) {
            return true;
        }
        self.kill_guard();
        if let Some(cgroup) = &self.cgroup {
            let _ = cgroup.kill();
        }
        self.wait_gone(limit)
    }

    /// Polls [`JobHandle::gone`] for up to `limit`.
    fn wait_gone(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if self.gone() {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// SIGKILL to the whole job without waiting: `cgroup.kill` in the cgroup
    /// mode, and the `kill` request to the guard in every mode.
    pub(crate) fn kill_soon(&self) {
        if let Some(cgroup) = &self.cgroup {
            let _ = cgroup.kill();
        }
        let _ = (&self.lifeline).write_all(KILL);
    }

    /// The guard's notes waiting on the lifeline (for a caller about to
    /// exit, which will not read them otherwise), logged. Never blocks.
    pub(crate) fn log_notes(&self) {
        use std::io::Read;
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = (&self.lifeline).read(&mut buf) {
            if n == 0 || bytes.len() > 1 << 20 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        for line in String::from_utf8_lossy(&bytes).lines() {
            log_note(line);
        }
    }

    /// True once the job is known to be gone:
    ///
    /// - its cgroup (and every cgroup below it) is empty, in the cgroup
    ///   modes, and
    /// - in the PID-namespace modes, the namespace's init has exited (it
    ///   exits only once every process of its namespace is gone, wherever
    ///   in the cgroup tree they moved);
    /// - else the guard has exited cleanly (it does only once the job is
    ///   empty); in the cgroup mode without a namespace a guard that died
    ///   otherwise leaves the empty cgroup as the best knowledge there is.
    pub(crate) fn gone(&self) -> bool {
        if self
            .cgroup
            .as_ref()
            .is_some_and(|cgroup| cgroup.populated())
        {
            return false;
        }
        if self.pidns
            && let Some(init) = self.init_fd.get()
        {
            return pidfd::exited(init);
        }
        match self.guard_exit() {
            Some(WaitStatus::Exited(_, 0)) => true,
            Some(_) => self.cgroup.is_some() && !self.pidns,
            None => false,
        }
    }

    /// The guard's end, if it has ended (only looked at: the runtime reaps
    /// it).
    fn guard_exit(&self) -> Option<WaitStatus> {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(self.guard), flags) {
            Ok(WaitStatus::StillAlive) | Err(_) => None,
            Ok(status) => Some(status),
        }
    }

    /// SIGKILL to the guard, through the pidfd that names our own child.
    fn kill_guard(&self) {
        if let Some(fd) = &self.guard_fd {
            pidfd::send(fd, Signal::SIGKILL);
        }
    }
}

/// The running job and the killer deadline, shared by the pipeline (which
/// starts jobs) and the killer (which arms deadlines and kills). Every
/// deadline is passed on to the guard, which kills the job by itself if it
/// passes: so the command stops even while vvm-host is stopped (SIGSTOP) or
/// stuck.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunningJob(Arc<Mutex<Shared>>);

#[derive(Debug, Default)]
struct Shared {
    handle: Option<Arc<JobHandle>>,
    deadline: Option<Instant>,
}

impl RunningJob {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `handle` (or clears it). A new guard is told the current
    /// deadline first, under the same lock as every later change, so it
    /// never misses one: the guard waits for this line before it starts the
    /// command.
    fn set(&self, handle: Option<Arc<JobHandle>>) {
        let mut shared = self.lock();
        if let Some(handle) = &handle {
            handle.send_deadline(shared.deadline);
        }
        shared.handle = handle;
    }

    /// The running job, if any.
    pub(crate) fn get(&self) -> Option<Arc<JobHandle>> {
        self.lock().handle.clone()
    }

    /// The killer deadline changed (`None`: disarmed).
    pub(crate) fn deadline(&self, deadline: Option<Instant>) {
        let mut shared = self.lock();
        shared.deadline = deadline;
        if let Some(handle) = &shared.handle {
            handle.send_deadline(deadline);
        }
    }
}

/// What the guard has acknowledged so far.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Acks {
    /// `ack term` seen.
    pub(crate) term: bool,
    /// `ack kill` seen.
    pub(crate) kill: bool,
}

/// A command running under its guard.
pub(crate) struct Job {
    guard: Child,
    /// The guard's reports (`None` only while starting).
    reports: Option<Lines<BufReader<OwnedReadHalf>>>,
    /// Kept open (`None` only while starting): dropping it would shut the
    /// lifeline's write direction, which the guard reads as "vvm-host is
    /// gone".
    lifeline_write: Option<OwnedWriteHalf>,
    handle: Arc<JobHandle>,
    running: RunningJob,
    acks: Acks,
}

impl Job {
    /// Starts `program args...` under a guard, contained as `containment`
    /// says, with `env` added to its environment, and publishes it in
    /// `running` for the killer.
    pub(crate) async fn start(
        program: &OsString,
        args: &[OsString],
        env: &[(&str, String)],
        pass_stdin: bool,
        containment: &Plan,
        running: &RunningJob,
    ) -> Result<Job, JobError> {
        let (mode, cgroup) = containment.prepare().map_err(JobError::Guard)?;
        let (host_end, guard_end) = StdUnixStream::pair().map_err(JobError::Guard)?;
        let mut command = Command::new(SELF_EXE);
        command
            .arg0(GUARD_NAME)
            .arg(GUARD_ARG)
            .arg("--containment")
            .arg(mode.to_arg())
            .arg("--nofile")
            .arg(
                crate::NOFILE_AT_START
                    .get()
                    .copied()
                    .unwrap_or(1024)
                    .to_string(),
            )
            .args(pass_stdin.then_some(crate::guard::PASS_STDIN_ARG))
            .arg("--")
            .arg(program)
            .args(args)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(guard_end)))
            // Out of vvm-host's group: a Ctrl-C or a kill of vvm-host's
            // group must reach vvm-host only, which then stops the job.
            .process_group(0)
            .kill_on_drop(false);
        for (name, value) in env {
            command.env(name, value);
        }
        let guard = match command.spawn() {
            Ok(guard) => guard,
            Err(err) => {
                if let Some(cgroup) = &cgroup {
                    cgroup.remove();
                }
                return Err(JobError::Guard(err));
            }
        };
        // Our copy of the guard's end must close, or its death goes unseen.
        drop(command);
        if pass_stdin {
            // First, before the killer deadline: the guard waits for it.
            crate::guard::send_stdin(&host_end).map_err(JobError::Guard)?;
        }
        let guard_pid = guard
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| JobError::Guard(io::Error::other("the guard has no pid")))?;

        let handle = Arc::new(JobHandle {
            guard: guard_pid,
            guard_fd: pidfd::open(guard_pid.as_raw()),
            cgroup,
            pidns: mode.pidns(),
            command: OnceLock::new(),
            init_fd: OnceLock::new(),
            lifeline: host_end.try_clone().map_err(JobError::Guard)?,
        });
        // At once: the guard does not start the command before it knows the
        // killer deadline, so a vvm-host stopped from here on cannot leave
        // the command running past its lease.
        running.set(Some(handle.clone()));
        let mut job = Job {
            guard,
            reports: None,
            lifeline_write: None,
            handle,
            running: running.clone(),
            acks: Acks::default(),
        };
        host_end.set_nonblocking(true).map_err(JobError::Guard)?;
        let (read, write) = UnixStream::from_std(host_end)
            .map_err(JobError::Guard)?
            .into_split();
        let mut reports = BufReader::new(read).lines();
        let first = loop {
            let line = reports.next_line().await?.unwrap_or_default();
            if !log_note(&line) {
                break line;
            }
        };
        let mut words = first.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("started"), Some(pid), _) => {
                let pid: i32 = pid
                    .parse()
                    .map_err(|_| JobError::GuardLost(format!("bad report {first:?}")))?;
                // Set once, here, before anyone else can read it.
                let _ = job.handle.command.set(Pid::from_raw(pid));
                if job.handle.pidns
                    && let Some(init) = pidfd::open_child_of(pid, guard_pid.as_raw())
                {
                    let _ = job.handle.init_fd.set(init);
                }
                job.reports = Some(reports);
                job.lifeline_write = Some(write);
                Ok(job)
            }
            (Some("spawn-failed"), Some(kind), message) => {
                job.remove_cgroup();
                Err(JobError::Spawn {
                    program: program.clone(),
                    message: format!("{kind}: {}", message.unwrap_or_default()),
                })
            }
            _ => {
                job.remove_cgroup();
                Err(JobError::GuardLost(format!("first report {first:?}")))
            }
        }
    }

    /// The command's pid (the leader of its process group; in the
    /// PID-namespace mode, the namespace's init).
    pub(crate) fn pid(&self) -> Option<Pid> {
        self.handle.command.get().copied()
    }

    /// The job's cgroup, in the cgroup mode.
    pub(crate) fn cgroup(&self) -> Option<&std::path::Path> {
        self.handle.cgroup.as_ref().map(JobCgroup::path)
    }

    /// What the guard has acknowledged.
    pub(crate) fn acks(&self) -> Acks {
        self.acks
    }

    /// SIGTERM to every process of the job (through the guard).
    pub(crate) fn terminate(&self) -> io::Result<()> {
        (&self.handle.lifeline).write_all(TERMINATE)
    }

    /// SIGKILL to every process of the job (through the guard).
    pub(crate) fn kill(&self) -> io::Result<()> {
        (&self.handle.lifeline).write_all(KILL)
    }

    /// Waits until the command has ended and the guard has killed and
    /// reaped everything of the job; returns how it ended and how many
    /// other processes of the job were killed. Logs the guard's notes and
    /// the processes that will not die meanwhile. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> Result<(Outcome, usize), JobError> {
        let report = loop {
            let line = match &mut self.reports {
                Some(reports) => reports.next_line().await,
                None => Ok(None),
            };
            let Ok(Some(line)) = line else {
                break line;
            };
            if log_note(&line) {
                continue;
            }
            match line.split_once(' ') {
                Some(("ack", "term")) => self.acks.term = true,
                Some(("ack", "kill")) => self.acks.kill = true,
                Some(("stuck", what)) => {
                    let mut words = what.splitn(3, ' ');
                    tracing::warn!(
                        pid = words.next().unwrap_or("?"),
                        state = words.next().unwrap_or("?"),
                        wchan = words.next().unwrap_or("?"),
                        "a process of the job has not ended after SIGKILL (uninterruptible sleep?); the lease is kept until it is gone"
                    );
                }
                _ => break Ok(Some(line)),
            }
        };
        let status = self.guard.wait().await;
        self.running.set(None);
        let line = match report {
            Ok(Some(line)) => line,
            other => {
                // The guard died (SIGKILLed?). The job is still within
                // reach (its cgroup; its namespace, whose init died with the
                // guard): end it and wait until it is gone.
                self.end_without_guard().await;
                return Err(JobError::GuardLost(format!(
                    "report {other:?}, guard {status:?}"
                )));
            }
        };
        parse_exit(&line).ok_or_else(|| JobError::GuardLost(format!("bad report {line:?}")))
    }

    /// Ends the job without the guard, which did not answer within
    /// `waited`: SIGKILL to the guard (in the PID-namespace modes that ends
    /// the namespace's init, and so the namespace) and `cgroup.kill`, then
    /// a wait until the job is gone (the lease is held meanwhile). Always
    /// an error: the guard failed.
    pub(crate) async fn take_over(&mut self, waited: Duration) -> JobError {
        self.handle.kill_guard();
        self.end_without_guard().await;
        let _ = self.guard.wait().await;
        self.running.set(None);
        self.remove_cgroup();
        JobError::GuardUnresponsive(waited)
    }

    /// `cgroup.kill` (cgroup modes) until the cgroup is empty, and a wait
    /// until the namespace's init has exited (PID-namespace modes: it dies
    /// with the guard), logging what is left every few seconds; then
    /// removes the job's cgroups.
    async fn end_without_guard(&self) {
        let started = std::time::Instant::now();
        let mut logged = started;
        loop {
            let populated = self
                .handle
                .cgroup
                .as_ref()
                .is_some_and(|cgroup| cgroup.populated());
            if let (true, Some(cgroup)) = (populated, &self.handle.cgroup) {
                let _ = cgroup.kill();
            }
            let init_alive = self
                .handle
                .init_fd
                .get()
                .is_some_and(|init| !pidfd::exited(init));
            if !populated && !init_alive {
                break;
            }
            if logged.elapsed() >= Duration::from_secs(5) {
                logged = std::time::Instant::now();
                let pids = self
                    .handle
                    .cgroup
                    .as_ref()
                    .map(JobCgroup::pids)
                    .unwrap_or_default();
                tracing::warn!(?pids, init_alive, waited = ?started.elapsed(), "processes of the job have not ended after SIGKILL; the lease is kept until they are gone");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.remove_cgroup();
    }

    fn remove_cgroup(&self) {
        if let Some(cgroup) = &self.handle.cgroup {
            cgroup.remove();
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.running.set(None);
        self.remove_cgroup();
    }
}
