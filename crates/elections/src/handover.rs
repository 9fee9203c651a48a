//! Hand-over markers: the record a leader leaves when it hands the key to a
//! named candidate. See [`crate::Leadership::hand_over`].

/// Every value that starts with this prefix is reserved: a leader's value
/// may not start with it, so no leader record is ever mistaken for a marker.
pub(crate) const RESERVED_PREFIX: &[u8] = b"\0elections/";

/// The prefix of a hand-over marker; the candidate's record bytes follow.
const MARKER_PREFIX: &[u8] = b"\0elections/reserved-for\0";

/// True when `record` is a hand-over marker.
pub(crate) fn is_marker(record: &[u8]) -> bool {
    record.starts_with(MARKER_PREFIX)
}
