//! The hand-over model's state: the lease, the nodes, the request record,
//! the requester, the writes in flight, and the actions between states.

use super::NODES;

/// The lease record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lease {
    /// No record.
    Free,
    /// Held by leadership `lid` of `node`.
    Held {
        /// The leadership (the record's nonce).
        lid: u8,
        /// Its node.
        node: u8,
    },
    /// Reserved for candidate `to`.
    Marker {
        /// The candidate.
        to: u8,
    },
}

/// What a node is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// A candidate, waiting.
    Waiting,
    /// Leads, services running.
    Running {
        /// Its leadership.
        lid: u8,
    },
    /// Leads, services stopping for a hand-over to `to` (still acting).
    Stopping {
        /// Its leadership.
        lid: u8,
        /// The accepted candidate.
        to: u8,
    },
    /// Services stopped: it hands over to `to` next (or releases).
    Stopped {
        /// Its leadership.
        lid: u8,
        /// The accepted candidate.
        to: u8,
    },
    /// The lease has moved (or was released): the answer is due.
    Answering {
        /// Its leadership.
        lid: u8,
        /// The answer.
        answer: Answer,
    },
    /// Left, crashed, or done.
    Gone,
}

impl Node {
    pub(super) fn acts(self) -> bool {
        matches!(self, Node::Running { .. } | Node::Stopping { .. })
    }

    pub(super) fn lid(self) -> Option<u8> {
        match self {
            Node::Running { lid }
            | Node::Stopping { lid, .. }
            | Node::Stopped { lid, .. }
            | Node::Answering { lid, .. } => Some(lid),
            Node::Waiting | Node::Gone => None,
        }
    }
}

/// A leader's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The marker names this candidate.
    HandedOver(u8),
    /// Nobody (or not `to`) waits: nothing stopped.
    NoCandidate,
    /// Stopped, then released instead.
    Released,
}

/// The request record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Req {
    /// No record.
    Absent,
    /// Posted, not accepted.
    Pending,
    /// Accepted for candidate `to`.
    Accepted {
        /// The candidate.
        to: u8,
    },
    /// Answered.
    Answered(Answer),
}

/// What the requester was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Told {
    /// Its withdrawal won: nothing happens.
    Withdrawn,
    /// The leader's answer.
    Answer(Answer),
    /// Too late to withdraw: the leader had accepted.
    Began,
    /// No answer; the lease says `to` leads now.
    Leads(u8),
    /// No answer; the lease says the addressed leadership ended otherwise.
    Ended,
}

/// The requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Requester {
    /// Has not asked yet.
    Idle,
    /// Waits; remembers the candidate it saw accepted.
    Waiting {
        /// Seen accepted for this candidate.
        accepted: Option<u8>,
    },
    /// Done: what it was told.
    Done(Told),
}

/// A write in flight: applied later, or never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Late {
    /// Nothing in flight.
    Nothing,
    /// pending -> accepted `to`.
    Accept(u8),
    /// `from` -> answered.
    Answer(Req, Answer),
    /// Delete the pending record.
    Withdraw,
}

/// The whole system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct State {
    /// The lease record.
    pub lease: Lease,
    /// The next leadership id.
    pub next_lid: u8,
    /// The nodes.
    pub nodes: [Node; NODES],
    /// Which nodes' candidate records are in the store.
    pub listed: [bool; NODES],
    /// The request record.
    pub req: Req,
    /// The leadership the request addresses.
    pub addr: u8,
    /// The candidate the request asks for (`None`: any).
    pub to: Option<u8>,
    /// The requester.
    pub requester: Requester,
    /// The write in flight.
    pub late: Late,
    /// History: acts on the request (a leader began stopping for it).
    pub acted: u8,
    /// History: the markers written, as (by leadership, to).
    pub marked: Option<(u8, u8)>,
    /// History: a marker named its own writer's node.
    pub self_handover: bool,
    /// History: a marker named another node than the request's `to`.
    pub wrong_target: bool,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The leader `n` reads the request and refuses, accepts, or acts.
    Serve(u8),
    /// As `Serve`, but the accept's answer is lost (it was applied).
    ServeAcceptLost(u8),
    /// As `Serve`, but the accept is in flight (applied later or never).
    ServeAcceptLate(u8),
    /// The services of `n` have stopped.
    FinishStop(u8),
    /// `n` lists the candidates again and writes the marker (or releases).
    HandOver(u8),
    /// `n` answers.
    Answer(u8),
    /// `n`'s answer is never written (lost, or it crashed first).
    AnswerLost(u8),
    /// `n`'s answer is in flight.
    AnswerLate(u8),
    /// `n` crashes.
    Crash(u8),
    /// Candidate `n` takes the marker naming it; `withdrawn`: its own
    /// candidate record is deleted (or the delete is lost).
    TakeMarker(u8, bool),
    /// Candidate `n` acquires the free key.
    Acquire(u8, bool),
    /// Candidate `n` stops waiting (withdraws its record).
    Leave(u8),
    /// The lease (or marker) expires.
    Expire,
    /// `n`'s candidate record expires.
    ExpireRecord(u8),
    /// The write in flight is applied.
    ApplyLate,
    /// The write in flight is never applied.
    DropLate,
    /// The requester posts, to the current leadership, `to` a candidate.
    Post(Option<u8>),
    /// The requester reads the request record.
    Read,
    /// The requester gives up: withdraws the pending bytes.
    GiveUp,
    /// As `GiveUp`, the withdrawal in flight.
    GiveUpLate,
    /// No answer came: the requester reads the outcome from the lease.
    Learn,
}
