//! Hand-over requests through the store: another process (an operator's
//! `vvm-host handover`) asks the VVM leading key `index` to hand its
//! leadership to a waiting candidate ([`elections::Leadership::hand_over`]).
//!
//! Two records beside the lease ([`crate::keys`]), both short-lived:
//!
//! - the **request** `__vvm__/handover/{lease key}`, one at a time
//!   (insert-if-not-exists). It names the leadership it addresses: the
//!   nonce of the lease record ([`elections::record::nonce`]), unique per
//!   leadership. Only that leadership serves it; a later leader ignores it.
//!   It goes through three states, each written by compare-and-swap on the
//!   state before, so every transition happens at most once:
//!   1. `hreq2 <id> <nonce> <to>` **pending** (by the requester; `to`
//!      empty: any candidate);
//!   2. `hacc2 <id> <nonce> <candidate>` **accepted** (by the leader,
//!      *before* it stops anything: its commitment to act);
//!   3. `hrep2 <id> <nonce> <answer>` **answered** (by the leader: the
//!      outcome, see [`Answer`]); a refusal goes from pending straight to
//!      answered, and nothing is stopped.
//! - the **bell** `__vvm__/bell/{lease key}`: the leader keeps it while it
//!   leads; the requester deletes it after writing the request, which
//!   wakes the leader at once on drivers that watch. Without a watch the
//!   leader reads the request every `min(d/4, 1 s)`.
//!
//! What that gives the requester ([`Requester`]):
//!
//! - **acted on at most once**: a leader acts only on a request it moved to
//!   *accepted* for its own leadership, and acting ends that leadership;
//! - **withdrawal is decided by the store**: the requester withdraws with
//!   compare-and-delete of the *pending* bytes, the leader accepts with
//!   compare-and-swap of the same bytes: exactly one wins. A withdrawal
//!   that lost finds the record accepted or answered: the leader began;
//! - **the answer is what happened**: the answer is written after the
//!   fact; if it is never written (the leader crashed, the write failed),
//!   the requester reads the outcome from the lease itself
//!   ([`Requester::outcome_from_store`]): the accepted candidate leads, or
//!   the addressed leadership ended without handing over.
//!
//! The leader stops its services before the lease moves, as on shutdown:
//! the hand-over is the release's safety argument plus a marker that only
//! the named candidate may take (see `docs/guarantees.md`).

mod listener;
mod record;
mod requester;

pub(crate) use listener::{Accept, Listener, Served};
pub use record::{Addressed, Answer, Request, State};
pub use requester::{Requester, StoreOutcome, Withdrawal};

use std::time::Duration;

/// How long a request and its answer live at least: a requester that gave
/// up leaves nothing behind for much longer (a pending request lives this
/// long after the requester's own time limit).
pub const REQUEST_TTL: Duration = Duration::from_secs(60);

/// The address part of a VVM's leadership value (`address#pid…`): what
/// a hand-over request's `to` names.
pub fn address_of(value: &[u8]) -> &[u8] {
    match value.iter().rposition(|b| *b == b'#') {
        Some(at) => &value[..at],
        None => value,
    }
}

/// True when the candidate value `value` is the one `to` asks for: its
/// whole value, or its address. The requester's pre-check and the leader
/// use this one test.
pub fn matches(value: &[u8], to: &str) -> bool {
    value == to.as_bytes() || address_of(value) == to.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(address_of(b"10.0.0.7#pid12-abcd"), b"10.0.0.7");
        assert_eq!(address_of(b"plain"), b"plain");
        assert!(matches(b"10.0.0.7#pid12-abcd", "10.0.0.7"));
        assert!(matches(b"10.0.0.7#pid12-abcd", "10.0.0.7#pid12-abcd"));
        assert!(!matches(b"10.0.0.77#pid12-abcd", "10.0.0.7"));
    }
}
