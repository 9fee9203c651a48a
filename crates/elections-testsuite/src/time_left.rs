//! An assertion for drivers' own tests: the time left a driver reports.

use std::{ops::RangeInclusive, time::Duration};

use ttl_storage::{Entry, Key, TimeLeft, Ttl, TtlStorage};

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

/// Reads `key` from `storage` and asserts as [`assert_time_left`]: it
/// holds `value` with a time left within `within`.
///
/// # Panics
///
/// When the read fails, the record is missing, or the assertion fails.
pub async fn assert_entry_time_left(
    storage: &impl TtlStorage,
    key: &Key,
    value: &[u8],
    within: RangeInclusive<Duration>,
) {
    match storage.get_entry(key).await {
        Ok(Some(entry)) => assert_time_left(&entry, value, within),
        Ok(None) => panic!("{key} is missing"),
        Err(err) => panic!("reading {key}: {err}"),
    }
}

/// The round trip drivers that know their expiry share: a record written
/// with a 20 s TTL reports a time left within `within`, then
/// [`TimeLeft::Never`] after a swap to [`Ttl::NEVER`]; the record is
/// deleted at the end.
///
/// # Panics
///
/// When a storage call fails or an entry differs.
pub async fn assert_time_left_round_trip(
    storage: &dyn TtlStorage,
    key: &Key,
    within: RangeInclusive<Duration>,
) {
    let twenty = Ttl::from_secs(20).expect("a valid TTL");
    assert!(
        storage
            .insert_if_not_exists(key, b"v", twenty)
            .await
            .expect("insert"),
        "the key was free"
    );
    let entry = storage.get_entry(key).await.expect("get_entry");
    assert_time_left(&entry.expect("a live record"), b"v", within);
    assert!(
        storage
            .compare_and_swap(key, b"v", b"w", Ttl::NEVER)
            .await
            .expect("swap")
    );
    let entry = storage.get_entry(key).await.expect("get_entry");
    assert_eq!(entry.expect("a live record").time_left, TimeLeft::Never);
    assert!(storage.compare_and_delete(key, b"w").await.expect("delete"));
    assert_eq!(storage.get_entry(key).await.expect("get_entry"), None);
}

/// The case every driver whose engine expires records itself shares: the
/// engine's own expiry follows the TTL written. `engine_left` reads what
/// the engine says is left of `key` (its PTTL, its lease's TTL, its
/// `expires_at - now()`), `None` when the record has no expiry.
///
/// A 20 s record has an engine expiry within `within`, and `get_entry`
/// agrees; a swap to [`Ttl::NEVER`] removes the expiry; a swap to a 1 s
/// TTL sets one again (under `settle`), and the record is gone `settle`
/// later (the engine's expiry, plus its granularity and minimum: etcd
/// grants no lease under its own floor); the key can then be taken anew.
///
/// # Panics
///
/// When a storage call fails or the engine disagrees.
pub async fn assert_engine_expiry_follows_ttl<S, F, Fut>(
    storage: &S,
    key: &Key,
    engine_left: F,
    within: RangeInclusive<Duration>,
    settle: Duration,
) where
    S: TtlStorage + ?Sized,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<Duration>>,
{
    let ttl = |secs| Ttl::from_secs(secs).expect("a valid TTL");
    assert!(
        storage
            .insert_if_not_exists(key, b"v", ttl(20))
            .await
            .expect("insert")
    );
    let left = engine_left().await.expect("a 20 s record has an expiry");
    assert!(within.contains(&left), "the engine says {left:?} left");
    match storage.get_entry(key).await {
        Ok(Some(entry)) => assert_time_left(&entry, b"v", within),
        other => panic!("reading {key}: {other:?}"),
    }

    assert!(
        storage
            .compare_and_swap(key, b"v", b"w", Ttl::NEVER)
            .await
            .expect("swap")
    );
    assert_eq!(engine_left().await, None, "Ttl::NEVER leaves no expiry");
    let entry = storage.get_entry(key).await.expect("get_entry");
    assert_eq!(entry.expect("a live record").time_left, TimeLeft::Never);

    assert!(
        storage
            .compare_and_swap(key, b"w", b"x", ttl(1))
            .await
            .expect("swap")
    );
    let left = engine_left().await.expect("a 1 s record has an expiry");
    assert!(
        left < settle,
        "the engine says {left:?} left of a 1 s record"
    );
    tokio::time::sleep(settle).await;
    assert_eq!(storage.get(key).await.expect("get"), None, "expired");
    assert!(
        storage
            .insert_if_not_exists(key, b"y", ttl(5))
            .await
            .expect("insert")
    );
}
