//! Hand-over requests under faults (VVM seeds): a requester process (an
//! operator's `vvm-host handover`, through `vvm_orch::handover::Requester`
//! over its own faulty view of the store) asks the leader of a random key
//! to hand over to a named node (`--to`, sometimes one that has gone), and
//! gives up after a random patience by withdrawing. (Not to "anyone": that
//! choice goes by the candidates' wall clocks and would not replay; the
//! model in `crates/protocol-models` covers it.)
//!
//! The store is tapped (every write as it is applied, late ones included)
//! for the ground truth: which requests were accepted, and which
//! leaderships wrote a hand-over marker. The checker then holds the
//! requester's answers to it:
//!
//! - a request is accepted at most once;
//! - "withdrawn", and a request gone before it was accepted: it was never
//!   accepted, late writes included;
//! - "no candidate", "failed": the request never made the addressed
//!   leadership hand over;
//! - "handed over to X": the request was accepted once, the addressed
//!   leadership wrote a marker, and X is the node asked for, if one was;
//! - every marker was written by a leadership that had accepted a request
//!   addressed to it, or, in seeds with priorities, is a preemption that
//!   keeps the rules in `markers.rs` (strictly higher, after the leader's
//!   minimum tenure and the candidacy's hold-down).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use tokio::time::{Instant, sleep};
use ttl_storage::{DynTtlStorage, Key};
use vvm_orch::{
    VvmConfig,
    handover::{Answer, Request, Requester, State, StoreOutcome, Withdrawal},
};

use crate::{
    groups::Plan,
    history::Who,
    markers::{self, Births, MarkerRules, Unasked},
    world::{SimStorage, World},
};

/// The prefix of a hand-over marker (`elections`' reserved value).
const MARKER: &[u8] = b"\0elections/reserved-for\0";
/// The request records' namespace (`vvm_orch::keys`).
const REQUESTS: &str = "__vvm__/handover/";

/// What the requester was told about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Told {
    Withdrawn,
    Answer(Answer),
    /// Seen accepted; then the lease said this.
    Learned(StoreOutcome),
    /// Gone before it was seen accepted.
    Gone,
    /// The store did not let it find out.
    Unknown,
}

impl Told {
    /// What the event log says (no values: a VVM's carries its process id,
    /// and the log must replay).
    fn label(&self) -> &'static str {
        match self {
            Told::Withdrawn => "withdrawn",
            Told::Answer(Answer::HandedOver(_)) => "handed over",
            Told::Answer(Answer::NoCandidate) => "no candidate",
            Told::Answer(Answer::Released(_)) => "released",
            Told::Answer(_) => "failed",
            Told::Learned(StoreOutcome::HandedOver) => "accepted; the candidate leads",
            Told::Learned(_) => "accepted; ended otherwise",
            Told::Gone => "gone",
            Told::Unknown => "unknown",
        }
    }
}

/// One request and what its requester was told.
#[derive(Debug, Clone)]
struct Asked {
    id: String,
    nonce: String,
    lease: String,
    to: Option<String>,
    told: Told,
}

/// Requests of a run: what was asked, told, and applied.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    asked: Vec<Asked>,
    /// Accepts applied, by request id.
    accepts: BTreeMap<String, u32>,
    /// The last accept applied for each leadership (by its nonce): the
    /// request it acts on, if it hands over.
    last_accept: BTreeMap<String, String>,
    /// Markers applied: (lease key, nonce of the record they replaced,
    /// the request its leadership had accepted last, if any).
    markers: Vec<(String, String, Option<String>)>,
    /// Markers no request asked for (preemptions, in seeds with priorities).
    unasked: Vec<Unasked>,
    /// When each leadership record and candidacy first appeared.
    births: Births,
    /// Seeds with priorities: what preemption markers must keep.
    rules: Option<MarkerRules>,
}

/// Counts of a run's (or all runs') requests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestCounts {
    /// Requests posted.
    pub posted: u64,
    /// Posts refused: another request pending (or a post whose outcome
    /// was unknown).
    pub busy: u64,
    /// Told: handed over.
    pub handed_over: u64,
    /// Told: no candidate (or not the one asked for).
    pub no_candidate: u64,
    /// Told: released instead, or failed to serve.
    pub released_or_failed: u64,
    /// Told: withdrawn in time.
    pub withdrawn: u64,
    /// Seen accepted, outcome read from the lease.
    pub learned: u64,
    /// Gone before accepted, or unknown.
    pub other: u64,
    /// Accepts applied.
    pub accepts: u64,
    /// Markers applied.
    pub markers: u64,
    /// Markers no request asked for: preemptions (seeds with priorities).
    pub preemptions: u64,
}

impl RequestCounts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &RequestCounts) {
        self.posted += other.posted;
        self.busy += other.busy;
        self.handed_over += other.handed_over;
        self.no_candidate += other.no_candidate;
        self.released_or_failed += other.released_or_failed;
        self.withdrawn += other.withdrawn;
        self.learned += other.learned;
        self.other += other.other;
        self.accepts += other.accepts;
        self.markers += other.markers;
        self.preemptions += other.preemptions;
    }
}

impl Ledger {
    /// An empty ledger; `rules`: seeds with priorities.
    pub(crate) fn new(rules: Option<MarkerRules>) -> Self {
        Ledger {
            rules,
            ..Ledger::default()
        }
    }

    /// An insert of `value` at `key` was applied at `at`.
    pub(crate) fn applied_insert(&mut self, key: &Key, value: &[u8], at: Duration) {
        self.births.applied(key, value, at);
    }

    /// A compare-and-swap of `key` from `old` to `new` was applied at
    /// `at`: notes accepts, markers and births.
    pub(crate) fn applied_swap(&mut self, key: &Key, old: &[u8], new: &[u8], at: Duration) {
        self.births.applied(key, new, at);
        if key.as_str().starts_with(REQUESTS)
            && let Some(rest) = new.strip_prefix(b"hacc2 ")
            && let Ok(text) = std::str::from_utf8(rest)
        {
            let mut parts = text.split(' ');
            if let (Some(id), Some(nonce)) = (parts.next(), parts.next()) {
                *self.accepts.entry(id.to_owned()).or_default() += 1;
                self.last_accept.insert(nonce.to_owned(), id.to_owned());
            }
        }
        if let Some(target) = new.strip_prefix(MARKER) {
            let nonce = elections::record::nonce(old)
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            let request = self.last_accept.get(&nonce).cloned();
            if request.is_none() {
                self.unasked.push(Unasked {
                    key: key.as_str().to_owned(),
                    nonce: nonce.clone(),
                    leader: markers::contender_of(old),
                    target: String::from_utf8_lossy(target).into_owned(),
                    at,
                });
            }
            self.markers.push((key.as_str().to_owned(), nonce, request));
        }
    }

    /// The counts of this run.
    pub(crate) fn counts(&self, busy: u64) -> RequestCounts {
        let mut counts = RequestCounts {
            posted: self.asked.len() as u64,
            busy,
            accepts: self.accepts.values().map(|n| u64::from(*n)).sum(),
            markers: self.markers.len() as u64,
            // Only VVM seeds with priorities (bare contenders hand over
            // without requests).
            preemptions: if self.rules.is_some() {
                self.unasked.len() as u64
            } else {
                0
            },
            ..RequestCounts::default()
        };
        for asked in &self.asked {
            match &asked.told {
                Told::Answer(Answer::HandedOver(_)) => counts.handed_over += 1,
                Told::Answer(Answer::NoCandidate) => counts.no_candidate += 1,
                Told::Answer(_) => counts.released_or_failed += 1,
                Told::Withdrawn => counts.withdrawn += 1,
                Told::Learned(_) => counts.learned += 1,
                Told::Gone | Told::Unknown => counts.other += 1,
            }
        }
        counts
    }

    /// Every rule the run broke (must be empty).
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (id, n) in &self.accepts {
            if *n > 1 {
                found.push(format!("request {id} accepted {n} times"));
            }
        }
        for asked in &self.asked {
            let accepted = self.accepts.get(&asked.id).copied().unwrap_or(0);
            // A marker of the addressed leadership, acting on this request.
            let marked = self.markers.iter().any(|(key, nonce, request)| {
                *key == asked.lease
                    && *nonce == asked.nonce
                    && request.as_deref() == Some(asked.id.as_str())
            });
            let broken = match &asked.told {
                // The withdrawal won (or the record went before it was
                // accepted): no accept was ever applied, late ones included.
                Told::Withdrawn | Told::Gone => accepted > 0,
                // Nothing stopped: the addressed leadership never handed
                // over acting on this request (it acts on the request it
                // accepted last). An accept applied while its answer was
                // lost is answered "no candidate" when the candidate left
                // meanwhile: nothing was stopped for it.
                Told::Answer(Answer::NoCandidate | Answer::Failed(_)) => marked,
                Told::Answer(Answer::HandedOver(successor)) => {
                    !marked
                        || accepted != 1
                        || asked.to.as_deref().is_some_and(|to| {
                            !vvm_orch::handover::matches(successor.as_bytes(), to)
                        })
                }
                _ => false,
            };
            if broken {
                found.push(format!(
                    "request to {} on {} was told {:?}; accepts applied: {accepted}, marker by the addressed leadership: {marked}",
                    asked.to.as_deref().unwrap_or("anyone"),
                    asked.lease,
                    asked.told
                ));
            }
        }
        for unasked in &self.unasked {
            found.extend(markers::judge(self.rules.as_ref(), &self.births, unasked));
        }
        found
    }
}

/// The requester process: asks now and then until the run ends.
pub(crate) async fn requester(world: Arc<World>, plan: Arc<Plan>, who: Who, contenders: usize) {
    let d = world.lease;
    let storage: DynTtlStorage = Arc::new(SimStorage {
        world: world.clone(),
        who,
    });
    loop {
        let gap = world.lock().rng.between(d, d * 3);
        sleep(gap).await;
        let (lock, index, target, patience) = {
            let mut s = world.lock();
            let lock = s.rng.below(plan.locks.len() as u64) as usize;
            let index = 1 + s.rng.below(u64::from(crate::groups::MAX_SIZE)) as u32;
            // Always a named node (`--to`): the unnamed choice, the
            // candidate that has waited longest, goes by the candidates'
            // wall clocks and would not replay. A third of the time an
            // incarnation that has gone (`--to X` with X gone).
            let nodes: Vec<usize> = (0..contenders)
                .filter(|c| plan.groups[*c].lock == lock)
                .collect();
            let node = nodes[s.rng.below(nodes.len() as u64) as usize];
            let incarnation = s.alive[node].unwrap_or(0);
            let gone = s.rng.chance(0.33) && incarnation > 0;
            let target = Some(format!("c{node}-i{}", incarnation - u32::from(gone)));
            let patience = s.rng.between(Duration::ZERO, d);
            (lock, index, target, patience)
        };
        let mut config = VvmConfig::new("requester");
        config.key_prefix.clone_from(&plan.locks[lock].prefix);
        config.cluster_size = crate::groups::MAX_SIZE;
        config.leadership_duration = d;
        let Ok(requester) = Requester::new(storage.clone(), &config, index) else {
            return;
        };
        let Ok(Some(leader)) = requester.leader().await else {
            continue;
        };
        let request = Request::new(&leader, target.as_deref());
        if !matches!(requester.post(&request, patience).await, Ok(true)) {
            world.update(|s| s.requests_busy += 1);
            continue;
        }
        let told = follow(&requester, &request, patience, d).await;
        let lease = format!("{}{index}", plan.locks[lock].prefix);
        world.update(|s| {
            s.history.note(
                Instant::now(),
                format_args!(
                    "request {lease} to {}: {}",
                    target.as_deref().unwrap_or("anyone"),
                    told.label()
                ),
            );
            s.requests.asked.push(Asked {
                id: request.id().to_owned(),
                nonce: request.nonce().to_owned(),
                lease,
                to: target,
                told,
            });
        });
    }
}

/// Follows one request to what the requester is told.
async fn follow(requester: &Requester, request: &Request, patience: Duration, d: Duration) -> Told {
    let deadline = Instant::now() + patience;
    // After the leader began: as long as a stop, a hand-over and the
    // marker can take, and a margin.
    let give_up = deadline + d * 3;
    let mut accepted: Option<String> = None;
    loop {
        if Instant::now() >= give_up {
            return Told::Unknown;
        }
        match requester.state(request).await {
            Ok(State::Answered(answer)) => {
                requester.done(request).await;
                return Told::Answer(answer);
            }
            Ok(State::Accepted { to }) => accepted = Some(to),
            Ok(State::Gone) => {
                return match accepted {
                    Some(to) => learn(requester, request, &to).await,
                    None => Told::Gone,
                };
            }
            Ok(State::Pending) if accepted.is_none() && Instant::now() >= deadline => {
                match withdraw(requester, request).await {
                    Some(Withdrawal::Withdrawn) => return Told::Withdrawn,
                    Some(Withdrawal::TooLate(State::Answered(answer))) => {
                        requester.done(request).await;
                        return Told::Answer(answer);
                    }
                    Some(Withdrawal::TooLate(State::Accepted { to })) => accepted = Some(to),
                    _ => return Told::Unknown,
                }
            }
            _ => {}
        }
        if let Some(to) = &accepted
            && Instant::now() >= deadline
            && let Ok(outcome) = requester.outcome_from_store(request, to).await
            && outcome != StoreOutcome::InProgress
        {
            return Told::Learned(outcome);
        }
        sleep(d / 20).await;
    }
}

/// Withdraws `request`, retrying store errors a few times.
async fn withdraw(requester: &Requester, request: &Request) -> Option<Withdrawal> {
    for _ in 0..5 {
        if let Ok(withdrawal) = requester.withdraw(request).await {
            return Some(withdrawal);
        }
        sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The outcome of an accepted request whose record went away, from the lease.
async fn learn(requester: &Requester, request: &Request, to: &str) -> Told {
    match requester.outcome_from_store(request, to).await {
        Ok(outcome) => Told::Learned(outcome),
        Err(_) => Told::Unknown,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const NONCE: &str = "0123456789abcdef00000001";

    fn asked(id: &str, told: Told) -> Asked {
        Asked {
            id: id.to_owned(),
            nonce: NONCE.to_owned(),
            lease: "a/1".to_owned(),
            to: Some("b".to_owned()),
            told,
        }
    }

    fn accept(ledger: &mut Ledger, id: &str) {
        let key = Key::new("__vvm__/handover/a/1").unwrap();
        ledger.applied_swap(
            &key,
            b"hreq2",
            format!("hacc2 {id} {NONCE} b#1").as_bytes(),
            Duration::ZERO,
        );
    }

    fn marker(ledger: &mut Ledger) {
        let key = Key::new("a/1").unwrap();
        ledger.applied_swap(
            &key,
            format!("a#{NONCE}").as_bytes(),
            MARKER,
            Duration::ZERO,
        );
    }

    #[test]
    fn the_checker_holds_answers_to_what_was_applied() {
        let mut truthful = Ledger::default();
        accept(&mut truthful, "0000000000000001");
        marker(&mut truthful);
        truthful.asked.push(asked(
            "0000000000000001",
            Told::Answer(Answer::HandedOver("b#1".into())),
        ));
        truthful
            .asked
            .push(asked("0000000000000002", Told::Withdrawn));
        assert_eq!(truthful.violations(), Vec::<String>::new());

        // Told withdrawn, yet accepted (the old reply-after-hand-over).
        let mut lied = Ledger::default();
        accept(&mut lied, "0000000000000001");
        lied.asked.push(asked("0000000000000001", Told::Withdrawn));
        assert_eq!(lied.violations().len(), 1);

        // Handed over to someone else than asked; a marker nobody asked for.
        let mut wrong = Ledger::default();
        accept(&mut wrong, "0000000000000001");
        marker(&mut wrong);
        wrong.asked.push(asked(
            "0000000000000001",
            Told::Answer(Answer::HandedOver("c#1".into())),
        ));
        let mut unasked = Ledger::default();
        marker(&mut unasked);
        assert_eq!(wrong.violations().len(), 1);
        assert_eq!(unasked.violations().len(), 1);
    }
}
