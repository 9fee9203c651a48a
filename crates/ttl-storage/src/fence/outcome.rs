//! What a fence answers: the outcomes of writes and appends, a register,
//! a log entry.

/// What a guarded write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceOutcome {
    /// The token was at least the highest seen: the value was written and
    /// the token recorded (it is now the highest).
    Accepted,
    /// A higher token was seen: nothing was written.
    Rejected {
        /// The highest token the resource has seen.
        highest: u64,
    },
}

impl FenceOutcome {
    /// True if the write was applied.
    pub fn is_accepted(self) -> bool {
        self == FenceOutcome::Accepted
    }
}

/// What a fenced append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The token was at least the highest seen: the entry was appended and
    /// the token recorded.
    Appended {
        /// The entry's sequence number, in accept order (see [`Numbering`]).
        seq: u64,
    },
    /// A higher token was seen: nothing was appended.
    Rejected {
        /// The highest token the resource has seen.
        highest: u64,
    },
}

impl AppendOutcome {
    /// The entry's sequence number if it was appended.
    pub fn seq(self) -> Option<u64> {
        match self {
            AppendOutcome::Appended { seq } => Some(seq),
            AppendOutcome::Rejected { .. } => None,
        }
    }
}

/// The register of one resource: the highest token seen and the value
/// written with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The highest token the resource has accepted.
    pub token: u64,
    /// The value of the last accepted write (empty if only appends raised
    /// the token).
    pub value: Vec<u8>,
}

/// One entry of a resource's fenced log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Its sequence number, in accept order (see [`Numbering`]).
    pub seq: u64,
    /// The fencing token the append carried.
    pub token: u64,
    /// The appended value.
    pub value: Vec<u8>,
}

/// How a fence numbers log entries. In both, a later-accepted entry has a
/// higher number and the log reads back in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// 1, 2, 3, … per resource. An append that failed after taking its
    /// number (outcome unknown) may leave a gap at that number, never a
    /// wrong or misplaced entry.
    Contiguous,
    /// Increasing, with gaps (etcd: the revision of the append).
    Increasing,
}
