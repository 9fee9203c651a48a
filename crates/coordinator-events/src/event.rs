//! What subscribers receive: events numbered by their destination, gaps,
//! and the state of the pod's broadcast channel.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use coordinator::{DestinationId, MemberId};

/// Where an event stands in its destination's numbering.
///
/// `seq` counts the destination's events from 1 within one `generation`.
/// A generation starts when the destination's counter is created (its
/// first subscription or event, or after Valkey lost the counter: a
/// restart without persistence); its value is the creation time on
/// Valkey's clock, in microseconds since the Unix epoch. Standalone, it is
/// the time the destination was first used in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The numbering's generation.
    pub generation: u64,
    /// The event's number within it (0: before the first event).
    pub seq: u64,
}

/// One event of a destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The destination it belongs to.
    pub destination: DestinationId,
    /// Its number in the destination's sequence.
    pub position: Position,
    /// The pod that published it.
    pub publisher: MemberId,
    /// The publisher's clock when it published, microseconds since the Unix
    /// epoch (for latency: the pods' clocks may differ).
    pub sent_micros: u64,
    /// The application's bytes.
    pub payload: Bytes,
}

/// Events a subscriber did not receive, and never will.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gap {
    /// The events numbered `first..=last` of the current generation.
    Missed {
        /// The first missed number.
        first: u64,
        /// The last missed number.
        last: u64,
    },
    /// The destination's numbering restarted or went back (Valkey lost its
    /// counter, or its last increments in a failover): an unknown number
    /// of events may have been missed, and numbers may be given again;
    /// they continue in `generation`.
    Restarted {
        /// The new generation.
        generation: u64,
    },
}

impl Gap {
    /// How many events were missed, when that is known.
    pub fn missed(&self) -> Option<u64> {
        match self {
            Gap::Missed { first, last } => Some(last.saturating_sub(*first) + 1),
            Gap::Restarted { .. } => None,
        }
    }
}

/// What a [`crate::Subscription`] yields, in order.
///
/// Every number of the destination's sequence from the subscription's
/// start on is either delivered once ([`Notice::Event`]) or covered by
/// exactly one [`Notice::Gap`], in increasing order: silence means no
/// events, never lost ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// An event.
    Event(Arc<Event>),
    /// Events that were lost on the way (a cut from Valkey, a subscriber
    /// too slow for the buffer, a restarted counter).
    Gap(Gap),
    /// The pod lost its broadcast channel (Valkey unreachable): events may
    /// be missed until [`Notice::Resumed`]; the gap is reported then.
    Interrupted,
    /// The channel is back; any gap follows at once.
    Resumed,
}

/// A publish's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The event's number; `None` standalone when nobody in this process
    /// subscribes to the destination (the event went nowhere).
    pub position: Option<Position>,
    /// Pods with a live entry in the subscription map for the destination
    /// (this one included); standalone: 1 if anyone here listens.
    pub pods: u64,
    /// Pods the broadcast reached (subscribed connections); fewer than
    /// `pods` means some subscribed pod is cut off and will see a gap.
    pub reached: u64,
}

/// Microseconds since the Unix epoch on this machine's clock.
pub(crate) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The age of an event sent at `sent_micros` (zero if the sender's clock
/// is ahead).
pub(crate) fn age(sent_micros: u64) -> Duration {
    Duration::from_micros(now_micros().saturating_sub(sent_micros))
}
