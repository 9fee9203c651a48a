//! The guard: a small process between `vvm-host` and the command, so that
//! nothing the command started outlives `vvm-host`, whatever ends it.
//!
//! `vvm-host` re-executes itself (`/proc/self/exe`, so an upgraded binary on
//! disk does not matter) as `vvm-host __vvm-host-guard -- COMMAND...`, in a
//! process group of its own, with one end of a unix socket pair as its
//! standard input: the *lifeline*. The guard
//!
//! 1. makes itself a child subreaper, so descendants that leave the
//!    command's process group (`setsid`, double forks) are re-parented to it
//!    when their parent dies, instead of to init;
//! 2. waits for the killer deadline (`deadline N` or `disarm`, which
//!    `vvm-host` writes as soon as the guard exists), then starts the
//!    command in a new process group and reports `started PID`;
//! 3. obeys `T` (SIGTERM to the command's group and to every orphan it
//!    adopted) and `K` (SIGKILL to all of them) read from the lifeline;
//! 4. when the lifeline closes, which the kernel does whenever `vvm-host`
//!    exits *for any reason* (SIGKILL and the OOM killer included), SIGKILLs
//!    everything;
//! 5. once the command has exited, SIGKILLs whatever is left of the job,
//!    reaps it all, reports `exited code N` or `exited signal N`, and exits.
//!
//! The guard needs no `unsafe` and no parent-death signal (which fires when
//! the *thread* that forked exits, not the process). It ignores the signals
//! meant for `vvm-host` (it is not in the terminal's foreground group, and
//! catches SIGINT, SIGTERM, SIGHUP and SIGQUIT if they are sent to it by
//! pid); only SIGKILL of the guard itself leaves the command to `vvm-host`,
//! which then kills the command's process group directly.

use std::{
    collections::HashSet,
    ffi::OsString,
    fs,
    io::{self, Write},
    os::{
        fd::AsFd,
        unix::{net::UnixStream as StdUnixStream, process::CommandExt},
    },
    process::{Command, ExitCode, Stdio},
    time::Duration,
};

use nix::{
    errno::Errno,
    sys::{
        signal::{Signal, kill, killpg},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::{Pid, getpgid},
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    net::UnixStream,
    signal::unix::{SignalKind, signal},
};

/// The first argument that makes `vvm-host` act as the guard.
pub(crate) const GUARD_ARG: &str = "__vvm-host-guard";

/// Lifeline line: SIGTERM to the command's group and adopted orphans.
pub(crate) const TERMINATE: &[u8] = b"term\n";
/// Lifeline line: SIGKILL to everything of the job.
pub(crate) const KILL: &[u8] = b"kill\n";
// Also: `deadline N` (the killer deadline, CLOCK_BOOTTIME nanoseconds: the
// guard kills the job by itself once it passes) and `disarm`.

/// How often the guard looks at the clock while a deadline is armed, so a
/// deadline passed during a host suspend is seen soon after the resume.
const DEADLINE_CHECK: Duration = Duration::from_millis(100);

/// `CLOCK_BOOTTIME` in nanoseconds: the monotonic clock plus time suspended.
pub(crate) fn boot_time() -> Option<u128> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let secs = u128::try_from(now.tv_sec()).ok()?;
    let nanos = u128::try_from(now.tv_nsec()).ok()?;
    Some(secs * 1_000_000_000 + nanos)
}

/// How often the final sweep looks for descendants left to kill.
const SWEEP_PAUSE: Duration = Duration::from_millis(2);

/// Runs the guard: `args` are the arguments after [`GUARD_ARG`] (`--`,
/// then the command). Never returns before every process of the job is gone.
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    let mut args = args.into_iter().skip_while(|arg| arg != "--").skip(1);
    let Some(program) = args.next() else {
        eprintln!("vvm-host guard: no command given");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("vvm-host guard: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(guard(program, args.collect())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("vvm-host guard: {err}");
            ExitCode::from(1)
        }
    }
}

async fn guard(program: OsString, args: Vec<OsString>) -> io::Result<()> {
    let lifeline = StdUnixStream::from(io::stdin().as_fd().try_clone_to_owned()?);
    // Reports are a few short lines (`started`, `exited`); the clone shares
    // the socket's file description, so they are non-blocking too: a write
    // that fails after the spawn is handled as the lifeline closing.
    let mut reports = lifeline.try_clone()?;
    lifeline.set_nonblocking(true)?;
    let lifeline = UnixStream::from_std(lifeline)?;

    if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!(
            "vvm-host guard: cannot become a child subreaper ({err}); descendants that leave the command's process group may survive it"
        );
    }
    // Signals meant for vvm-host must not end the guard before the job:
    // listening to them replaces their default action (termination).
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut quit = signal(SignalKind::quit())?;
    let mut children = signal(SignalKind::child())?;

    let mut lines = BufReader::new(lifeline).lines();
    // The first line is the killer deadline: a vvm-host stopped right after
    // the start cannot leave the command without one.
    let mut deadline: Option<u128> = match lines.next_line().await {
        Ok(Some(line)) => match parse_request(&line) {
            Request::Deadline(at) => at,
            _ => {
                writeln!(
                    reports,
                    "spawn-failed other no killer deadline first: {line:?}"
                )?;
                return Ok(());
            }
        },
        // vvm-host is gone before the command started: nothing to do.
        Ok(None) | Err(_) => return Ok(()),
    };
    if let (Some(at), Some(now)) = (deadline, boot_time())
        && now >= at
    {
        writeln!(reports, "spawn-failed other the killer deadline has passed")?;
        return Ok(());
    }

    let command = match Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            let kind = if err.kind() == io::ErrorKind::NotFound {
                "not-found"
            } else {
                "other"
            };
            writeln!(reports, "spawn-failed {kind} {err}")?;
            return Ok(());
        }
    };
    let pid = match i32::try_from(command.id()) {
        Ok(pid) => Pid::from_raw(pid),
        Err(err) => {
            // Cannot happen on Linux (pids fit in i32); never leave it running.
            let mut command = command;
            let _ = command.kill();
            let _ = command.wait();
            return Err(io::Error::other(err));
        }
    };
    // The std handle is not used to wait: the guard reaps every child itself.
    drop(command);

    let mut job = Job {
        command: pid,
        status: None,
    };
    let mut lifeline_open = true;
    // From here on no error may leave the command running: a report that
    // cannot be written means vvm-host is gone (or cannot hear us), which is
    // the lifeline closing.
    if let Err(err) = writeln!(reports, "started {pid}") {
        eprintln!(
            "vvm-host guard: cannot report the command's start ({err}): vvm-host is gone, SIGKILL to the command"
        );
        lifeline_open = false;
        job.signal_all(Signal::SIGKILL);
    }
    while job.status.is_none() {
        let check = match deadline {
            Some(_) => DEADLINE_CHECK,
            None => Duration::from_millis(500),
        };
        tokio::select! {
            _ = children.recv() => job.reap(),
            line = lines.next_line(), if lifeline_open => match line {
                Ok(Some(line)) => match parse_request(&line) {
                    Request::Terminate => job.signal_all(Signal::SIGTERM),
                    Request::Kill => job.signal_all(Signal::SIGKILL),
                    Request::Deadline(at) => deadline = at,
                    Request::Unknown => {
                        // Fail safe: a garbled line may have been a kill.
                        eprintln!("vvm-host guard: unknown request {line:?}: SIGKILL to the command");
                        job.signal_all(Signal::SIGKILL);
                    }
                },
                Ok(None) | Err(_) => {
                    // vvm-host is gone, whatever ended it: end the job.
                    lifeline_open = false;
                    job.signal_all(Signal::SIGKILL);
                }
            },
            // Also reaps in case a SIGCHLD was coalesced with an earlier one.
            () = tokio::time::sleep(check) => {
                job.reap();
                if let (Some(at), Some(now)) = (deadline, boot_time())
                    && now >= at
                {
                    eprintln!(
                        "vvm-host guard: the leadership deadline passed without word from vvm-host (stopped or stuck?): SIGKILL to the command"
                    );
                    deadline = None;
                    job.signal_all(Signal::SIGKILL);
                }
            }
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            _ = hangup.recv() => {}
            _ = quit.recv() => {}
        }
    }
    // The command has ended: nothing of its job may outlive it.
    let killed = job.sweep().await;
    let report = match job.status {
        Some(WaitStatus::Signaled(_, signal, _)) => format!("exited signal {}", signal as i32),
        Some(WaitStatus::Exited(_, code)) => format!("exited code {code}"),
        _ => "exited code 1".to_owned(),
    };
    // vvm-host may be gone already: then nobody needs the report.
    let _ = writeln!(reports, "{report} swept {killed}");
    Ok(())
}

/// A line read from the lifeline.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// `term`.
    Terminate,
    /// `kill`.
    Kill,
    /// `deadline N` (`Some(N)`) or `disarm` (`None`).
    Deadline(Option<u128>),
    /// Anything else.
    Unknown,
}

fn parse_request(line: &str) -> Request {
    match line.split_once(' ').unwrap_or((line, "")) {
        ("term", "") => Request::Terminate,
        ("kill", "") => Request::Kill,
        ("disarm", "") => Request::Deadline(None),
        ("deadline", at) => match at.trim().parse() {
            Ok(at) => Request::Deadline(Some(at)),
            Err(_) => Request::Unknown,
        },
        _ => Request::Unknown,
    }
}

/// The command (leader of its own process group) and its fate.
struct Job {
    command: Pid,
    status: Option<WaitStatus>,
}

impl Job {
    /// Reaps every child that has ended; records the command's status.
    fn reap(&mut self) {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => {
                    if status.pid() == Some(self.command)
                        && matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                    {
                        self.status = Some(status);
                    }
                }
            }
        }
    }

    /// `signal` to the command's process group and to every orphan the
    /// guard adopted outside it (each process gets it once).
    fn signal_all(&self, signal: Signal) {
        match killpg(self.command, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => eprintln!("vvm-host guard: {signal} to the command's group: {err}"),
        }
        for child in children_of_self() {
            if child != self.command && getpgid(Some(child)).ok() != Some(self.command) {
                let _ = kill(child, signal);
            }
        }
    }

    /// SIGKILLs and reaps until the guard has no child left; returns how
    /// many processes other than the command it killed.
    async fn sweep(&mut self) -> usize {
        let mut killed = HashSet::new();
        loop {
            let _ = killpg(self.command, Signal::SIGKILL);
            for child in children_of_self() {
                if child != self.command && kill(child, Signal::SIGKILL).is_ok() {
                    killed.insert(child);
                }
            }
            loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(_) => {}
                    Err(Errno::EINTR) => {}
                    Err(_) => return killed.len(), // ECHILD: nothing left
                }
            }
            tokio::time::sleep(SWEEP_PAUSE).await;
        }
    }
}

/// Every process whose parent is this process (read from `/proc`).
fn children_of_self() -> Vec<Pid> {
    let me = std::process::id().to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let pid: i32 = name.to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            // "pid (comm) state ppid ...": comm may hold spaces and ')'.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid = rest.split_whitespace().nth(1)?;
            (ppid == me).then(|| Pid::from_raw(pid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(parse_request("term"), Request::Terminate);
        assert_eq!(parse_request("kill"), Request::Kill);
        assert_eq!(parse_request("disarm"), Request::Deadline(None));
        assert_eq!(parse_request("deadline 42"), Request::Deadline(Some(42)));
        assert_eq!(parse_request("deadline x"), Request::Unknown);
        assert_eq!(parse_request("kill now"), Request::Unknown);
    }

    #[test]
    fn finds_its_own_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        assert!(children_of_self().contains(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!children_of_self().contains(&pid));
    }
}
