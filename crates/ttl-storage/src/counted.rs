//! The optional counted write ([`TtlStorage::write_counted`](crate::TtlStorage::write_counted)):
//! a conditional write of a record and the advance of a counter record,
//! applied as one.

use crate::{Key, StorageError, Ttl};

/// A conditional write of `value` under `key` together with the advance of
/// the counter under `counter`, both applied by one durable write or
/// neither. See [`TtlStorage::write_counted`](crate::TtlStorage::write_counted).
#[derive(Debug, Clone, Copy)]
pub struct CountedWrite<'a> {
    /// The record's key.
    pub key: &'a Key,
    /// `None`: write only if `key` holds no live record (as
    /// `insert_if_not_exists`); `Some(old)`: only if its live record holds
    /// exactly `old` (as `compare_and_swap`).
    pub expected: Option<&'a [u8]>,
    /// The record's new value.
    pub value: &'a [u8],
    /// The record's TTL, counted as for the plain writes.
    pub ttl: Ttl,
    /// The counter's key: a record that never expires holding a decimal
    /// `u64`; written with [`Ttl::NEVER`].
    pub counter: &'a Key,
    /// The least value the counter may take ([`next_count`]).
    pub floor: u64,
    /// The largest value the counter may take.
    pub max: u64,
}

/// What a counted write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Counted {
    /// The record was written and the counter advanced to this value.
    Written(u64),
    /// The record's condition did not hold: nothing was written.
    Refused,
    /// The driver cannot apply both as one write: nothing was done, the
    /// caller does the steps itself.
    Unsupported,
}

/// The counter's next value: `max(current + 1, floor)`, or `floor` for a
/// counter that does not exist yet (a floor above `max` counts as `max`). A counter that does not hold a decimal
/// `u64`, or whose next value would pass `max`, is a permanent error.
///
/// ```
/// use ttl_storage::{Key, counted::next_count};
/// let counter = Key::new("c").unwrap();
/// assert_eq!(next_count(&counter, None, 5, 100).unwrap(), 5);
/// assert_eq!(next_count(&counter, Some(b"7"), 5, 100).unwrap(), 8);
/// assert_eq!(next_count(&counter, Some(b"7"), 50, 100).unwrap(), 50);
/// assert!(next_count(&counter, Some(b"100"), 5, 100).is_err());
/// assert!(next_count(&counter, Some(b"x"), 5, 100).is_err());
/// ```
///
/// # Errors
///
/// [`ErrorKind::Permanent`](crate::ErrorKind::Permanent) as said above.
pub fn next_count(
    counter: &Key,
    current: Option<&[u8]>,
    floor: u64,
    max: u64,
) -> Result<u64, StorageError> {
    let Some(bytes) = current else {
        return Ok(floor.min(max));
    };
    let n = std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            StorageError::permanent(format!(
                "counter {counter} holds {bytes:?}, not a decimal u64: the record was written by something else"
            ))
        })?;
    n.checked_add(1)
        .filter(|&next| next <= max)
        .map(|next| next.max(floor.min(max)))
        .ok_or_else(|| {
            StorageError::permanent(format!(
                "counter {counter} is exhausted (at {n}, max {max})"
            ))
        })
}
