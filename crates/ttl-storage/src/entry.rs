//! [`Entry`]: a live record with what the store knows of its remaining life.

use std::time::Duration;

/// How long a live record has left, as far as its store can tell.
///
/// For reports (`vvm-host status`, dashboards), never for safety decisions:
/// the figure is read on the store's clock, is already stale when it reaches
/// the caller, and elections never rely on it (they count a lease from the
/// start of the call that wrote it, on their own monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeLeft {
    /// The record never expires (written with [`crate::Ttl::NEVER`]).
    Never,
    /// About this long until the record expires (the store's estimate at the
    /// read, rounded to the driver's granularity).
    About(Duration),
    /// The driver cannot tell without more work than a read (the default of
    /// [`crate::TtlStorage::get_entry`]).
    Unknown,
}

/// A live record: its value and its remaining life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value, byte for byte as written.
    pub value: Vec<u8>,
    /// How long the record has left.
    pub time_left: TimeLeft,
}

impl Entry {
    /// An entry whose remaining life the store cannot tell.
    pub fn unknown_time_left(value: Vec<u8>) -> Self {
        Self {
            value,
            time_left: TimeLeft::Unknown,
        }
    }
}
