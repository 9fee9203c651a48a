//! The coordinator's destination ownership (crate `coordinator`), as a
//! [`stateright`] model of one destination.
//!
//! **Actors.** [`Config::pods`] pods (`p0`, `p1`, ...) and two coordinators
//! (`c0`, `c1`). `c0` forwards to every pod; `c1`'s address policy rejects
//! `p0` (two address policies). Valkey holds the destination's pod set and
//! epoch, and each pod's member record (its TTL expiry is an action).
//!
//! **What each step is, in the code.**
//!
//! | action | code |
//! |---|---|
//! | `Beat` / `Renew` | `Member::heartbeat`: the `MULTI` that re-creates the record, then (after a lapse) `REAFFIRM` and the lease renewal: two steps, other actions run between them |
//! | `LeaseEnds` | the pod's own clock: `0.8 × ttl` after its last heartbeat start (any time: heartbeats may fail) |
//! | `RecordExpires` | Valkey's TTL on the record; only once the pod's lease ended (clock rates within 20 %) |
//! | `Crash` / `Restart` | the process dies (its memory with it) and starts again **under the same id** |
//! | `CrashReused` / `Misdeliver` | the process dies and another pod answers at its old address (a process restarted under a new id at the same port); a route cached for the dead pod reaches that pod |
//! | `Deregister` | `Member::deregister` (the process stays and may register again) |
//! | `Forget` | the pod's bounded fence map drops the destination (LRU) |
//! | `LeaveStart` / `LeaveApply` | `Member::remove_from_destination` (also what a routed `DELETE` answered 2xx runs): the fence raised, then the set change in Valkey, then its reply |
//! | `FanOut` | a member adds a peer (`Member::fan_out`, `add_pod_to_destination`): shared on purpose |
//! | `Resolve` | `RESOLVE` on a cache miss (the dead pruned when a member is live); on an empty set or an all-dead one it reads a pick and the claim is **sent later** ([`Action::Claim`]): the window between the read and the script |
//! | `Claim` | `CLAIM`, applied whenever: after heartbeats, after other claims |
//! | `Deliver` | a call a coordinator routes from its cache reaches the pod: `pod::fenced` admits it (the pod learns its epoch) or refuses it (the coordinator drops its cache entry) |
//! | `CacheExpires` / `CoordinatorRestart` | the route cache's TTL (any time: it is independent of the member TTL); a coordinator killed, its pending claim lost |
//!
//! **The invariant** ([`ONE_OWNER`]): at every moment, the pods that would
//! admit a call some coordinator can route for the destination (a route
//! in its cache: a call in flight is a route kept arbitrarily long) are
//! members of one and the same assignment, i.e. of the set at one epoch.
//! Outside fan-out that is one pod; a fanned-out assignment's members may
//! serve together, but never with a pod of another assignment.
//!
//! **Seeded bugs** ([`Bug`]): the protocol as it was before the fix of each
//! case; each must be refuted.

mod state;
mod steps;
#[cfg(test)]
mod tests;

use stateright::{Model, Property};

pub use state::{Action, Fence, State};
use state::{CoordinatorState, Fault, PodState};

/// The property every state must satisfy.
pub const ONE_OWNER: &str = "outside fan-out, one pod admits the destination's calls";

/// A variant of the protocol as it was before one of the fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// `CLAIM` removes the members the coordinator read as dead, without
    /// reading their records (a member that came back since is removed).
    ClaimWithoutRecordCheck,
    /// A pod with no memory of the destination (just restarted under the
    /// same id, or forgotten) admits any epoch.
    RestartAdmitsAnyEpoch,
    /// Leaving a destination does not raise the pod's own fence.
    LeaveKeepsFence,
    /// Members outside a coordinator's address policy are removed by its
    /// claims, as dead ones are.
    PolicyRemovesLive,
    /// `UNBIND` removes the pod a `DELETE` was routed to whatever happened
    /// since (found by coordinator chaos: the pod left at the `DELETE`, a
    /// claim bound it again at a newer epoch, the late `UNBIND` removed it
    /// and another pod was claimed while it still served).
    UnbindRemovesRebound,
    /// A first sight that found the pod outside the set remembers the
    /// epoch it read as admissible: the same route again is admitted
    /// without a read (found by coordinator chaos: a pod restarted under a
    /// new id at its old port served routes meant for its predecessor).
    RefusalAdmitsLater,
}

impl Bug {
    /// Every seeded bug.
    pub const ALL: [Bug; 6] = [
        Bug::ClaimWithoutRecordCheck,
        Bug::RestartAdmitsAnyEpoch,
        Bug::LeaveKeepsFence,
        Bug::PolicyRemovesLive,
        Bug::RefusalAdmitsLater,
        Bug::UnbindRemovesRebound,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Bug::ClaimWithoutRecordCheck => "claim-without-record-check",
            Bug::RestartAdmitsAnyEpoch => "restart-admits-any-epoch",
            Bug::LeaveKeepsFence => "leave-keeps-fence",
            Bug::PolicyRemovesLive => "policy-removes-live",
            Bug::RefusalAdmitsLater => "refusal-admits-later",
            Bug::UnbindRemovesRebound => "unbind-removes-rebound",
        }
    }

    /// The bug called `name`.
    pub fn named(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The bounds its shortest counterexample needs, when `FULL`'s and
    /// `SMALL`'s epochs are too few: [`Config::DEEP`] for a deregistration
    /// undone late (bind, leave, bind again, `UNBIND`, claim: five epochs).
    pub fn bounds(self) -> Option<Config> {
        match self {
            Bug::UnbindRemovesRebound => Some(Config::DEEP),
            _ => None,
        }
    }
}

/// The bounds of the exploration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Pods (2 or 3).
    pub pods: u8,
    /// The highest epoch explored (every change of the set bumps it).
    pub max_epoch: u8,
    /// Faults in a run, each kind at most once: a crash (then a restart
    /// under the same id), a deregistration, an LRU forget, a leave, a
    /// fan-out, a coordinator restart.
    pub faults: u8,
    /// Leases that end by the pod's clock (missed heartbeats) in a run.
    pub lapses: u8,
}

impl Config {
    /// 3 pods, every fault kind alone (with any number of interleaved
    /// claims, cache expiries and deliveries, and two lease lapses).
    pub const FULL: Config = Config {
        pods: 3,
        max_epoch: 4,
        faults: 1,
        lapses: 2,
    };

    /// Every pair of fault kinds in one run, with 2 pods.
    pub const PAIRS: Config = Config {
        pods: 2,
        faults: 2,
        ..Config::FULL
    };

    /// 2 pods, one fault, epochs up to 5, no lease lapses: deep enough for
    /// a deregistration whose `UNBIND` runs after the set changed twice.
    pub const DEEP: Config = Config {
        max_epoch: 5,
        lapses: 0,
        ..Config::SMALL
    };

    /// A smaller check for debug-build tests: 2 pods, one fault, epochs up
    /// to 3 (enough for every seeded bug but those with their own
    /// [`Bug::bounds`]).
    pub const SMALL: Config = Config {
        pods: 2,
        max_epoch: 3,
        ..Config::FULL
    };
}

/// The ownership protocol, fixed or with one seeded bug.
#[derive(Clone, Debug)]
pub struct Ownership {
    config: Config,
    bug: Option<Bug>,
}

impl Ownership {
    /// The model under `config`, with `bug` seeded (`None`: as fixed).
    pub fn new(config: Config, bug: Option<Bug>) -> Self {
        Self { config, bug }
    }

    fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    /// Whether coordinator `c` may forward to pod `p`: `c1` rejects `p0`.
    fn accepts(c: u8, p: u8) -> bool {
        !(c == 1 && p == 0)
    }

    /// The pods coordinator `c` may forward to, as a mask.
    fn accepted(&self, c: u8) -> u8 {
        (0..self.config.pods)
            .filter(|&p| Self::accepts(c, p))
            .fold(0, |m, p| m | bit(p))
    }

    /// Whether pod `p` would admit a call routed at `epoch` now.
    fn admits(&self, s: &State, p: u8, epoch: u8) -> bool {
        let pod = &s.pods[usize::from(p)];
        if !pod.up || !pod.lease {
            return false;
        }
        match pod.fence {
            Fence::Leaving => false,
            Fence::Known(newest) => epoch >= newest,
            // first sight: one read of Valkey
            Fence::Unknown if self.has(Bug::RestartAdmitsAnyEpoch) => true,
            Fence::Unknown => epoch >= s.epoch && s.set & bit(p) != 0,
            // remembered outside the set: older refused, else read again
            Fence::Read(newest) => epoch >= newest && epoch >= s.epoch && s.set & bit(p) != 0,
        }
    }

    /// The pod that answers a route naming `p`: `p`, or (`misrouted`) the
    /// pod now at `p`'s old address.
    fn answerer(s: &State, p: u8, misrouted: bool) -> Option<u8> {
        match s.reused {
            _ if !misrouted => Some(p),
            Some(r) if r.from == p => Some(r.by),
            _ => None,
        }
    }

    /// The pods that would admit a call a coordinator can route now.
    pub fn admitting(&self, s: &State) -> u8 {
        let mut out = 0;
        for c in &s.coordinators {
            if let Some((set, epoch)) = c.cache {
                for p in (0..self.config.pods).filter(|&p| set & bit(p) != 0) {
                    for q in [false, true]
                        .map(|m| Self::answerer(s, p, m))
                        .into_iter()
                        .flatten()
                    {
                        if self.admits(s, q, epoch) {
                            out |= bit(q);
                        }
                    }
                }
            }
        }
        out
    }

    fn one_owner(&self, s: &State) -> bool {
        let a = self.admitting(s);
        a.count_ones() <= 1 || s.fanned & a == a
    }
}

/// The shortest counterexample to [`ONE_OWNER`] under `config` with `bug`
/// seeded: each step and the state after it (`State`'s `Display`), from the
/// initial state. `None` when there is none.
pub fn counterexample(config: Config, bug: Option<Bug>) -> Option<Vec<(String, String)>> {
    use stateright::Checker;
    let model = Ownership::new(config, bug);
    // one thread: the same (shortest) trace every time
    let checker = model.checker().spawn_bfs().join();
    let path = checker.discovery(ONE_OWNER)?;
    let mut steps = Vec::new();
    let mut came_by = "(start)".to_owned();
    for (state, next) in path.into_vec() {
        steps.push((came_by, state.to_string()));
        came_by = next.map_or_else(String::new, |a| format!("{a:?}"));
    }
    Some(steps)
}

/// The mask of pod `p`.
pub(crate) fn bit(p: u8) -> u8 {
    1 << p
}

impl Model for Ownership {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::new(self.config)]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let n = self.config.pods;
        for p in 0..n {
            let pod = &s.pods[usize::from(p)];
            let registered = s.records & bit(p) != 0;
            if pod.up {
                // a heartbeat while the lease runs changes nothing
                if pod.beat_written {
                    actions.push(Action::Renew(p));
                } else if !pod.lease {
                    actions.push(Action::Beat(p));
                }
                if pod.lease && s.budget.lapses > 0 {
                    actions.push(Action::LeaseEnds(p));
                }
                if s.budget.allows(Fault::Crash) {
                    actions.push(Action::Crash(p));
                    for by in (0..n).filter(|&q| q != p && s.pods[usize::from(q)].up) {
                        actions.push(Action::CrashReused { from: p, by });
                    }
                }
                if registered && s.budget.allows(Fault::Deregister) {
                    actions.push(Action::Deregister(p));
                }
                if matches!(pod.fence, Fence::Known(_) | Fence::Read(_))
                    && s.budget.allows(Fault::Forget)
                {
                    actions.push(Action::Forget(p));
                }
                if pod.leaving {
                    actions.push(Action::LeaveApply(p));
                } else if s.set & bit(p) != 0 && s.budget.allows(Fault::Leave) {
                    actions.push(Action::LeaveStart(p));
                }
                if s.set & bit(p) != 0 && s.budget.allows(Fault::FanOut) {
                    for q in (0..n).filter(|&q| s.set & bit(q) == 0 && s.records & bit(q) != 0) {
                        actions.push(Action::FanOut { from: p, to: q });
                    }
                }
            } else {
                actions.push(Action::Restart(p));
            }
            if registered && !pod.lease {
                actions.push(Action::RecordExpires(p));
            }
        }
        for c in 0..2u8 {
            let co = &s.coordinators[usize::from(c)];
            match (co.cache, co.pending) {
                (Some((set, _)), _) => {
                    actions.push(Action::CacheExpires(c));
                    for p in (0..n).filter(|&p| set & bit(p) != 0) {
                        actions.push(Action::Deliver { c, p });
                        if s.reused.is_some_and(|r| r.from == p) {
                            actions.push(Action::Misdeliver { c, p });
                        }
                    }
                }
                (None, None) => {
                    // a claim follows the read only on an empty or dead set:
                    // one action per pick (the live members c may use)
                    let picks = s.records & self.accepted(c);
                    actions.push(Action::Resolve { c, pick: None });
                    for p in (0..n).filter(|&p| picks & bit(p) != 0) {
                        actions.push(Action::Resolve { c, pick: Some(p) });
                    }
                }
                (None, Some(_)) => actions.push(Action::Claim(c)),
            }
            if let (Some((set, _)), None) = (co.cache, co.unbinding)
                && s.budget.allows(Fault::Delete)
            {
                for p in (0..n).filter(|&p| set & bit(p) != 0) {
                    actions.push(Action::DeleteRouted { c, p });
                }
            }
            if co.unbinding.is_some() {
                actions.push(Action::Unbind(c));
            }
            if (co.cache.is_some() || co.pending.is_some())
                && s.budget.allows(Fault::CoordinatorRestart)
            {
                actions.push(Action::CoordinatorRestart(c));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let max = self.config.max_epoch;
        match action {
            Action::Beat(p) => {
                s.records |= bit(p);
                s.pod_mut(p).beat_written = true;
            }
            Action::Renew(p) => {
                s.pod_mut(p).beat_written = false;
                // the record expired meanwhile: more than a TTL since the
                // heartbeat started, so its lease is not renewed
                if s.records & bit(p) != 0 {
                    let pod = s.pods[usize::from(p)];
                    if let (false, Fence::Known(newest) | Fence::Read(newest)) =
                        (pod.lease, pod.fence)
                    {
                        // back from a lapse: REAFFIRM
                        let member = s.set & bit(p) != 0;
                        if member {
                            s.bump(max)?;
                        }
                        let newest = newest.max(s.epoch);
                        s.pod_mut(p).fence = if member {
                            Fence::Known(newest)
                        } else {
                            Fence::Read(newest)
                        };
                    }
                    s.pod_mut(p).lease = true;
                }
            }
            Action::LeaseEnds(p) => {
                s.budget.lapses -= 1;
                s.pod_mut(p).lease = false;
            }
            Action::RecordExpires(p) => s.records &= !bit(p),
            Action::Crash(p) => {
                s.budget.spend(Fault::Crash);
                *s.pod_mut(p) = PodState::down();
            }
            Action::CrashReused { from, by } => {
                s.budget.spend(Fault::Crash);
                *s.pod_mut(from) = PodState::down();
                s.reused = Some(state::Reused { from, by });
            }
            Action::Restart(p) => s.pod_mut(p).up = true,
            Action::Deregister(p) => {
                s.budget.spend(Fault::Deregister);
                s.pod_mut(p).lease = false;
                s.records &= !bit(p);
            }
            Action::Forget(p) => {
                s.budget.spend(Fault::Forget);
                s.pod_mut(p).fence = Fence::Unknown;
            }
            Action::LeaveStart(p) => {
                s.budget.spend(Fault::Leave);
                s.pod_mut(p).leaving = true;
                if !self.has(Bug::LeaveKeepsFence) {
                    s.pod_mut(p).fence = Fence::Leaving;
                }
            }
            Action::LeaveApply(p) => {
                s.pod_mut(p).leaving = false;
                if s.set & bit(p) != 0 {
                    s.set &= !bit(p);
                    s.bump(max)?;
                }
                if !self.has(Bug::LeaveKeepsFence) {
                    s.pod_mut(p).fence = Fence::Read(s.epoch);
                }
            }
            Action::FanOut { to, .. } => {
                s.budget.spend(Fault::FanOut);
                s.set |= bit(to);
                s.fanned = s.set;
                s.bump(max)?;
            }
            Action::Resolve { c, pick } => self.resolve(&mut s, c, pick)?,
            Action::Claim(c) => self.claim(&mut s, c)?,
            Action::CacheExpires(c) => s.coordinator_mut(c).cache = None,
            Action::Deliver { c, p } => self.deliver(&mut s, c, p),
            Action::Misdeliver { c, p } => {
                let by = Self::answerer(&s, p, true)?;
                self.deliver(&mut s, c, by);
            }
            Action::CoordinatorRestart(c) => {
                s.budget.spend(Fault::CoordinatorRestart);
                *s.coordinator_mut(c) = CoordinatorState::default();
            }
            Action::DeleteRouted { c, p } => {
                let (_, epoch) = s.coordinators[usize::from(c)].cache?;
                if !self.admits(&s, p, epoch) {
                    // refused: `deliver` covers it
                    return None;
                }
                s.budget.spend(Fault::Delete);
                // `pod::fenced`: the pod leaves before it answers
                if s.set & bit(p) != 0 {
                    s.set &= !bit(p);
                    s.bump(max)?;
                }
                s.pod_mut(p).fence = Fence::Read(s.epoch);
                let co = s.coordinator_mut(c);
                co.cache = None;
                co.unbinding = Some((p, epoch));
            }
            Action::Unbind(c) => {
                let (p, routed) = s.coordinators[usize::from(c)].unbinding?;
                s.coordinator_mut(c).unbinding = None;
                let mut gone = s.set & !s.records;
                if self.has(Bug::UnbindRemovesRebound) || s.epoch == routed {
                    gone |= s.set & bit(p);
                }
                let live = s.set & !gone;
                s.set = live;
                if live == 0 || gone != 0 {
                    s.bump(max)?;
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_OWNER, |m: &Ownership, s: &State| m.one_owner(s)),
            // the model is not vacuous: these states are reached
            Property::sometimes(
                "a failover to another pod is routed",
                |m: &Ownership, s: &State| {
                    let a = m.admitting(s);
                    s.epoch >= 2
                        && a.count_ones() == 1
                        && s.set == a
                        && s.pods.iter().any(|p| !p.up || !p.lease)
                },
            ),
            Property::sometimes(
                "a pod back from a lapse admits again",
                |m: &Ownership, s: &State| {
                    s.epoch >= 2
                        && s.pods.iter().enumerate().any(|(p, pod)| {
                            pod.fence == Fence::Known(s.epoch) && m.admitting(s) == bit(p as u8)
                        })
                },
            ),
            Property::sometimes(
                "a route meant for a crashed pod is refused at its old address",
                |_: &Ownership, s: &State| {
                    s.reused
                        .is_some_and(|r| matches!(s.pods[usize::from(r.by)].fence, Fence::Read(_)))
                },
            ),
            Property::sometimes(
                "a claim is pending while its pod heartbeats",
                |_: &Ownership, s: &State| {
                    s.coordinators.iter().any(|c| c.pending.is_some())
                        && s.pods.iter().any(|p| p.beat_written)
                },
            ),
        ]
    }
}
