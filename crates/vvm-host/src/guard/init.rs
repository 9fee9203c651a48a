//! The init of the PID-namespace modes: PID 1 of the job's namespace.
//!
//! It joins the job's cgroup first (in the cgroup mode), before anything of
//! the job exists, then starts the command, reaps every process of the
//! namespace, passes `term` (from the guard, on its standard input) on to
//! all of them (`kill(-1, SIGTERM)` inside a namespace reaches every process
//! in it but init, whatever cgroup it moved to), and when the command has
//! exited, SIGKILLs the rest, reaps them and reports the command's status.
//!
//! It dies — and the kernel then SIGKILLs every process of the namespace,
//! and reaps the init only once they are all gone — when the guard dies
//! (the parent-death signal), when the guard's socket closes, or when
//! vvm-host's end of the lifeline closes: the guard hands the init its own
//! end of the lifeline ([`send_lifeline`]), which the init only watches for
//! the hang-up, never reads. So the job dies with vvm-host even while the
//! guard is stopped, and with the guard even while vvm-host is.

use std::{
    ffi::OsString,
    io::{self, Write},
    os::{
        fd::{AsFd, OwnedFd},
        unix::{net::UnixStream as StdUnixStream, process::CommandExt},
    },
    path::PathBuf,
    process::{Command, ExitCode, Stdio},
    time::Duration,
};

use nix::{
    errno::Errno,
    sys::{
        signal::{Signal, kill},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    net::UnixStream,
    signal::unix::{SignalKind, signal},
};

use crate::{containment::JobCgroup, signals};

/// The first argument that makes `vvm-host` act as the namespace's init.
pub(crate) const INIT_ARG: &str = "__vvm-host-init";

/// The line that carries the lifeline to the init.
const LIFELINE: &[u8] = b"lifeline\n";

/// The init's exit status when it could not start the command contained
/// (its report says the same: `exited code 125`).
const NOT_CONTAINED: u8 = 125;

/// Sends `lifeline` (the guard's end of its socket to vvm-host) to the init
/// on `socket`, as the first line, and with it the command's standard input
/// when vvm-host passes its own (`--pass-stdin`). The init holds the
/// lifeline to see vvm-host go.
pub(crate) fn send_lifeline(
    socket: &StdUnixStream,
    lifeline: &impl AsFd,
    stdin: Option<&OwnedFd>,
) -> io::Result<()> {
    let mut fds = vec![lifeline.as_fd()];
    fds.extend(stdin.map(AsFd::as_fd));
    super::fds::send(socket, LIFELINE, &fds)
}

/// Receives the lifeline the guard sends first (blocking), and the
/// command's standard input if one came with it, close-on-exec so the
/// command never holds the lifeline. `None` if the guard sent none.
fn receive_lifeline(socket: &StdUnixStream) -> io::Result<(Option<OwnedFd>, Option<OwnedFd>)> {
    let mut fds = super::fds::receive(socket, LIFELINE)?.into_iter();
    Ok((fds.next(), fds.next()))
}

/// `args`: `[--cgroup PATH] -- COMMAND...`.
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    // Dies with the guard (the parent), which then kills the namespace.
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
        return ExitCode::from(NOT_CONTAINED);
    }
    let _ = nix::sys::prctl::set_name(c"vvm-host-init");
    let mut args = args.into_iter().peekable();
    let mut cgroup = None;
    if args.peek().is_some_and(|arg| arg == "--cgroup") {
        args.next();
        cgroup = args.next().map(PathBuf::from).map(JobCgroup::at);
    }
    let mut command = args.skip_while(|arg| arg != "--").skip(1);
    let Some(program) = command.next() else {
        return ExitCode::from(NOT_CONTAINED);
    };
    let Ok(socket) = io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(StdUnixStream::from)
    else {
        return ExitCode::from(NOT_CONTAINED);
    };
    // Into the job's cgroup before anything of the job exists: whatever the
    // command starts is inside from its first instruction.
    if let Some(cgroup) = &cgroup
        && let Err(err) = cgroup.join()
    {
        eprintln!(
            "vvm-host: cannot join the job's cgroup {}: {err}",
            cgroup.path().display()
        );
        let _ = writeln!(&socket, "exited code {NOT_CONTAINED} swept 0");
        return ExitCode::from(NOT_CONTAINED);
    }
    let (lifeline, stdin) = match receive_lifeline(&socket) {
        Ok(received) => received,
        Err(_) => return ExitCode::from(NOT_CONTAINED),
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(NOT_CONTAINED);
    };
    match runtime.block_on(init(socket, lifeline, stdin, program, command.collect())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(NOT_CONTAINED),
    }
}

/// Resolves once the peer of `fd` (vvm-host, for the lifeline) has hung up;
/// never for `None`. A thread waits for the hang-up alone (`poll` for
/// `POLLRDHUP`), never reading: the guard reads the same socket.
fn hung_up(fd: Option<OwnedFd>) -> impl Future<Output = ()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if let Some(fd) = fd {
        std::thread::spawn(move || {
            use rustix::event::{PollFd, PollFlags, poll};
            loop {
                let mut fds = [PollFd::new(&fd, PollFlags::RDHUP)];
                match poll(&mut fds, None) {
                    Ok(_) if !fds[0].revents().is_empty() => break,
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
    } else {
        std::mem::forget(tx);
    }
    async move {
        let _ = rx.await;
    }
}

async fn init(
    socket: StdUnixStream,
    lifeline: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    program: OsString,
    args: Vec<OsString>,
) -> io::Result<()> {
    let mut reports = socket.try_clone()?;
    socket.set_nonblocking(true)?;
    let mut lines = BufReader::new(UnixStream::from_std(socket)?).lines();
    let vvm_host_gone = hung_up(lifeline);
    tokio::pin!(vvm_host_gone);
    let mut children = signal(SignalKind::child())?;
    // Signals meant for vvm-host must not end the job's init: listening to
    // them replaces their default action; they are never read.
    let _ignored = signals::disarm(signals::shutdown_kinds())?;

    let command = Command::new(&program)
        .args(&args)
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .process_group(0)
        .spawn();
    let command = match command {
        Ok(child) => Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?),
        Err(err) => {
            let code = if err.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let _ = writeln!(reports, "exited code {code} swept 0");
            return Ok(());
        }
    };
    let mut status = None;
    while status.is_none() {
        tokio::select! {
            _ = children.recv() => status = status.or(reap(command)),
            line = lines.next_line() => match line {
                Ok(Some(line)) if line == "term" => {
                    let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
                }
                Ok(Some(_)) => {
                    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
                }
                // The guard is gone: so is everything here.
                Ok(None) | Err(_) => return Ok(()),
            },
            // vvm-host is gone, whatever the guard is doing (stopped?).
            () = &mut vvm_host_gone => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(500)) => status = status.or(reap(command)),
        }
    }
    // The command has ended: nothing of its job may outlive it. Every
    // process reaped from here on is one it left behind.
    let mut swept = 0;
    loop {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Err(Errno::ECHILD) => break,
            Ok(WaitStatus::StillAlive) => tokio::time::sleep(Duration::from_millis(2)).await,
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => swept += 1,
            _ => {}
        }
    }
    let report = match status {
        Some(WaitStatus::Signaled(_, signal, _)) => format!("exited signal {}", signal as i32),
        Some(WaitStatus::Exited(_, code)) => format!("exited code {code}"),
        _ => "exited code 1".to_owned(),
    };
    let _ = writeln!(reports, "{report} swept {swept}");
    Ok(())
}

/// Reaps every ended child; the command's status once it has ended.
fn reap(command: Pid) -> Option<WaitStatus> {
    let mut found = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return found,
            Ok(status) => {
                if status.pid() == Some(command)
                    && matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                {
                    found = Some(status);
                }
            }
        }
    }
}
