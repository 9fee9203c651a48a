//! The PID-namespace mode: enter a new PID namespace (inside a new user
//! namespace when not root), so the next child is its PID 1; when that
//! init dies the kernel kills every process of the namespace.

use std::{fs, process::Command};

use nix::{sched::CloneFlags, unistd::Uid};

/// The argument that makes `vvm-host` only try [`enter`] and exit.
pub(crate) const PROBE_ARG: &str = "__vvm-host-probe-pidns";

/// Enters the new namespaces: called by a single-threaded process (the
/// guard, before its runtime starts), and only once. Its *next child* is
/// PID 1 of the new PID namespace.
pub(crate) fn enter() -> Result<&'static str, String> {
    let uid = Uid::effective();
    if uid.is_root() {
        nix::sched::unshare(CloneFlags::CLONE_NEWPID)
            .map_err(|err| format!("unshare(CLONE_NEWPID): {err}"))?;
        return Ok("a new PID namespace (as root)");
    }
    let gid = nix::unistd::Gid::effective();
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|err| format!("unshare(CLONE_NEWUSER): {err}"))?;
    // The same ids inside as outside: the command keeps its identity.
    fs::write("/proc/self/setgroups", "deny").map_err(|err| format!("setgroups: {err}"))?;
    fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(|err| format!("uid_map: {err}"))?;
    fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(|err| format!("gid_map: {err}"))?;
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|err| format!("unshare(CLONE_NEWPID) in a user namespace: {err}"))?;
    Ok("a new PID namespace inside a new user namespace")
}

/// Whether [`enter`] works here, tried in a throwaway child process.
pub(crate) fn probe() -> Result<String, String> {
    let output = Command::new("/proc/self/exe")
        .arg(PROBE_ARG)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|err| format!("cannot run the probe: {err}"))?;
    let said = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if output.status.success() {
        Ok(said)
    } else {
        Err(said)
    }
}

/// The probe's process: prints what [`enter`] said, exits 0 on success.
pub(crate) fn probe_main() -> std::process::ExitCode {
    match enter() {
        Ok(how) => {
            println!("{how}");
            std::process::ExitCode::SUCCESS
        }
        Err(why) => {
            println!("{why}");
            std::process::ExitCode::FAILURE
        }
    }
}
