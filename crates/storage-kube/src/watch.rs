//! [`crate::KubeStorage`]'s watch: a Lease watch of one name, from the
//! `resourceVersion` of a read.

use std::{
    pin::pin,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{WatchEvent, WatchParams};
use ttl_storage::{Key, kit::Op};

use crate::{KubeStorage, names::record_name};

/// How long after a record's expiry (as this storage counts it) the watch
/// completes, so the waiter's re-check finds it expired.
const AFTER_EXPIRY: Duration = Duration::from_millis(20);

/// The longest watch the API server is asked for (it closes watches after
/// at most its own limit; the waiter then re-checks and watches again).
const WATCH_SECS: u32 = 290;

/// Completes once the record of `key` may have been removed: at once if
/// there is no live record; else on the Lease's deletion, on a change
/// that leaves no live record, shortly after its expiry as this storage
/// counts it (a version seen unchanged for a whole lease), or when the
/// watch fails or ends (a spurious wake-up: the waiter re-checks).
///
/// The read happens after the call that made this future, and the watch
/// starts from the version that read saw, so a removal after the call is
/// never missed.
pub(crate) async fn removed(storage: KubeStorage, key: Key) {
    let name = record_name(key.as_str());
    let Ok(Some(lease)) = storage.read_lease(&name).await else {
        return;
    };
    let Some(mut expires) = live_until(&storage, &lease, &key) else {
        return;
    };
    let Some(version) = lease.metadata.resource_version.clone() else {
        return;
    };
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_SECS);
    let what = format!("WATCH Lease {name}");
    let Ok(Ok(events)) = storage
        .call(Op::Read, &what, storage.api.watch(&params, &version))
        .await
    else {
        return;
    };
    let mut events = pin!(events);
    loop {
        let wait = match expires {
            Some(at) => at.saturating_duration_since(Instant::now()) + AFTER_EXPIRY,
            None => Duration::from_secs(u64::from(WATCH_SECS) + 10),
        };
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(WatchEvent::Modified(lease) | WatchEvent::Added(lease))) => {
                    match live_until(&storage, &lease, &key) {
                        Some(until) => expires = until,
                        None => return,
                    }
                }
                Some(Ok(WatchEvent::Bookmark(_))) => {}
                // Deleted, an error, or the end of the watch.
                _ => return,
            },
            () = tokio::time::sleep(wait) => return,
        }
    }
}

/// `Some(until)` (`Some(None)`: never expires) while `lease` holds a live
/// record of `key` for `storage`.
fn live_until(storage: &KubeStorage, lease: &Lease, key: &Key) -> Option<Option<Instant>> {
    let live = storage.live_record(lease, key, Instant::now()).ok()??;
    Some(live.until)
}
