//! The trampoline of the cgroup mode without a PID namespace: the guard's
//! child joins the job's cgroup, then `exec`s the command in place (same
//! pid). Nothing of the command runs before it is in the cgroup, so nothing
//! it starts is outside; a kill before the join reaches the trampoline
//! itself (the guard SIGKILLs its child first, then the cgroup). With a
//! PID namespace the namespace's init joins the cgroup instead
//! ([`crate::guard::init`]).

use std::{ffi::OsString, os::unix::process::CommandExt, path::PathBuf, process::ExitCode};

use crate::containment::JobCgroup;

/// The first argument that makes `vvm-host` act as the trampoline.
pub(crate) const EXEC_ARG: &str = "__vvm-host-exec";

/// `args`: the job cgroup's path, `--`, the command.
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let Some(cgroup) = args.next() else {
        return ExitCode::from(125);
    };
    let mut command = args.skip_while(|arg| arg != "--").skip(1);
    let Some(program) = command.next() else {
        return ExitCode::from(125);
    };
    let cgroup = JobCgroup::at(PathBuf::from(cgroup));
    if let Err(err) = cgroup.join() {
        // The guard sees the exit status; never run the command uncontained.
        eprintln!(
            "vvm-host: cannot join the job's cgroup {}: {err}",
            cgroup.path().display()
        );
        return ExitCode::from(125);
    }
    let err = std::process::Command::new(&program).args(command).exec();
    eprintln!("vvm-host: {}: {err}", program.to_string_lossy());
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}
