//! The guard: a small process between `vvm-host` and the command, so that
//! nothing the command started outlives `vvm-host`, whatever ends it.
//!
//! `vvm-host` re-executes itself (`/proc/self/exe`, so an upgraded binary on
//! disk does not matter) as `vvm-host-guard __vvm-host-guard --containment
//! MODE -- COMMAND...`, in a process group of its own, with one end of a
//! unix socket pair as its standard input: the *lifeline*. The guard
//!
//! 1. waits for the killer deadline (`deadline N` or `disarm`, which
//!    `vvm-host` writes as soon as the guard exists), then starts the
//!    command contained as MODE says (see [`crate::containment`]; in the
//!    PID-namespace modes through the namespace's init, [`init`], which
//!    joins the job's cgroup before it starts anything and gets a copy of
//!    the lifeline to watch, so the job dies with vvm-host even while the
//!    guard is stopped) and reports `started PID`;
//! 2. obeys `term` (SIGTERM to every process of the job) and `kill`
//!    (SIGKILL to all of them), acknowledging each (`ack term`, `ack
//!    kill`), so vvm-host knows the guard is alive;
//! 3. when the lifeline closes, which the kernel does whenever `vvm-host`
//!    exits *for any reason* (SIGKILL and the OOM killer included), or when
//!    the killer deadline passes without word from vvm-host, SIGKILLs the
//!    job: the process it started first (the init, or the launcher, which
//!    then never starts anything more), then the cgroup;
//! 4. once the command has exited, SIGKILLs whatever is left of the job
//!    (`cgroup.kill` whenever the cgroup or one below it is populated),
//!    until it is empty — still watching the lifeline and the deadline —
//!    (reporting `stuck PID STATE WCHAN` every few seconds for a process
//!    that will not die, such as one in uninterruptible sleep on a frozen
//!    file system), reaps it all, removes the job's cgroups, reports
//!    `exited code N` or `exited signal N`, and exits.
//!
//! **Kill first, then speak.** The guard never writes to its standard error
//! (a full pipe would block it, a closed one would fail it, a terminal with
//! `tostop` would stop it): its words go over the non-blocking lifeline
//! ([`report`]), always after the kill they describe. It ignores SIGTTOU,
//! SIGTTIN and SIGTSTP and the signals meant for vvm-host, and a panic
//! SIGKILLs the job before the guard exits. SIGKILL or SIGSTOP of the
//! guard itself leave the job to vvm-host and, in the PID-namespace modes,
//! to the init, which dies with either of them.

pub(crate) mod exec;
mod fds;
pub(crate) mod init;
mod job;
pub(crate) mod report;

use std::{
    ffi::OsString,
    io::{self, Read},
    os::{fd::AsFd, unix::net::UnixStream as StdUnixStream},
    process::ExitCode,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    net::UnixStream,
    signal::unix::{SignalKind, signal},
};

use self::{job::Job, report::Reporter};
use crate::{containment::Mode, signals};

/// The first argument that makes `vvm-host` act as the guard.
pub(crate) const GUARD_ARG: &str = "__vvm-host-guard";
/// The guard's process name (`ps`, `pgrep vvm-host`).
pub(crate) const GUARD_NAME: &str = "vvm-host-guard";

/// The guard's flag for `vvm-host run --pass-stdin`: vvm-host then sends
/// its standard input first, attached to [`STDIN_LINE`].
pub(crate) const PASS_STDIN_ARG: &str = "--pass-stdin";
/// The line that carries vvm-host's standard input to the guard.
pub(crate) const STDIN_LINE: &[u8] = b"stdin\n";

/// Sends vvm-host's standard input to the guard (`--pass-stdin`),
/// attached to [`STDIN_LINE`]; the guard hands it to the command.
pub(crate) fn send_stdin(socket: &StdUnixStream) -> io::Result<()> {
    let stdin = io::stdin();
    fds::send(socket, STDIN_LINE, &[stdin.as_fd()])
}

/// Lifeline line: SIGTERM to every process of the job.
pub(crate) const TERMINATE: &[u8] = b"term\n";
/// Lifeline line: SIGKILL to every process of the job.
pub(crate) const KILL: &[u8] = b"kill\n";
// Also: `deadline N` (the killer deadline, CLOCK_BOOTTIME nanoseconds: the
// guard kills the job by itself once it passes) and `disarm`.

/// How often the guard looks at the clock while a deadline is armed, so a
/// deadline passed during a host suspend is seen soon after the resume.
const DEADLINE_CHECK: Duration = Duration::from_millis(100);
/// How often a killed job that has not ended is reported.
const STUCK_REPORT: Duration = Duration::from_secs(5);
/// How often the guard looks again, once the command has ended, for what
/// is left of its job.
const SWEEP_PAUSE: Duration = Duration::from_millis(2);

/// `CLOCK_BOOTTIME` in nanoseconds: the monotonic clock plus time suspended.
pub(crate) fn boot_time() -> Option<u128> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let secs = u128::try_from(now.tv_sec()).ok()?;
    let nanos = u128::try_from(now.tv_nsec()).ok()?;
    Some(secs * 1_000_000_000 + nanos)
}

/// Runs the guard: `args` are the arguments after [`GUARD_ARG`]
/// (`--containment MODE -- COMMAND...`). Never returns before every process
/// of the job is gone. Says nothing on its standard error.
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    job::kill_on_panic();
    let _ = nix::sys::prctl::set_name(c"vvm-host-guard");
    let Ok(lifeline) = io::stdin().as_fd().try_clone_to_owned() else {
        return ExitCode::from(2);
    };
    let lifeline = StdUnixStream::from(lifeline);
    let Ok(reports) = lifeline.try_clone() else {
        return ExitCode::from(2);
    };
    let mut reports = Reporter::new(reports);
    let (mode, pass_stdin, program, args) = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(why) => {
            let _ = lifeline.set_nonblocking(true);
            let _ = reports.send(&format!("spawn-failed other {why}"));
            return ExitCode::from(2);
        }
    };
    // With --pass-stdin, vvm-host's standard input comes first, attached
    // to its own line (read with the message's descriptors: a plain read
    // would drop them).
    let stdin = if pass_stdin {
        match fds::receive(&lifeline, STDIN_LINE) {
            Ok(fds) => fds.into_iter().next(),
            Err(_) => return ExitCode::SUCCESS,
        }
    } else {
        None
    };
    // Then the killer deadline: a vvm-host stopped right after the start
    // cannot leave the command without one. Read before anything else,
    // blocking: the PID-namespace mode needs a single thread to start.
    let first = read_line(&lifeline);
    if lifeline.set_nonblocking(true).is_err() {
        return ExitCode::from(2);
    }
    let deadline = match first.as_deref().map(parse_request) {
        Some(Request::Deadline(at)) => at,
        Some(_) => {
            let _ = reports.send("spawn-failed other no killer deadline first");
            return ExitCode::SUCCESS;
        }
        // vvm-host is gone before the command started: nothing to do.
        None => return ExitCode::SUCCESS,
    };
    if let (Some(at), Some(now)) = (deadline, boot_time())
        && now >= at
    {
        let _ = reports.send("spawn-failed other the killer deadline has passed");
        return ExitCode::SUCCESS;
    }
    if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
        reports.note(&format!(
            "cannot become a child subreaper ({err}); orphans of the job are reparented elsewhere"
        ));
    }
    if let Err(err) = crate::program::resolve(&program) {
        let _ = reports.send(&format!("spawn-failed {} {err}", err.kind_word()));
        return ExitCode::SUCCESS;
    }
    let job = match Job::start(&mode, &program, &args, &lifeline, stdin) {
        Ok(job) => job,
        Err(err) => {
            let _ = reports.send(&format!(
                "spawn-failed other {} containment: {err}",
                mode.name()
            ));
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(_) => {
            let mut job = job;
            job.kill();
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(guard(job, lifeline, reports, deadline)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(1),
    }
}

/// `--containment MODE [--nofile N] [--pass-stdin] -- PROGRAM ARGS...`.
fn parse_args(args: Vec<OsString>) -> Result<(Mode, bool, OsString, Vec<OsString>), String> {
    let mut args = args.into_iter().peekable();
    let mode = match (args.next(), args.next()) {
        (Some(flag), Some(mode)) if flag == "--containment" => mode
            .to_str()
            .ok_or("containment mode is not UTF-8")?
            .parse::<Mode>()?,
        _ => return Err("no --containment given".to_owned()),
    };
    // `--nofile N`: the soft descriptor limit vvm-host started with (its
    // metrics endpoint raises its own); the command gets it back.
    if args.peek().is_some_and(|arg| arg == "--nofile") {
        args.next();
        let soft = args
            .next()
            .and_then(|n| n.to_str().and_then(|n| n.parse::<u64>().ok()))
            .ok_or("--nofile takes a number")?;
        restore_nofile(soft);
    }
    let pass_stdin = args.peek().is_some_and(|arg| arg == PASS_STDIN_ARG);
    let mut command = args.skip_while(|arg| arg != "--").skip(1);
    let program = command.next().ok_or("no command given")?;
    Ok((mode, pass_stdin, program, command.collect()))
}

/// Sets the soft `RLIMIT_NOFILE` back to `soft` (best effort; the hard
/// limit is left as it is).
fn restore_nofile(soft: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, soft.min(hard), hard);
    }
}

/// One line from the (blocking) lifeline, read a byte at a time so nothing
/// after it is consumed. `None` at end of file or on error.
fn read_line(mut lifeline: &StdUnixStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match lifeline.read(&mut byte) {
            Ok(0) => return None,
            Ok(_) if byte[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(_) if line.len() < 256 => line.push(byte[0]),
            Ok(_) => return String::from_utf8(line).ok(),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

async fn guard(
    mut job: Job,
    lifeline: StdUnixStream,
    mut reports: Reporter,
    mut deadline: Option<u128>,
) -> io::Result<()> {
    let lifeline = UnixStream::from_std(lifeline)?;
    // Signals meant for vvm-host, and the terminal's job-control signals,
    // must not end or stop the guard (the command gets the defaults).
    let job_control = [nix::libc::SIGTSTP, nix::libc::SIGTTIN, nix::libc::SIGTTOU];
    let _ignored = signals::disarm(
        signals::shutdown_kinds()
            .into_iter()
            .chain(job_control.map(SignalKind::from_raw)),
    )?;
    let mut children = signal(SignalKind::child())?;
    let mut lines = BufReader::new(lifeline).lines();
    let mut lifeline_open = true;
    // Since when the job has been ending (killed, or its command exited):
    // what will not die is reported every few seconds from then on.
    let mut ending_since: Option<Instant> = None;
    let mut last_stuck_report = Instant::now();
    let mut left = 0;

    // From here on no error may leave the job running: a report that
    // cannot be written means vvm-host is gone (or cannot hear us), which is
    // the lifeline closing.
    if reports.send(&format!("started {}", job.pid())).is_err() {
        lifeline_open = false;
        job.kill();
        ending_since = Some(Instant::now());
    }
    reports.info(&format!("containment: {}", job.mode()));
    // Until the command has ended *and* nothing of its job is left, the
    // lifeline and the deadline are watched: a job that takes its time to
    // empty is still killed the moment vvm-host goes or the deadline passes.
    loop {
        if job.status.is_some() {
            // The command has ended: nothing of its job may outlive it.
            ending_since.get_or_insert_with(Instant::now);
            left = left.max(job.sweep());
            if job.is_empty() {
                break;
            }
        }
        let check = match (job.status, deadline) {
            (Some(_), _) => SWEEP_PAUSE,
            (None, Some(_)) => DEADLINE_CHECK,
            (None, None) => Duration::from_millis(500),
        };
        tokio::select! {
            _ = children.recv() => job.reap(),
            line = lines.next_line(), if lifeline_open => match line {
                Ok(Some(line)) => match parse_request(&line) {
                    Request::Terminate => {
                        job.terminate();
                        let _ = reports.send("ack term");
                    }
                    Request::Kill => {
                        job.kill();
                        ending_since.get_or_insert_with(Instant::now);
                        let _ = reports.send("ack kill");
                    }
                    Request::Deadline(at) => deadline = at,
                    Request::Unknown => {
                        // Fail safe: a garbled line may have been a kill.
                        job.kill();
                        ending_since.get_or_insert_with(Instant::now);
                        reports.note(&format!("unknown request {line:?}: the job was SIGKILLed"));
                    }
                },
                Ok(None) | Err(_) => {
                    // vvm-host is gone, whatever ended it: end the job.
                    lifeline_open = false;
                    job.kill();
                    ending_since.get_or_insert_with(Instant::now);
                }
            },
            // Also reaps in case a SIGCHLD was coalesced with an earlier one.
            () = tokio::time::sleep(check) => {
                job.reap();
                if let (Some(at), Some(now)) = (deadline, boot_time())
                    && now >= at
                {
                    deadline = None;
                    job.kill();
                    ending_since.get_or_insert_with(Instant::now);
                    reports.note("the leadership deadline passed without word from vvm-host (stopped or stuck?): the job was SIGKILLed");
                }
                if ending_since.is_some_and(|at| at.elapsed() >= STUCK_REPORT)
                    && last_stuck_report.elapsed() >= STUCK_REPORT
                {
                    last_stuck_report = Instant::now();
                    job::report_stuck(&job.processes(), &mut reports);
                }
            }
        }
    }
    job.remove_cgroup();
    let (outcome, swept) = job.outcome();
    // vvm-host may be gone already: then nobody needs the report.
    let _ = reports.send(&format!("{outcome} swept {}", left.max(swept)));
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

#[cfg(test)]
mod tests {
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
    fn arguments_name_the_mode_and_the_command() {
        let args = ["--containment", "pidns", "--", "sleep", "1"].map(OsString::from);
        let (mode, pass_stdin, program, rest) =
            parse_args(args.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode, Mode::Pidns);
        assert!(!pass_stdin);
        assert_eq!(program, "sleep");
        assert_eq!(rest, vec![OsString::from("1")]);
        assert!(parse_args(vec![OsString::from("--")]).is_err());
        let args = ["--containment", "pidns", "--pass-stdin", "--", "cat"].map(OsString::from);
        let (_, pass_stdin, program, _) =
            parse_args(args.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert!(pass_stdin);
        assert_eq!(program, "cat");
    }
}
