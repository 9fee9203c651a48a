//! The optional feed of a record's writes ([`ttl_storage::TtlStorage::changes`]).
//! A driver without it answers `ChangesUnsupported`: the case prints that
//! the capability is absent and asserts nothing more.

use std::time::Duration;

use futures::StreamExt;
use ttl_storage::{Change, Changes, Counted, CountedWrite, Ttl};

use crate::Ctx;

/// The next change within `bound`, skipping a repeat of `last` (a renewal
/// the driver chose to report).
async fn next(changes: &mut Changes, bound: Duration, last: Option<&[u8]>, what: &str) -> Change {
    loop {
        let change = tokio::time::timeout(bound, changes.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: no change reported within {bound:?}"))
            .unwrap_or_else(|| panic!("{what}: the feed ended"));
        match &change {
            Change::Written { value, .. } if Some(value.as_slice()) == last => continue,
            _ => return change,
        }
    }
}

fn written(value: &[u8], count: Option<u64>) -> Change {
    Change::Written {
        value: value.to_vec(),
        count,
    }
}

/// Armed first; then, in order: an insert's value, a swap's new value (not
/// the renewal before it), a counted write's value with the counter it
/// set, a value too long for the driver to carry (reported, or an
/// interruption the follower re-reads after), and the delete.
pub async fn storage_changes_report_every_value_and_delete(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("followed");
    let c = ctx.key("followed-counter");
    let ttl = Ttl::from_secs(120).expect("valid");
    let bound = ctx.margin() + ctx.slack() + Duration::from_secs(5);
    let Ok(mut changes) = s.changes(&k, Some(&c)) else {
        eprintln!(
            "storage_changes_report_every_value_and_delete: capability absent (reported as unsupported)"
        );
        return;
    };
    assert_eq!(
        next(&mut changes, bound, None, "arming").await,
        Change::Armed
    );

    assert!(s.insert_if_not_exists(&k, b"a", ttl).await.unwrap());
    assert_eq!(
        next(&mut changes, bound, None, "insert").await,
        written(b"a", None)
    );
    assert!(s.compare_and_swap(&k, b"a", b"a", ttl).await.unwrap());
    assert!(s.compare_and_swap(&k, b"a", b"b", ttl).await.unwrap());
    assert_eq!(
        next(&mut changes, bound, Some(b"a"), "swap").await,
        written(b"b", None)
    );
    let mut last = b"b".to_vec();
    let counted = s
        .write_counted(CountedWrite {
            key: &k,
            expected: Some(b"b"),
            value: b"c",
            ttl,
            counter: &c,
            floor: 7,
            max: 1_000_000,
        })
        .await
        .unwrap();
    match counted {
        Counted::Written(n) => {
            assert_eq!(n, 7);
            assert_eq!(
                next(&mut changes, bound, Some(&last), "counted write").await,
                written(b"c", Some(7))
            );
            last = b"c".to_vec();
        }
        Counted::Unsupported => {}
        Counted::Refused => panic!("the counted write was refused"),
        other => panic!("unexpected {other:?}"),
    }
    let long = vec![b'x'; 64 * 1024];
    assert!(s.compare_and_swap(&k, &last, &long, ttl).await.unwrap());
    match next(&mut changes, bound, Some(&last), "long value").await {
        Change::Written { value, count } => {
            assert!(value == long, "a long value came back altered");
            assert_eq!(count, None);
        }
        Change::Interrupted => {
            assert_eq!(
                next(&mut changes, bound, None, "re-arming").await,
                Change::Armed
            );
        }
        other => panic!("long value: {other:?}"),
    }
    assert!(s.compare_and_delete(&k, &long).await.unwrap());
    assert_eq!(
        next(&mut changes, bound, Some(&long), "delete").await,
        Change::Deleted
    );
}
