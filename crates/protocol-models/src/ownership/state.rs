//! The model's state and actions.

use std::fmt;

use super::{Config, bit};

/// What a pod's fence knows of the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fence {
    /// Nothing (a fresh process, or forgotten): first sight reads Valkey.
    Unknown,
    /// The newest epoch seen, the pod a member at it (its join, a read
    /// that found it, an admitted call): newer routes admitted by memory.
    Known(u8),
    /// The newest epoch seen, read with the pod outside the set (a leave,
    /// a refused first sight, a lapse's re-read): older routes refused,
    /// the others read Valkey again.
    Read(u8),
    /// Leaving: every call refused until the leave is in Valkey.
    Leaving,
}

/// One pod process (the id stays across restarts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PodState {
    /// The process runs.
    pub up: bool,
    /// Its registration is live by its own clock.
    pub lease: bool,
    /// A heartbeat's `MULTI` is done, its renewal (and `REAFFIRM`) not yet.
    pub beat_written: bool,
    /// Its fence's memory of the destination.
    pub fence: Fence,
    /// Its removal from the set is sent, not applied yet.
    pub leaving: bool,
}

impl PodState {
    /// A process that is down (or not yet registered).
    pub(super) fn down() -> Self {
        Self {
            up: false,
            lease: false,
            beat_written: false,
            fence: Fence::Unknown,
            leaving: false,
        }
    }
}

/// A claim a coordinator read for and has not sent yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Pending {
    /// The members it read as dead.
    pub(super) dead: u8,
    /// The live members its policy rejects.
    pub(super) rejected: u8,
    /// The member it will add.
    pub(super) pick: u8,
}

/// One coordinator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CoordinatorState {
    /// Its cached route: a pod set and the epoch it was read at.
    pub cache: Option<(u8, u8)>,
    pub(super) pending: Option<Pending>,
    /// A `DELETE` it routed that the pod answered (the pod has left): the
    /// pod and the epoch it was routed at, for the `UNBIND` still to run.
    pub unbinding: Option<(u8, u8)>,
}

/// How many of each bounded fault are left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Budget {
    /// The kinds of fault spent (a mask of [`Fault`]s).
    used: u8,
    /// How many may be spent.
    limit: u8,
    /// Lease ends left.
    pub(super) lapses: u8,
}

/// The kinds of bounded fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    Crash = 1,
    Deregister = 2,
    Forget = 4,
    Leave = 8,
    FanOut = 16,
    CoordinatorRestart = 32,
    Delete = 64,
}

/// Another live pod answers at a crashed pod's old address (a process
/// restarted under a new id at the same port): routes cached for the
/// crashed pod reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reused {
    /// The crashed pod whose address was taken.
    pub from: u8,
    /// The pod now answering there.
    pub by: u8,
}

impl Budget {
    /// Whether `fault` may happen: not yet spent, and the limit not reached.
    pub(super) fn allows(&self, fault: Fault) -> bool {
        self.used & fault as u8 == 0 && self.used.count_ones() < u32::from(self.limit)
    }

    pub(super) fn spend(&mut self, fault: Fault) {
        self.used |= fault as u8;
    }
}

/// Valkey, the pods and the coordinators.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The destination's pod set (a mask of pods).
    pub set: u8,
    /// The destination's epoch.
    pub epoch: u8,
    /// The pods whose member record exists.
    pub records: u8,
    /// The set right after the fan-out (at most one per run): the only
    /// assignment with more than one member (a claim adds to an empty set).
    pub fanned: u8,
    /// The pods.
    pub pods: Vec<PodState>,
    /// A crashed pod's address answered by another pod (at most one).
    pub reused: Option<Reused>,
    /// The coordinators.
    pub coordinators: [CoordinatorState; 2],
    pub(super) budget: Budget,
}

impl State {
    /// Every pod up and registered, the destination never touched.
    pub(super) fn new(config: Config) -> Self {
        let up = PodState {
            up: true,
            lease: true,
            ..PodState::down()
        };
        Self {
            set: 0,
            epoch: 0,
            records: (1u8 << config.pods) - 1,
            fanned: 0,
            pods: vec![up; usize::from(config.pods)],
            reused: None,
            coordinators: [CoordinatorState::default(); 2],
            budget: Budget {
                used: 0,
                limit: config.faults,
                lapses: config.lapses,
            },
        }
    }

    pub(super) fn pod_mut(&mut self, p: u8) -> &mut PodState {
        &mut self.pods[usize::from(p)]
    }

    pub(super) fn coordinator_mut(&mut self, c: u8) -> &mut CoordinatorState {
        &mut self.coordinators[usize::from(c)]
    }

    /// The set changed: the epoch grows (`None`: past the bound explored).
    pub(super) fn bump(&mut self, max: u8) -> Option<()> {
        if self.epoch >= max {
            return None;
        }
        self.epoch += 1;
        Some(())
    }
}

/// One step.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The heartbeat's `MULTI`: the record is (re-)created.
    Beat(u8),
    /// The heartbeat's end: `REAFFIRM` after a lapse, the lease renewed.
    Renew(u8),
    /// The pod's own clock ends its lease.
    LeaseEnds(u8),
    /// Valkey expires the pod's record.
    RecordExpires(u8),
    /// The process dies.
    Crash(u8),
    /// The process dies and pod `by` takes its address.
    CrashReused {
        /// The pod that dies.
        from: u8,
        /// The pod that then answers at its address too.
        by: u8,
    },
    /// The process starts again under the same id.
    Restart(u8),
    /// `Member::deregister`.
    Deregister(u8),
    /// The fence map forgets the destination.
    Forget(u8),
    /// The pod starts leaving the destination.
    LeaveStart(u8),
    /// Its removal is applied in Valkey and its reply read.
    LeaveApply(u8),
    /// `from` adds `to` to the set.
    FanOut {
        /// The member that fans out.
        from: u8,
        /// The peer added.
        to: u8,
    },
    /// Coordinator `c` reads the set; `pick`: the member its claim adds.
    Resolve {
        /// The coordinator.
        c: u8,
        /// The pick of the claim that follows, if any.
        pick: Option<u8>,
    },
    /// Coordinator `c`'s claim is applied.
    Claim(u8),
    /// Coordinator `c`'s cache entry expires.
    CacheExpires(u8),
    /// A call of coordinator `c` reaches pod `p`.
    Deliver {
        /// The coordinator.
        c: u8,
        /// The pod.
        p: u8,
    },
    /// A call coordinator `c` routes to the crashed pod `p` reaches the
    /// pod now at `p`'s old address.
    Misdeliver {
        /// The coordinator.
        c: u8,
        /// The pod the route names.
        p: u8,
    },
    /// Coordinator `c` is killed and restarted.
    CoordinatorRestart(u8),
    /// Coordinator `c` routes a `DELETE` (lookup and deregister) to pod
    /// `p` from its cache; the pod admits it and leaves before answering.
    DeleteRouted {
        /// The coordinator.
        c: u8,
        /// The pod.
        p: u8,
    },
    /// Coordinator `c`'s `UNBIND` after the pod's answer is applied.
    Unbind(u8),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::Beat(p) => write!(f, "p{p} heartbeat: MULTI re-creates its record"),
            Action::Renew(p) => write!(
                f,
                "p{p} heartbeat ends: REAFFIRM if it lapsed, lease renewed"
            ),
            Action::LeaseEnds(p) => write!(f, "p{p} lease ends (its own clock)"),
            Action::RecordExpires(p) => write!(f, "p{p} record expires in Valkey"),
            Action::Crash(p) => write!(f, "p{p} crashes"),
            Action::CrashReused { from, by } => {
                write!(f, "p{from} crashes; p{by} now answers at its address")
            }
            Action::Restart(p) => write!(f, "p{p} restarts under the same id"),
            Action::Deregister(p) => write!(f, "p{p} deregisters"),
            Action::Forget(p) => write!(f, "p{p} fence forgets the destination"),
            Action::LeaveStart(p) => write!(f, "p{p} starts leaving the destination"),
            Action::LeaveApply(p) => write!(f, "p{p} leave applied in Valkey (SREM, epoch bumped)"),
            Action::FanOut { from, to } => write!(f, "p{from} fans out to p{to}"),
            Action::Resolve { c, pick: None } => write!(f, "c{c} RESOLVE (cache miss)"),
            Action::Resolve { c, pick: Some(p) } => {
                write!(
                    f,
                    "c{c} RESOLVE reads no usable member; will CLAIM for p{p}"
                )
            }
            Action::Claim(c) => write!(f, "c{c} CLAIM applied"),
            Action::CacheExpires(c) => write!(f, "c{c} cache entry expires"),
            Action::Deliver { c, p } => write!(f, "c{c} routes a call to p{p} from its cache"),
            Action::Misdeliver { c, p } => write!(
                f,
                "c{c} routes a call to p{p} from its cache; it reaches the pod at p{p}'s old address"
            ),
            Action::CoordinatorRestart(c) => write!(f, "c{c} killed and restarted"),
            Action::DeleteRouted { c, p } => write!(
                f,
                "c{c} routes a DELETE to p{p} from its cache; p{p} leaves (SREM, epoch bumped) and answers"
            ),
            Action::Unbind(c) => write!(f, "c{c} UNBIND applied"),
        }
    }
}

/// A compact picture of a state (for traces): the set, the epoch, the
/// records, each pod and each coordinator's cache.
impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pods = |mask: u8| -> String {
            let names: Vec<String> = (0..8u8)
                .filter(|&p| mask & bit(p) != 0)
                .map(|p| format!("p{p}"))
                .collect();
            format!("{{{}}}", names.join(","))
        };
        write!(
            f,
            "set {}@{} records {}",
            pods(self.set),
            self.epoch,
            pods(self.records)
        )?;
        for (i, p) in self.pods.iter().enumerate() {
            let fence = match p.fence {
                Fence::Unknown => "?".to_owned(),
                Fence::Known(e) => e.to_string(),
                Fence::Read(e) => format!("{e} (not a member)"),
                Fence::Leaving => "leaving".to_owned(),
            };
            let lease = match (p.up, p.lease) {
                (false, _) => "down",
                (true, true) => "lease",
                (true, false) => "no lease",
            };
            write!(f, "; p{i} {lease}, fence {fence}")?;
        }
        for (i, c) in self.coordinators.iter().enumerate() {
            match c.cache {
                Some((set, epoch)) => write!(f, "; c{i} cache {}@{epoch}", pods(set))?,
                None => write!(f, "; c{i} cache -")?,
            }
        }
        Ok(())
    }
}
