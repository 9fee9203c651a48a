//! Containment: how the guard keeps every process of the job within reach,
//! so that ending the job ends all of it.
//!
//! Three modes, best first (`--containment auto` picks the first that
//! works here, and the start log says which one and why):
//!
//! - [`Mode::Cgroup`]: the command runs in a cgroup v2 of its own, a child
//!   of vvm-host's cgroup. Ending the job is one write to `cgroup.kill`;
//!   the job is empty when `cgroup.events` says `populated 0`. Nothing the
//!   command starts can leave a cgroup without privileges it does not have
//!   (`setsid`, double forks, a changed process group, a parent stuck in
//!   uninterruptible sleep: all still inside). vvm-host itself can kill the
//!   job this way, without the guard.
//! - [`Mode::Pidns`]: the guard starts an init process that is PID 1 of a
//!   new PID namespace (inside a new user namespace when vvm-host is not
//!   root); the command runs under it. When that init dies, for any reason,
//!   the kernel SIGKILLs every process of the namespace, and the init is
//!   reaped only once they are all gone.
//! - [`Mode::Subreaper`]: the guard is a child subreaper and signals the
//!   command's process group, the command by pid while it is unreaped, and
//!   every descendant it finds in `/proc` through a pidfd opened and
//!   checked first. A descendant whose parent is stuck in uninterruptible
//!   sleep, or a process that joined another process group, can escape the
//!   signals until its parent dies: the last resort.
//!
//! What no mode reaches: work handed to another service manager
//! (`systemd-run`, `at`, a tmux server that already existed, `docker run`).
//! Run such units with `KillMode=control-group` and their own lock.

pub(crate) mod cgroup;
pub(crate) mod pidfd;
pub(crate) mod pidns;
pub(crate) mod tree;

use std::{fmt, path::PathBuf, str::FromStr};

pub(crate) use cgroup::JobCgroup;

/// The containment mode asked for on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Requested {
    /// The best mode available here: cgroup, else pidns, else subreaper.
    #[default]
    Auto,
    /// A cgroup v2 of the job's own (fails if none can be created).
    Cgroup,
    /// A PID namespace whose init is the job's anchor.
    Pidns,
    /// A child subreaper that walks the process tree (the weakest).
    Subreaper,
}

impl fmt::Display for Requested {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Requested::Auto => "auto",
            Requested::Cgroup => "cgroup",
            Requested::Pidns => "pidns",
            Requested::Subreaper => "subreaper",
        })
    }
}

/// The mode in force for a job, as the guard is told on its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The job's own cgroup v2 directory.
    Cgroup(PathBuf),
    /// A new PID namespace (and a user namespace when not root).
    Pidns,
    /// The child-subreaper fallback.
    Subreaper,
}

impl Mode {
    /// The mode's name, as `--containment` spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Mode::Cgroup(_) => "cgroup",
            Mode::Pidns => "pidns",
            Mode::Subreaper => "subreaper",
        }
    }

    /// The guard's argument for this mode.
    pub(crate) fn to_arg(&self) -> std::ffi::OsString {
        match self {
            Mode::Cgroup(path) => {
                let mut arg = std::ffi::OsString::from("cgroup:");
                arg.push(path);
                arg
            }
            Mode::Pidns => "pidns".into(),
            Mode::Subreaper => "subreaper".into(),
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "pidns" => Ok(Mode::Pidns),
            "subreaper" => Ok(Mode::Subreaper),
            _ => match text.strip_prefix("cgroup:") {
                Some(path) if path.starts_with('/') => Ok(Mode::Cgroup(PathBuf::from(path))),
                _ => Err(format!("unknown containment mode {text:?}")),
            },
        }
    }
}

/// Where jobs get their cgroups, and the mode chosen for this vvm-host.
#[derive(Debug)]
pub(crate) struct Plan {
    kind: PlanKind,
    /// Why this mode (for the start log).
    pub(crate) reason: String,
}

#[derive(Debug)]
enum PlanKind {
    Cgroup(cgroup::Parent),
    Pidns,
    Subreaper,
}

impl Plan {
    /// Chooses the mode for `requested`, probing what this host allows.
    /// A mode asked for explicitly that is not available is an error.
    pub(crate) fn choose(requested: Requested) -> Result<Plan, String> {
        let cgroup = || cgroup::Parent::find();
        let pidns = || pidns::probe();
        match requested {
            Requested::Cgroup => cgroup()
                .map(|parent| Plan {
                    reason: format!("asked for; jobs go under {}", parent.path().display()),
                    kind: PlanKind::Cgroup(parent),
                })
                .map_err(|why| format!("--containment cgroup: {why}")),
            Requested::Pidns => pidns()
                .map(|how| Plan {
                    reason: format!("asked for ({how})"),
                    kind: PlanKind::Pidns,
                })
                .map_err(|why| format!("--containment pidns: {why}")),
            Requested::Subreaper => Ok(Plan {
                reason: "asked for".to_owned(),
                kind: PlanKind::Subreaper,
            }),
            Requested::Auto => match cgroup() {
                Ok(parent) => Ok(Plan {
                    reason: format!("cgroup v2 writable at {}", parent.path().display()),
                    kind: PlanKind::Cgroup(parent),
                }),
                Err(no_cgroup) => match pidns() {
                    Ok(how) => Ok(Plan {
                        reason: format!("no writable cgroup v2 ({no_cgroup}); {how}"),
                        kind: PlanKind::Pidns,
                    }),
                    Err(no_pidns) => Ok(Plan {
                        reason: format!(
                            "no writable cgroup v2 ({no_cgroup}) and no PID namespace ({no_pidns}): processes that leave the command's process group while their parent is stuck can escape"
                        ),
                        kind: PlanKind::Subreaper,
                    }),
                },
            },
        }
    }

    /// The mode's name.
    pub(crate) fn name(&self) -> &'static str {
        match self.kind {
            PlanKind::Cgroup(_) => "cgroup",
            PlanKind::Pidns => "pidns",
            PlanKind::Subreaper => "subreaper",
        }
    }

    /// Prepares the containment of one job: in cgroup mode, its cgroup.
    pub(crate) fn prepare(&self) -> std::io::Result<(Mode, Option<JobCgroup>)> {
        match &self.kind {
            PlanKind::Cgroup(parent) => {
                let cgroup = parent.create_job()?;
                Ok((Mode::Cgroup(cgroup.path().to_owned()), Some(cgroup)))
            }
            PlanKind::Pidns => Ok((Mode::Pidns, None)),
            PlanKind::Subreaper => Ok((Mode::Subreaper, None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_the_guard_argument() {
        for mode in [
            Mode::Cgroup(PathBuf::from("/sys/fs/cgroup/x/vvm-host-job-1")),
            Mode::Pidns,
            Mode::Subreaper,
        ] {
            let arg = mode.to_arg();
            assert_eq!(arg.to_str().and_then(|s| s.parse().ok()), Some(mode));
        }
        assert!("cgroup:relative".parse::<Mode>().is_err());
        assert!("other".parse::<Mode>().is_err());
    }
}
