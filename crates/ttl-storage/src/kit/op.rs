//! The operation kind of a failed request, and the lost-answer rule.

use crate::ErrorKind;

/// What a request does: decides whether a lost answer is "not applied" or
/// "may have been applied".
///
/// The rule every driver follows: an answer lost *after* a write was sent
/// (a timeout, a dropped connection, a coordinator that gave up) leaves
/// the write's outcome unknown ([`ErrorKind::OutcomeUnknown`]); a read
/// changes nothing, so losing its answer is only
/// [`ErrorKind::Transient`].
///
/// ```
/// use ttl_storage::{ErrorKind, kit::Op};
///
/// assert_eq!(Op::Write.lost_answer(), ErrorKind::OutcomeUnknown);
/// assert_eq!(Op::Read.lost_answer(), ErrorKind::Transient);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A conditional write (insert, compare-and-swap, compare-and-delete;
    /// a transaction or a lightweight transaction that writes).
    Write,
    /// A read, a schema query, or anything else that changes no record the
    /// caller can see.
    Read,
}

impl Op {
    /// The kind of an error after which the request may have been executed
    /// (its answer was lost once it was sent).
    pub fn lost_answer(self) -> ErrorKind {
        match self {
            Op::Write => ErrorKind::OutcomeUnknown,
            Op::Read => ErrorKind::Transient,
        }
    }
}
