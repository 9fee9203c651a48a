//! An assertion for drivers' own tests: the time left a driver reports.

use std::{ops::RangeInclusive, time::Duration};

use ttl_storage::{Entry, TimeLeft};

/// Asserts that `entry` holds `value` and reports a time left within
/// `within` (a driver that can read its store's expiry, checked against the
/// TTL it just wrote).
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::{Entry, TimeLeft};
///
/// let entry = Entry { value: b"v".to_vec(), time_left: TimeLeft::About(Duration::from_millis(19_500)) };
/// elections_testsuite::assert_time_left(&entry, b"v", Duration::from_secs(19)..=Duration::from_secs(20));
/// ```
///
/// # Panics
///
/// When the value differs, or the time left is not
/// [`TimeLeft::About`] a duration within `within`.
pub fn assert_time_left(entry: &Entry, value: &[u8], within: RangeInclusive<Duration>) {
    assert_eq!(entry.value, value, "the entry's value");
    match entry.time_left {
        TimeLeft::About(left) => {
            assert!(within.contains(&left), "{left:?} left, expected {within:?}")
        }
        other => panic!("time left {other:?}, expected about {within:?}"),
    }
}
