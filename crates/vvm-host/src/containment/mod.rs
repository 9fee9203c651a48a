//! Containment: how the guard keeps every process of the job within reach,
//! so that ending the job ends all of it, and how the job ends with
//! vvm-host and its guard even when both die at once.
//!
//! Four modes, best first (`--containment auto` picks the first that
//! works here; the start log says which one and why, and, at WARN, what it
//! leaves out of reach):
//!
//! - [`Mode::Cgroup`] with a PID namespace: the job runs in a cgroup v2 of
//!   its own (a child of vvm-host's cgroup) *and* in a PID namespace of its
//!   own, whose init ([`crate::guard::init`]) joins the cgroup before it
//!   starts the command. `cgroup.kill` ends the job's cgroup and every
//!   cgroup below it; the namespace holds every process wherever it moves
//!   in the cgroup tree (to an ancestor as root or as the owner of a
//!   delegated parent, to a child it makes): no process can leave a PID
//!   namespace. When the init dies, for any reason, the kernel SIGKILLs
//!   every process of the namespace, and the init is reaped only once they
//!   are all gone. The init dies with the guard (parent-death signal) and
//!   with vvm-host (it watches vvm-host's end of the lifeline itself), so
//!   the job dies with either, whatever the other is doing.
//! - [`Mode::Pidns`]: the same namespace and init, no cgroup (none is
//!   writable here): the same promises.
//! - [`Mode::Cgroup`] without a PID namespace (none can be made here): the
//!   cgroup alone. A process that moves itself out of the job's cgroup, or
//!   a job whose vvm-host and guard die together, is out of reach.
//! - [`Mode::Subreaper`]: the guard is a child subreaper and signals the
//!   command's process group, the command by pid while it is unreaped, and
//!   every descendant it finds in `/proc` through a pidfd opened and
//!   checked first. A descendant whose parent is stuck in uninterruptible
//!   sleep, a process that joined another process group, and the whole job
//!   once the guard dies, are out of reach: the last resort.
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
    /// The best mode available here: cgroup with a PID namespace, else
    /// pidns, else cgroup alone, else subreaper (the last two with a
    /// warning saying what they leave out of reach).
    #[default]
    Auto,
    /// A cgroup v2 of the job's own (fails if none can be created), with a
    /// PID namespace when one can be made (else a warning).
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
    /// The job's own cgroup v2 directory; `pidns`: the job also runs in a
    /// PID namespace of its own, whose init joins the cgroup first.
    Cgroup { path: PathBuf, pidns: bool },
    /// A new PID namespace (and a user namespace when not root).
    Pidns,
    /// The child-subreaper fallback.
    Subreaper,
}

impl Mode {
    /// The mode's name, as the start log and the guard's notes say it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Mode::Cgroup { pidns: true, .. } => "cgroup+pidns",
            Mode::Cgroup { pidns: false, .. } => "cgroup",
            Mode::Pidns => "pidns",
            Mode::Subreaper => "subreaper",
        }
    }

    /// True when the job runs in a PID namespace of its own.
    pub(crate) fn pidns(&self) -> bool {
        matches!(self, Mode::Pidns | Mode::Cgroup { pidns: true, .. })
    }

    /// The job's cgroup, if it has one.
    pub(crate) fn cgroup(&self) -> Option<&std::path::Path> {
        match self {
            Mode::Cgroup { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The guard's argument for this mode.
    pub(crate) fn to_arg(&self) -> std::ffi::OsString {
        match self {
            Mode::Cgroup { path, pidns } => {
                let mut arg =
                    std::ffi::OsString::from(if *pidns { "cgroup+pidns:" } else { "cgroup:" });
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
        let cgroup = |rest: Option<&str>, pidns| match rest {
            Some(path) if path.starts_with('/') => Ok(Mode::Cgroup {
                path: PathBuf::from(path),
                pidns,
            }),
            _ => Err(format!("unknown containment mode {text:?}")),
        };
        match text {
            "pidns" => Ok(Mode::Pidns),
            "subreaper" => Ok(Mode::Subreaper),
            _ if text.starts_with("cgroup+pidns:") => {
                cgroup(text.strip_prefix("cgroup+pidns:"), true)
            }
            _ => cgroup(text.strip_prefix("cgroup:"), false),
        }
    }
}

/// Where jobs get their cgroups, and the mode chosen for this vvm-host.
#[derive(Debug)]
pub(crate) struct Plan {
    kind: PlanKind,
    /// Why this mode (for the start log).
    pub(crate) reason: String,
    /// What this mode cannot promise here (logged at WARN), if anything.
    pub(crate) out_of_reach: Option<String>,
}

#[derive(Debug)]
enum PlanKind {
    Cgroup { parent: cgroup::Parent, pidns: bool },
    Pidns,
    Subreaper,
}

/// What the cgroup mode without a PID namespace leaves out of reach.
const CGROUP_ALONE: &str = "no PID namespace holds the job: a process that moves itself out of the job's cgroup (root, or the owner of a delegated parent cgroup) escapes, and the job outlives vvm-host and its guard if both die at once (`pkill -9 vvm-host`)";
/// What the subreaper mode leaves out of reach.
const SUBREAPER: &str = "neither a cgroup nor a PID namespace holds the job: a process that leaves the command's process group while its parent is stuck escapes, and the job outlives its guard if the guard dies or stays stopped while vvm-host dies (`pkill -9 vvm-host`)";

impl Plan {
    /// Chooses the mode for `requested`, probing what this host allows.
    /// A mode asked for explicitly that is not available is an error.
    pub(crate) fn choose(requested: Requested) -> Result<Plan, String> {
        let cgroup = || cgroup::Parent::find();
        let pidns = || pidns::probe();
        let with_cgroup = |parent: cgroup::Parent, asked: bool| {
            let at = parent.path().display().to_string();
            let (pidns, why, out_of_reach) = match pidns() {
                Ok(how) => (true, how, None),
                Err(no_pidns) => (
                    false,
                    format!("no PID namespace ({no_pidns})"),
                    Some(CGROUP_ALONE.to_owned()),
                ),
            };
            Plan {
                reason: if asked {
                    format!("asked for; jobs go under {at}; {why}")
                } else {
                    format!("cgroup v2 writable at {at}; {why}")
                },
                out_of_reach,
                kind: PlanKind::Cgroup { parent, pidns },
            }
        };
        match requested {
            Requested::Cgroup => cgroup()
                .map(|parent| with_cgroup(parent, true))
                .map_err(|why| format!("--containment cgroup: {why}")),
            Requested::Pidns => pidns()
                .map(|how| Plan {
                    reason: format!("asked for ({how})"),
                    out_of_reach: None,
                    kind: PlanKind::Pidns,
                })
                .map_err(|why| format!("--containment pidns: {why}")),
            Requested::Subreaper => Ok(Plan {
                reason: "asked for".to_owned(),
                out_of_reach: Some(SUBREAPER.to_owned()),
                kind: PlanKind::Subreaper,
            }),
            Requested::Auto => match cgroup() {
                Ok(parent) => Ok(with_cgroup(parent, false)),
                Err(no_cgroup) => match pidns() {
                    Ok(how) => Ok(Plan {
                        reason: format!("no writable cgroup v2 ({no_cgroup}); {how}"),
                        out_of_reach: None,
                        kind: PlanKind::Pidns,
                    }),
                    Err(no_pidns) => Ok(Plan {
                        reason: format!(
                            "no writable cgroup v2 ({no_cgroup}) and no PID namespace ({no_pidns})"
                        ),
                        out_of_reach: Some(SUBREAPER.to_owned()),
                        kind: PlanKind::Subreaper,
                    }),
                },
            },
        }
    }

    /// The mode's name.
    pub(crate) fn name(&self) -> &'static str {
        match self.kind {
            PlanKind::Cgroup { pidns: true, .. } => "cgroup+pidns",
            PlanKind::Cgroup { pidns: false, .. } => "cgroup",
            PlanKind::Pidns => "pidns",
            PlanKind::Subreaper => "subreaper",
        }
    }

    /// Prepares the containment of one job: in the cgroup modes, its cgroup.
    pub(crate) fn prepare(&self) -> std::io::Result<(Mode, Option<JobCgroup>)> {
        match &self.kind {
            PlanKind::Cgroup { parent, pidns } => {
                let cgroup = parent.create_job()?;
                let mode = Mode::Cgroup {
                    path: cgroup.path().to_owned(),
                    pidns: *pidns,
                };
                Ok((mode, Some(cgroup)))
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
            Mode::Cgroup {
                path: PathBuf::from("/sys/fs/cgroup/x/vvm-host-job-1"),
                pidns: true,
            },
            Mode::Cgroup {
                path: PathBuf::from("/sys/fs/cgroup/x/vvm-host-job-2"),
                pidns: false,
            },
            Mode::Pidns,
            Mode::Subreaper,
        ] {
            let arg = mode.to_arg();
            assert_eq!(arg.to_str().and_then(|s| s.parse().ok()), Some(mode));
        }
        assert!("cgroup:relative".parse::<Mode>().is_err());
        assert!("cgroup+pidns:relative".parse::<Mode>().is_err());
        assert!("other".parse::<Mode>().is_err());
    }
}
