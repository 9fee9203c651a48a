//! The init of the PID-namespace mode: PID 1 of the job's namespace.
//!
//! It starts the command, reaps every process of the namespace, passes
//! `term` (from the guard, on its standard input) on to all of them
//! (`kill(-1, SIGTERM)` inside a namespace reaches every process in it but
//! init), and when the command has exited, SIGKILLs the rest, reaps them
//! and reports the command's status. When it dies, whatever ended it (the
//! guard's SIGKILL, the guard's death through the parent-death signal, the
//! guard's socket closing), the kernel SIGKILLs every process of the
//! namespace, and init is reaped only once they are all gone.

use std::{
    ffi::OsString,
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

use crate::signals;

/// The first argument that makes `vvm-host` act as the namespace's init.
pub(crate) const INIT_ARG: &str = "__vvm-host-init";

/// `args`: `--`, the command.
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    // Dies with the guard (the parent), which then kills the namespace.
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
        return ExitCode::from(125);
    }
    let _ = nix::sys::prctl::set_name(c"vvm-host-init");
    let mut args = args.into_iter().skip_while(|arg| arg != "--").skip(1);
    let Some(program) = args.next() else {
        return ExitCode::from(125);
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(125);
    };
    match runtime.block_on(init(program, args.collect())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(125),
    }
}

async fn init(program: OsString, args: Vec<OsString>) -> io::Result<()> {
    let socket = StdUnixStream::from(io::stdin().as_fd().try_clone_to_owned()?);
    let mut reports = socket.try_clone()?;
    socket.set_nonblocking(true)?;
    let mut lines = BufReader::new(UnixStream::from_std(socket)?).lines();
    let mut children = signal(SignalKind::child())?;
    // Signals meant for vvm-host must not end the job's init: listening to
    // them replaces their default action; they are never read.
    let _ignored = signals::disarm(signals::shutdown_kinds())?;

    let command = Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
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
            let _ = writeln!(reports, "exited code {code}");
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
            () = tokio::time::sleep(Duration::from_millis(500)) => status = status.or(reap(command)),
        }
    }
    // The command has ended: nothing of its job may outlive it.
    loop {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Err(Errno::ECHILD) => break,
            Ok(WaitStatus::StillAlive) => tokio::time::sleep(Duration::from_millis(2)).await,
            _ => {}
        }
    }
    let report = match status {
        Some(WaitStatus::Signaled(_, signal, _)) => format!("exited signal {}", signal as i32),
        Some(WaitStatus::Exited(_, code)) => format!("exited code {code}"),
        _ => "exited code 1".to_owned(),
    };
    let _ = writeln!(reports, "{report}");
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
