//! The hand-over protocol: `vvm-orch`'s requests through the store
//! (`crates/vvm-orch/src/handover/`) on top of `elections`' hand-over
//! marker (`crates/elections/src/handover.rs`), with one leader, two
//! candidates and one requester.
//!
//! What is modelled, as the code does it:
//!
//! - the **lease**: free, held by one leadership (a node and a leadership
//!   id), or a **marker** reserving it for one candidate;
//! - the **candidate records** (listed or not); a winner withdraws its own,
//!   and that write may be lost, so it can outlive the campaign;
//! - the **request record**: pending (addressed to one leadership, with an
//!   optional `to`), accepted (for one candidate), answered;
//! - the **leader**: reads the request, refuses it or accepts it (its
//!   commitment), stops its services, lists the candidates again, writes
//!   the marker for the accepted candidate (or releases), answers;
//! - the **requester**: posts, reads, gives up by withdrawing the pending
//!   bytes, and, when no answer comes, reads the outcome from the lease;
//! - **faults**: an accept whose answer is lost (applied, the leader does
//!   not know), an accept, an answer or a withdrawal applied late (or
//!   never), an answer never written, crashes of any node at any step,
//!   candidates leaving, and expiry: of a marker at any time, of a
//!   candidate record once its candidate stopped waiting, of a lease once
//!   its holder no longer acts (the killer's guarantee, proved by the
//!   elections protocol, is taken as given here).
//!
//! The properties (`always`): at most one holder acts per key; a request
//! is acted on at most once; the answer the requester gets is what
//! happened; a leader never hands over to itself; a request `to` X never
//! hands over to anyone else. The seeded bugs ([`Bug`]) are the protocol
//! as it was before issue 34; each must be refuted.

use stateright::{Model, Property};

mod state;
#[cfg(test)]
mod tests;

pub use state::{Action, Answer, Late, Lease, Node, Req, Requester, State, Told};

/// The nodes: node 0 leads first, nodes 1 and 2 wait.
const NODES: usize = 3;

/// Leaderships the model lets happen (acquisitions stop after this many):
/// enough for a hand-over, a crash and a take-over after it.
const MAX_LEADERSHIPS: u8 = 4;

/// The protocol as it was before a fix; the checker must refute each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bug {
    /// No accept step: the leader acts on the pending request and answers
    /// after the hand-over; a withdrawal of the pending bytes wins while
    /// the leader is already stopping its services (case 8).
    ReplyAfterHandOver,
    /// Requests are not addressed: any leader serves a request it finds,
    /// also its predecessor's (case 3).
    Unaddressed,
    /// The candidate listing does not leave out the leader, whose own
    /// candidate record may outlive its campaign (case 4).
    LeaderListed,
    /// When the named candidate left while the services stopped, the
    /// leader hands over to another candidate (case 5).
    FallBack,
}

impl Bug {
    /// Every seeded bug.
    pub const ALL: [Bug; 4] = [
        Bug::ReplyAfterHandOver,
        Bug::Unaddressed,
        Bug::LeaderListed,
        Bug::FallBack,
    ];

    /// The name `--bug` takes.
    pub fn name(self) -> &'static str {
        match self {
            Bug::ReplyAfterHandOver => "reply-after-handover",
            Bug::Unaddressed => "unaddressed",
            Bug::LeaderListed => "leader-listed",
            Bug::FallBack => "fall-back",
        }
    }

    /// The bug named `name`.
    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

/// The hand-over model; `bug: None` is the protocol as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandOver {
    /// The seeded bug, if any.
    pub bug: Option<Bug>,
}

impl HandOver {
    fn listing(self, s: &State, leader: u8) -> Vec<u8> {
        (0..NODES as u8)
            .filter(|&c| s.listed[c as usize])
            .filter(|&c| c != leader || self.bug == Some(Bug::LeaderListed))
            .collect()
    }

    /// The request is this leadership's to serve.
    fn addressed(self, s: &State, lid: u8) -> bool {
        s.addr == lid || self.bug == Some(Bug::Unaddressed)
    }

    /// Starts stopping for a hand-over to `to`.
    fn act(s: &mut State, n: u8, lid: u8, to: u8) {
        s.nodes[n as usize] = Node::Stopping { lid, to };
        s.acted += 1;
    }

    fn serve(self, s: &mut State, n: u8, accept: Action) {
        let Node::Running { lid } = s.nodes[n as usize] else {
            return;
        };
        let listed = self.listing(s, n);
        match s.req {
            Req::Pending => {
                let chosen = match s.to {
                    Some(to) => listed.iter().copied().find(|&c| c == to),
                    None => listed.first().copied(),
                };
                let Some(to) = chosen else {
                    s.req = Req::Answered(Answer::NoCandidate);
                    return;
                };
                if self.bug == Some(Bug::ReplyAfterHandOver) {
                    Self::act(s, n, lid, to);
                    return;
                }
                match accept {
                    Action::Serve(_) => {
                        s.req = Req::Accepted { to };
                        Self::act(s, n, lid, to);
                    }
                    Action::ServeAcceptLost(_) => s.req = Req::Accepted { to },
                    _ => s.late = Late::Accept(to),
                }
            }
            Req::Accepted { to } => {
                if listed.contains(&to) {
                    Self::act(s, n, lid, to);
                } else {
                    s.req = Req::Answered(Answer::NoCandidate);
                }
            }
            Req::Absent | Req::Answered(_) => {}
        }
    }

    fn hand_over(self, s: &mut State, n: u8) {
        let Node::Stopped { lid, to } = s.nodes[n as usize] else {
            return;
        };
        if s.lease != (Lease::Held { lid, node: n }) {
            // The lease went meanwhile: nothing to hand over.
            s.nodes[n as usize] = Node::Answering {
                lid,
                answer: Answer::Released,
            };
            return;
        }
        let listed = self.listing(s, n);
        let target = if listed.contains(&to) {
            Some(to)
        } else if self.bug == Some(Bug::FallBack) {
            listed.first().copied()
        } else {
            None
        };
        let answer = match target {
            Some(target) => {
                s.lease = Lease::Marker { to: target };
                s.marked = Some((lid, target));
                s.self_handover |= target == n;
                s.wrong_target |= s.to.is_some_and(|asked| asked != target);
                Answer::HandedOver(target)
            }
            None => {
                s.lease = Lease::Free;
                Answer::Released
            }
        };
        s.nodes[n as usize] = Node::Answering { lid, answer };
    }

    /// The record the answer replaces.
    fn answered_from(self, s: &State, n: u8) -> Option<Req> {
        if self.bug == Some(Bug::ReplyAfterHandOver) {
            return Some(Req::Pending);
        }
        match s.nodes[n as usize] {
            Node::Answering {
                answer: Answer::HandedOver(to),
                ..
            } => Some(Req::Accepted { to }),
            Node::Answering { .. } => match s.req {
                Req::Accepted { to } => Some(Req::Accepted { to }),
                _ => None,
            },
            _ => None,
        }
    }

    fn take(s: &mut State, n: u8, withdrawn: bool) {
        s.lease = Lease::Held {
            lid: s.next_lid,
            node: n,
        };
        s.nodes[n as usize] = Node::Running { lid: s.next_lid };
        s.next_lid += 1;
        if withdrawn {
            s.listed[n as usize] = false;
        }
    }

    fn apply_late(s: &mut State) {
        match s.late {
            Late::Accept(to) if s.req == Req::Pending => s.req = Req::Accepted { to },
            Late::Answer(from, answer) if s.req == from => s.req = Req::Answered(answer),
            Late::Withdraw if s.req == Req::Pending => s.req = Req::Absent,
            _ => {}
        }
        s.late = Late::Nothing;
    }

    fn give_up(s: &mut State) {
        match s.req {
            Req::Pending => {
                s.req = Req::Absent;
                s.requester = Requester::Done(Told::Withdrawn);
            }
            Req::Accepted { .. } => s.requester = Requester::Done(Told::Began),
            Req::Answered(answer) => s.requester = Requester::Done(Told::Answer(answer)),
            // Gone before the leader accepted: nothing will happen.
            Req::Absent => s.requester = Requester::Done(Told::Withdrawn),
        }
    }

    fn read(s: &mut State) {
        let Requester::Waiting { accepted } = s.requester else {
            return;
        };
        match s.req {
            Req::Answered(answer) => {
                s.req = Req::Absent;
                s.requester = Requester::Done(Told::Answer(answer));
            }
            Req::Accepted { to } => s.requester = Requester::Waiting { accepted: Some(to) },
            // Never seen accepted, and an accepted record is only replaced
            // by its answer: it was withdrawn (a late withdrawal).
            Req::Absent if accepted.is_none() => s.requester = Requester::Done(Told::Withdrawn),
            Req::Absent | Req::Pending => {}
        }
    }

    fn learn(s: &mut State) {
        let Requester::Waiting { accepted: Some(to) } = s.requester else {
            return;
        };
        s.requester = Requester::Done(match s.lease {
            Lease::Held { node, .. } if node == to => Told::Leads(to),
            _ => Told::Ended,
        });
    }

    /// The properties' checks, by name (for tests and the properties).
    fn truthful(s: &State) -> bool {
        match s.requester {
            Requester::Done(Told::Withdrawn | Told::Answer(Answer::NoCandidate)) => s.acted == 0,
            Requester::Done(Told::Answer(Answer::HandedOver(to))) => s.marked == Some((s.addr, to)),
            _ => true,
        }
    }
}

impl Model for HandOver {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            lease: Lease::Held { lid: 1, node: 0 },
            next_lid: 2,
            nodes: [Node::Running { lid: 1 }, Node::Waiting, Node::Waiting],
            listed: [false, true, true],
            req: Req::Absent,
            addr: 0,
            to: None,
            requester: Requester::Idle,
            late: Late::Nothing,
            acted: 0,
            marked: None,
            self_handover: false,
            wrong_target: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for n in 0..NODES as u8 {
            match s.nodes[n as usize] {
                Node::Running { lid } => {
                    let servable = matches!(s.req, Req::Pending | Req::Accepted { .. })
                        && self.addressed(s, lid);
                    if servable {
                        actions.push(Action::Serve(n));
                        if s.req == Req::Pending && self.bug != Some(Bug::ReplyAfterHandOver) {
                            actions.push(Action::ServeAcceptLost(n));
                            if s.late == Late::Nothing {
                                actions.push(Action::ServeAcceptLate(n));
                            }
                        }
                    }
                }
                Node::Stopping { .. } => actions.push(Action::FinishStop(n)),
                Node::Stopped { .. } => actions.push(Action::HandOver(n)),
                Node::Answering { .. } => {
                    actions.push(Action::Answer(n));
                    actions.push(Action::AnswerLost(n));
                    if s.late == Late::Nothing {
                        actions.push(Action::AnswerLate(n));
                    }
                }
                Node::Waiting => {
                    let more = s.next_lid <= MAX_LEADERSHIPS;
                    if more && s.lease == (Lease::Marker { to: n }) {
                        actions.push(Action::TakeMarker(n, true));
                        actions.push(Action::TakeMarker(n, false));
                    }
                    if more && s.lease == Lease::Free {
                        actions.push(Action::Acquire(n, true));
                        actions.push(Action::Acquire(n, false));
                    }
                    actions.push(Action::Leave(n));
                }
                Node::Gone => {}
            }
            if s.nodes[n as usize] != Node::Gone {
                actions.push(Action::Crash(n));
            }
            if s.listed[n as usize] && s.nodes[n as usize] != Node::Waiting {
                actions.push(Action::ExpireRecord(n));
            }
        }
        let expires = match s.lease {
            Lease::Held { lid, node } => {
                s.nodes[node as usize].lid() != Some(lid) || !s.nodes[node as usize].acts()
            }
            Lease::Marker { .. } => true,
            Lease::Free => false,
        };
        if expires {
            actions.push(Action::Expire);
        }
        if s.late != Late::Nothing {
            actions.push(Action::ApplyLate);
            actions.push(Action::DropLate);
        }
        match s.requester {
            Requester::Idle => {
                if let Lease::Held { .. } = s.lease {
                    actions.push(Action::Post(None));
                    actions.push(Action::Post(Some(1)));
                }
            }
            Requester::Waiting { accepted } => {
                actions.push(Action::Read);
                if accepted.is_none() {
                    actions.push(Action::GiveUp);
                    if s.late == Late::Nothing {
                        actions.push(Action::GiveUpLate);
                    }
                }
                // Under way while the addressed leadership holds the lease
                // or a marker reserves it.
                let under_way = match s.lease {
                    Lease::Held { lid, .. } => lid == s.addr,
                    Lease::Marker { .. } => true,
                    Lease::Free => false,
                };
                if accepted.is_some() && !under_way {
                    actions.push(Action::Learn);
                }
            }
            Requester::Done(_) => {}
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = *last;
        match action {
            Action::Serve(n) | Action::ServeAcceptLost(n) | Action::ServeAcceptLate(n) => {
                self.serve(&mut s, n, action);
            }
            Action::FinishStop(n) => {
                if let Node::Stopping { lid, to } = s.nodes[n as usize] {
                    s.nodes[n as usize] = Node::Stopped { lid, to };
                }
            }
            Action::HandOver(n) => self.hand_over(&mut s, n),
            Action::Answer(n) => {
                if let (Node::Answering { answer, .. }, Some(from)) =
                    (s.nodes[n as usize], self.answered_from(&s, n))
                    && s.req == from
                {
                    s.req = Req::Answered(answer);
                }
                s.nodes[n as usize] = Node::Gone;
            }
            Action::AnswerLost(n) => s.nodes[n as usize] = Node::Gone,
            Action::AnswerLate(n) => {
                if let (Node::Answering { answer, .. }, Some(from)) =
                    (s.nodes[n as usize], self.answered_from(&s, n))
                {
                    s.late = Late::Answer(from, answer);
                }
                s.nodes[n as usize] = Node::Gone;
            }
            Action::Crash(n) => s.nodes[n as usize] = Node::Gone,
            Action::TakeMarker(n, withdrawn) | Action::Acquire(n, withdrawn) => {
                Self::take(&mut s, n, withdrawn);
            }
            Action::Leave(n) => {
                s.nodes[n as usize] = Node::Gone;
                s.listed[n as usize] = false;
            }
            Action::Expire => s.lease = Lease::Free,
            Action::ExpireRecord(n) => s.listed[n as usize] = false,
            Action::ApplyLate => Self::apply_late(&mut s),
            Action::DropLate => s.late = Late::Nothing,
            Action::Post(to) => {
                let Lease::Held { lid, .. } = s.lease else {
                    return None;
                };
                s.req = Req::Pending;
                s.addr = lid;
                s.to = to;
                s.requester = Requester::Waiting { accepted: None };
            }
            Action::Read => Self::read(&mut s),
            Action::GiveUp => Self::give_up(&mut s),
            Action::GiveUpLate => s.late = Late::Withdraw,
            Action::Learn => Self::learn(&mut s),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("at most one holder acts per key", |_, s| {
                s.nodes.iter().filter(|n| n.acts()).count() <= 1
            }),
            Property::<Self>::always("a request is acted on at most once", |_, s| s.acted <= 1),
            Property::<Self>::always("the answer the requester gets is what happened", |_, s| {
                HandOver::truthful(s)
            }),
            Property::<Self>::always("a leader never hands over to itself", |_, s| {
                !s.self_handover
            }),
            Property::<Self>::always("a request to X hands over to X or to no one", |_, s| {
                !s.wrong_target
            }),
            Property::<Self>::sometimes("a request is handed over", |_, s| {
                matches!(
                    s.requester,
                    Requester::Done(Told::Answer(Answer::HandedOver(_)))
                )
            }),
            Property::<Self>::sometimes("a withdrawal wins", |_, s| {
                s.requester == Requester::Done(Told::Withdrawn)
            }),
            Property::<Self>::sometimes("a withdrawal comes too late", |_, s| {
                s.requester == Requester::Done(Told::Began) && s.acted == 1
            }),
            Property::<Self>::sometimes("the outcome is read from the lease", |_, s| {
                matches!(s.requester, Requester::Done(Told::Leads(_)))
            }),
        ]
    }
}
