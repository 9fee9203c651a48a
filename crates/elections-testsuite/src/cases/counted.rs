//! The optional counted write ([`ttl_storage::TtlStorage::write_counted`]):
//! its contract on the driver, and elections' one-write acquisition with
//! its unknown outcomes. A driver without the capability passes both (the
//! first checks it wrote nothing, the second then exercises the plain
//! steps).
use elections::{fencing, record};
use ttl_storage::{Counted, CountedWrite, ErrorKind, Key, Ttl};

use crate::{Ctx, Fault, Op, ctx::sleep};

fn counted<'a>(
    key: &'a Key,
    expected: Option<&'a [u8]>,
    value: &'a [u8],
    ttl: Ttl,
    counter: &'a Key,
    floor: u64,
) -> CountedWrite<'a> {
    CountedWrite {
        key,
        expected,
        value,
        ttl,
        counter,
        floor,
        max: 1_000_000,
    }
}

/// `write_counted` writes the record and advances the counter together, or
/// neither: refused on a failed condition, a permanent error on a counter
/// that cannot advance; the record expires with its TTL, the counter never.
pub async fn storage_write_counted_is_all_or_nothing(ctx: Ctx) {
    let s = &ctx.storage;
    let ttl = ctx.ttl();
    let k = ctx.key("k");
    let c = ctx.key("c");
    let first = s
        .write_counted(counted(&k, None, b"v1", ttl, &c, 100))
        .await
        .unwrap();
    if first == Counted::Unsupported {
        assert_eq!(
            s.get(&k).await.unwrap(),
            None,
            "unsupported wrote the record"
        );
        assert_eq!(
            s.get(&c).await.unwrap(),
            None,
            "unsupported wrote the counter"
        );
        return;
    }
    assert_eq!(
        first,
        Counted::Written(100),
        "a new counter starts at the floor"
    );
    assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(s.get(&c).await.unwrap().as_deref(), Some(&b"100"[..]));

    // Refused: a live record (insert), another value (swap); nothing moves.
    let refused = [
        counted(&k, None, b"v2", ttl, &c, 1),
        counted(&k, Some(b"other"), b"v2", ttl, &c, 1),
    ];
    for write in refused {
        assert_eq!(s.write_counted(write).await.unwrap(), Counted::Refused);
        assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(&b"v1"[..]));
        assert_eq!(s.get(&c).await.unwrap().as_deref(), Some(&b"100"[..]));
    }

    // Swap: counter + 1, or the floor when larger.
    let swap = counted(&k, Some(b"v1"), b"v2", ttl, &c, 1);
    assert_eq!(s.write_counted(swap).await.unwrap(), Counted::Written(101));
    let swap = counted(&k, Some(b"v2"), b"v3", ttl, &c, 5000);
    assert_eq!(s.write_counted(swap).await.unwrap(), Counted::Written(5000));
    assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(&b"v3"[..]));
    assert_eq!(s.get(&c).await.unwrap().as_deref(), Some(&b"5000"[..]));

    // A counter that cannot advance: nothing is written.
    let (k2, bad, full) = (ctx.key("k2"), ctx.key("bad"), ctx.key("full"));
    assert!(
        s.insert_if_not_exists(&bad, b"x1", Ttl::NEVER)
            .await
            .unwrap()
    );
    assert!(
        s.insert_if_not_exists(&full, b"1000000", Ttl::NEVER)
            .await
            .unwrap()
    );
    for counter in [&bad, &full] {
        let err = s
            .write_counted(counted(&k2, None, b"v", ttl, counter, 1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
        assert_eq!(s.get(&k2).await.unwrap(), None, "written despite {err}");
    }
    assert_eq!(
        s.get(&full).await.unwrap().as_deref(),
        Some(&b"1000000"[..])
    );

    // The record expires with its TTL; the counter stays.
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert_eq!(s.get(&c).await.unwrap().as_deref(), Some(&b"5000"[..]));
    let again = counted(&k, None, b"v4", ttl, &c, 1);
    assert_eq!(
        s.write_counted(again).await.unwrap(),
        Counted::Written(5001)
    );
}

/// Elections' acquisition through `write_counted` (let through the fault
/// injector): an unknown outcome that was applied leads (the token taken
/// again, larger), one that was not is retried, a transient error fails
/// the acquisition with the key left free; every token exceeds the last.
pub async fn elections_counted_acquire_outcome_unknown(ctx: Ctx) {
    let d = ctx.lease();
    let (e, _killer, faulty) = ctx.faulty_elections();
    faulty.set_counted(true);
    let k = ctx.key("leader");
    let counter = fencing::counter_key(&k).unwrap();
    let mut last = 0;
    let mut check = |token: u64, what: &str| {
        assert!(token > last, "{what}: token {token} <= {last}");
        last = token;
    };

    let l = e.acquire_leadership(&k, "plain", d).await.unwrap().unwrap();
    check(l.fencing_token(), "no fault");
    e.release_leadership(&k).await;

    faulty.inject(Op::Counted, Fault::UnknownApplied, 1);
    let l = e.acquire_leadership(&k, "applied", d).await.unwrap();
    let l = l.expect("an applied counted write must end in leadership");
    check(l.fencing_token(), "unknown, applied");
    let stored = ctx.storage.get(&counter).await.unwrap().unwrap();
    assert_eq!(stored, l.fencing_token().to_string().into_bytes());
    e.release_leadership(&k).await;

    faulty.inject(Op::Counted, Fault::UnknownNotApplied, 1);
    let l = e.acquire_leadership(&k, "retried", d).await.unwrap();
    let l = l.expect("a counted write not applied is retried");
    check(l.fencing_token(), "unknown, not applied");
    assert_eq!(
        record::leader_value(&ctx.storage.get(&k).await.unwrap().unwrap()),
        b"retried"
    );
    e.release_leadership(&k).await;

    faulty.inject(Op::Counted, Fault::Transient, 1);
    assert!(e.acquire_leadership(&k, "failed", d).await.is_err());
    assert_eq!(
        ctx.storage.get(&k).await.unwrap(),
        None,
        "the key stays free"
    );
    let l = e.acquire_leadership(&k, "after", d).await.unwrap().unwrap();
    check(l.fencing_token(), "after a failure");
    assert!(faulty.calls(Op::Counted) >= 5);
    e.cleanup().await;
}
