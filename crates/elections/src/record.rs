//! The bytes a leader stores: its value plus a per-acquisition nonce.
//!
//! Every acquisition writes `value ‖ '#' ‖ nonce` where the nonce is 24
//! lowercase hex digits: this elections instance's random 64-bit id and a
//! per-instance counter. So no two leaderships ever store the same bytes,
//! even when one process re-acquires a key with the same value, or two
//! processes use the same value.
//!
//! Why it matters: a write whose answer was lost may still be applied
//! *later* (a retried Paxos round, a delayed request). If a leader released
//! a key with a compare-and-delete that got delayed, then acquired the key
//! again with the same bytes, the late delete would remove its *new* record
//! and let another contender in while it still believed it led. The
//! deterministic simulation (`elections-sim`) found exactly this; with
//! unique record bytes the late delete matches nothing. It also makes
//! reading a record back a sound way to resolve outcome-unknown writes.

/// The separator between the value and the nonce.
pub const SEPARATOR: u8 = b'#';

/// Length of the nonce in bytes (hex digits).
pub const NONCE_LEN: usize = 24;

/// The stored bytes for `value` with nonce `(instance, counter)`.
pub(crate) fn encode(value: &[u8], instance: u64, counter: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 1 + NONCE_LEN);
    out.extend_from_slice(value);
    out.push(SEPARATOR);
    out.extend_from_slice(format!("{instance:016x}{counter:08x}").as_bytes());
    out
}

/// The leader's value in a stored record: the record without its nonce.
/// Records not written by elections are returned whole.
///
/// ```
/// assert_eq!(elections::record::leader_value(b"10.0.0.7#0123456789abcdef00000001"), b"10.0.0.7");
/// assert_eq!(elections::record::leader_value(b"written by hand"), b"written by hand");
/// ```
pub fn leader_value(record: &[u8]) -> &[u8] {
    let Some(split) = record.len().checked_sub(NONCE_LEN + 1) else {
        return record;
    };
    let (value, suffix) = record.split_at(split);
    let is_nonce = suffix[0] == SEPARATOR
        && suffix[1..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if is_nonce { value } else { record }
}

/// The nonce of a stored record (24 hex digits), which names one
/// leadership: `None` for records not written by elections.
///
/// ```
/// let record = b"10.0.0.7#0123456789abcdef00000001";
/// assert_eq!(elections::record::nonce(record), Some(&b"0123456789abcdef00000001"[..]));
/// assert_eq!(elections::record::nonce(b"written by hand"), None);
/// ```
pub fn nonce(record: &[u8]) -> Option<&[u8]> {
    let value = leader_value(record);
    if value.len() == record.len() {
        return None;
    }
    record.get(value.len() + 1..)
}

/// The elections instance that wrote `record` (the first 16 hex digits of
/// its nonce); `None` for records not written by elections.
pub(crate) fn instance_of(record: &[u8]) -> Option<&str> {
    std::str::from_utf8(nonce(record)?.get(..16)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = encode(b"addr", 0xdead_beef, 7);
        assert_eq!(r.len(), 4 + 1 + NONCE_LEN);
        assert_eq!(leader_value(&r), b"addr");
        assert_eq!(leader_value(&encode(b"", 1, 1)), b"");
        assert_ne!(encode(b"a", 1, 1), encode(b"a", 1, 2));
        assert_ne!(encode(b"a", 1, 1), encode(b"a", 2, 1));
        assert_eq!(leader_value(b"short"), b"short");
        assert_eq!(nonce(&r), Some(&r[5..]));
        assert_eq!(instance_of(&r), Some("00000000deadbeef"));
        assert_eq!(instance_of(b"plain"), None);
    }
}
