//! The host's side of a guarded command (see [`crate::guard`]): start the
//! guard, learn the command's pid, ask for SIGTERM or SIGKILL, and read how
//! the command ended.

use std::{
    ffi::OsString,
    io::{self, Write},
    os::unix::net::UnixStream as StdUnixStream,
    process::Stdio,
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        signal::{Signal, killpg},
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

use crate::guard::{GUARD_ARG, KILL, TERMINATE, boot_time};

/// The executable the guard runs as: this very binary, even if the file on
/// disk was replaced since it started.
const SELF_EXE: &str = "/proc/self/exe";

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// It could not be started; `true` when the program was not found.
    NotStarted { not_found: bool },
}

impl Outcome {
    /// The exit status a shell would report: the code, 128+N for signal N,
    /// 127 when not found, 126 when not startable.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Outcome::Code(code) => u8::try_from(code & 0xff).unwrap_or(1),
            Outcome::Signal(signal) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
            Outcome::NotStarted { not_found: true } => 127,
            Outcome::NotStarted { not_found: false } => 126,
        }
    }

    /// True for a zero exit code.
    pub(crate) fn success(self) -> bool {
        self == Outcome::Code(0)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Code(code) => write!(f, "exit code {code}"),
            Outcome::Signal(signal) => match Signal::try_from(*signal) {
                Ok(signal) => write!(f, "signal {signal}"),
                Err(_) => write!(f, "signal {signal}"),
            },
            Outcome::NotStarted { not_found: true } => f.write_str("not found"),
            Outcome::NotStarted { not_found: false } => f.write_str("could not be started"),
        }
    }
}

/// Why a guarded command could not be run or followed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error("cannot start the guard process: {0}")]
    Guard(#[source] io::Error),
    #[error("cannot start {program:?}: {message}")]
    Spawn { program: OsString, message: String },
    #[error(
        "the guard process ended without reporting ({0}); the command's process group was killed"
    )]
    GuardLost(String),
    #[error("lifeline to the guard: {0}")]
    Io(#[from] io::Error),
}

/// What the elections killer needs to end a running job synchronously.
#[derive(Debug)]
pub(crate) struct JobHandle {
    guard: Pid,
    /// Known once the guard has reported it started the command.
    command: OnceLock<Pid>,
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

    /// SIGKILL to the command's process group at once, then asks the guard
    /// to kill every descendant, and waits up to `limit` for the guard to
    /// report that the whole job is gone (by exiting). True if it did.
    pub(crate) fn kill_now(&self, limit: Duration) -> bool {
        // Before the guard reported the command's pid, the `kill` request
        // below is enough: the guard reads it once the command runs.
        if let Some(&command) = self.command.get() {
            match killpg(command, Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(err) => tracing::error!(%err, "SIGKILL to the command's process group failed"),
            }
        }
        match (&self.lifeline).write_all(KILL) {
            Ok(()) => {}
            // The guard has finished already: the job is gone.
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => return true,
            Err(err) => tracing::error!(
                %err,
                "cannot reach the guard; its lifeline closes when vvm-host exits"
            ),
        }
        let deadline = std::time::Instant::now() + limit;
        loop {
            // WNOWAIT: only look; the runtime reaps the guard.
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
            match waitid(Id::Pid(self.guard), flags) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(_) | Err(_) => return true,
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
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
}

impl Job {
    /// Starts `program args...` under a guard, with `env` added to its
    /// environment, and publishes it in `running` for the killer.
    pub(crate) async fn start(
        program: &OsString,
        args: &[OsString],
        env: &[(&str, String)],
        running: &RunningJob,
    ) -> Result<Job, JobError> {
        let (host_end, guard_end) = StdUnixStream::pair().map_err(JobError::Guard)?;
        let mut command = Command::new(SELF_EXE);
        command
            .arg(GUARD_ARG)
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
        let guard = command.spawn().map_err(JobError::Guard)?;
        // Our copy of the guard's end must close, or its death goes unseen.
        drop(command);
        let guard_pid = guard
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| JobError::Guard(io::Error::other("the guard has no pid")))?;

        let handle = Arc::new(JobHandle {
            guard: guard_pid,
            command: OnceLock::new(),
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
        };
        host_end.set_nonblocking(true).map_err(JobError::Guard)?;
        let (read, write) = UnixStream::from_std(host_end)
            .map_err(JobError::Guard)?
            .into_split();
        let mut reports = BufReader::new(read).lines();
        let first = reports.next_line().await?.unwrap_or_default();
        let mut words = first.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("started"), Some(pid), _) => {
                let pid: i32 = pid
                    .parse()
                    .map_err(|_| JobError::GuardLost(format!("bad report {first:?}")))?;
                // Set once, here, before anyone else can read it.
                let _ = job.handle.command.set(Pid::from_raw(pid));
                job.reports = Some(reports);
                job.lifeline_write = Some(write);
                Ok(job)
            }
            (Some("spawn-failed"), Some(kind), message) => Err(JobError::Spawn {
                program: program.clone(),
                message: format!(
                    "{}{}",
                    if kind == "not-found" {
                        "not found: "
                    } else {
                        ""
                    },
                    message.unwrap_or_default()
                ),
            }),
            _ => Err(JobError::GuardLost(format!("first report {first:?}"))),
        }
    }

    /// The command's pid (the leader of its process group).
    pub(crate) fn pid(&self) -> Option<Pid> {
        self.handle.command.get().copied()
    }

    /// SIGTERM to the command's process group and adopted orphans.
    pub(crate) fn terminate(&self) -> io::Result<()> {
        (&self.handle.lifeline).write_all(TERMINATE)
    }

    /// SIGKILL to everything of the job.
    pub(crate) fn kill(&self) -> io::Result<()> {
        (&self.handle.lifeline).write_all(KILL)
    }

    /// Waits until the command has ended and the guard has killed and
    /// reaped everything of the job; returns how it ended and how many
    /// other processes of the job were killed.
    pub(crate) async fn wait(&mut self) -> Result<(Outcome, usize), JobError> {
        let report = match &mut self.reports {
            Some(reports) => reports.next_line().await,
            None => Ok(None),
        };
        let status = self.guard.wait().await;
        self.running.set(None);
        let line = match report {
            Ok(Some(line)) => line,
            other => {
                // The guard died (SIGKILLed?): kill what we know of the job.
                if let Some(pid) = self.pid() {
                    let _ = killpg(pid, Signal::SIGKILL);
                }
                return Err(JobError::GuardLost(format!(
                    "report {other:?}, guard {status:?}"
                )));
            }
        };
        parse_exit(&line).ok_or_else(|| JobError::GuardLost(format!("bad report {line:?}")))
    }
}

/// Parses `exited code N swept K` / `exited signal N swept K`.
fn parse_exit(line: &str) -> Option<(Outcome, usize)> {
    let words: Vec<&str> = line.split(' ').collect();
    let (outcome, swept) = match words.as_slice() {
        ["exited", "code", n, "swept", k] => (Outcome::Code(n.parse().ok()?), k),
        ["exited", "signal", n, "swept", k] => (Outcome::Signal(n.parse().ok()?), k),
        _ => return None,
    };
    Some((outcome, swept.parse().ok()?))
}

impl Drop for Job {
    fn drop(&mut self) {
        self.running.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        assert_eq!(
            parse_exit("exited code 7 swept 0"),
            Some((Outcome::Code(7), 0))
        );
        assert_eq!(
            parse_exit("exited signal 9 swept 2"),
            Some((Outcome::Signal(9), 2))
        );
        assert_eq!(parse_exit("exited code x swept 0"), None);
        assert_eq!(parse_exit("hello"), None);
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(Outcome::Code(7).exit_code(), 7);
        assert_eq!(Outcome::Signal(9).exit_code(), 137);
        assert_eq!(Outcome::NotStarted { not_found: true }.exit_code(), 127);
        assert_eq!(Outcome::NotStarted { not_found: false }.exit_code(), 126);
        assert!(Outcome::Code(0).success());
        assert!(!Outcome::Signal(15).success());
    }
}
