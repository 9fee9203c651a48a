//! Cases of the optional watch capability ([`ttl_storage::TtlStorage::watch`]).
//!
//! A driver without it answers `WatchUnsupported`: then
//! [`storage_watch_support_is_reported`] checks that the answer is stable
//! and the other watch cases print that the capability is absent and assert
//! nothing more. A driver that declares it (`testsuite!(..., watch =
//! required)`) fails every watch case if it answers `WatchUnsupported`.

use std::time::Duration;

use ttl_storage::{Key, Ttl, Watch, WatchUnsupported};

use crate::{Ctx, ctx::sleep};

/// The watch of `key`, or `None` (after reporting it) when the driver has no
/// watch capability and the suite was not told to require it.
fn watch_or_skip(ctx: &Ctx, key: &Key, case: &str) -> Option<Watch> {
    match ctx.storage.watch(key) {
        Ok(watch) => Some(watch),
        Err(WatchUnsupported) => {
            assert!(
                !ctx.watch_required(),
                "{case}: the driver reports watch as unsupported, but the suite requires it"
            );
            eprintln!(
                "{case}: capability absent: the driver does not support watch (checked: it says so)"
            );
            None
        }
    }
}

/// Long enough that an expiry cannot explain a wake-up.
const LONG_TTL: Duration = Duration::from_secs(120);

/// Re-watches `key` (wake-ups may be spurious) until it holds no live record,
/// within `bound`; panics with `what` otherwise.
async fn wait_until_gone(ctx: &Ctx, key: &Key, bound: Duration, what: &str) {
    let waiting = async {
        loop {
            let watch = ctx.storage.watch(key).expect("watch worked a moment ago");
            watch.await;
            if ctx.storage.get(key).await.unwrap().is_none() {
                return;
            }
        }
    };
    tokio::time::timeout(bound, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: the watch did not complete within {bound:?}"));
}

/// The driver's answer about watching is stable, and when it supports it, a
/// watch of a key without a live record completes without an event.
pub async fn storage_watch_support_is_reported(ctx: Ctx) {
    let k = ctx.key("absent");
    let first = ctx.storage.watch(&k);
    let second = ctx.storage.watch(&k);
    assert_eq!(
        first.is_ok(),
        second.is_ok(),
        "the driver must answer the same for every watch"
    );
    match first {
        Err(WatchUnsupported) => {
            assert!(
                !ctx.watch_required(),
                "the driver reports watch as unsupported, but the suite requires it"
            );
            assert!(WatchUnsupported.to_string().contains("poll"));
            eprintln!(
                "storage_watch_support_is_reported: capability absent (reported as unsupported, as it should be)"
            );
        }
        Ok(watch) => {
            tokio::time::timeout(ctx.margin() + ctx.slack(), watch)
                .await
                .expect("a watch of an absent key must complete at once");
        }
    }
}

/// A delete wakes a waiter long before the record would expire.
pub async fn storage_watch_wakes_on_delete(ctx: Ctx) {
    let k = ctx.key("k");
    let ttl = Ttl::expiring(LONG_TTL).unwrap();
    assert!(
        ctx.storage
            .insert_if_not_exists(&k, b"a", ttl)
            .await
            .unwrap()
    );
    let Some(watch) = watch_or_skip(&ctx, &k, "storage_watch_wakes_on_delete") else {
        return;
    };
    let storage = ctx.storage.clone();
    let key = k.clone();
    let deleter = tokio::spawn(async move {
        sleep(Duration::from_millis(200)).await;
        assert!(storage.compare_and_delete(&key, b"a").await.unwrap());
    });
    // The first watch may wake spuriously before the delete; then watch again.
    let bound = LONG_TTL / 4;
    tokio::time::timeout(bound, watch)
        .await
        .expect("the delete did not wake the watch");
    wait_until_gone(&ctx, &k, bound, "delete").await;
    deleter.await.unwrap();
}

/// A record's expiry wakes a waiter, without any write.
pub async fn storage_watch_wakes_on_expiry(ctx: Ctx) {
    let k = ctx.key("k");
    assert!(
        ctx.storage
            .insert_if_not_exists(&k, b"a", ctx.ttl())
            .await
            .unwrap()
    );
    if watch_or_skip(&ctx, &k, "storage_watch_wakes_on_expiry").is_none() {
        return;
    }
    let bound = ctx.ttl_duration() + ctx.slack() + ctx.margin();
    wait_until_gone(&ctx, &k, bound, "expiry").await;
}
