//! Killer cases: armed at the right moments with the right deadlines, fired
//! when the store hangs or a loss is never released, disarmed by a release.
use std::{sync::Arc, time::Duration};

use elections::{ArmReason, Elections, EndReason, RecordingKiller};
use tokio::time::Instant;
use ttl_storage::Key;

use crate::{Ctx, ctx::sleep};

use super::elections::{acquire, count, delete_behind, ended_within};

/// The killer is armed at the right moments with the right deadlines.
pub async fn elections_killer_deadlines(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let before = Instant::now();
    let _l = acquire(&e, &k, "me", d).await;
    sleep(d / 4 * 3 + d / 8).await;
    e.release_leadership(&k).await;
    let events = killer.events();
    assert!(events.iter().all(|e| e.key == k));
    let first = &events[0];
    assert_eq!(first.reason, ArmReason::Acquired);
    assert!(first.basis >= before);
    assert_eq!(first.requested, Some(first.basis + d * 4 / 5));
    assert_eq!(first.deadline, first.requested);
    let mut deadline = first.deadline;
    let mut last_success = first.basis;
    for ev in &events[1..] {
        match ev.reason {
            ArmReason::BeforeRenewal => {
                assert_eq!(ev.requested, Some(ev.basis + d * 3 / 4));
                assert!(ev.basis >= last_success + d / 4, "renewed early: {ev:?}");
                assert_eq!(
                    ev.deadline,
                    deadline.min(ev.requested),
                    "a pre-write arm extended the deadline"
                );
            }
            ArmReason::Renewed => {
                assert_eq!(ev.requested, Some(ev.basis + d * 4 / 5));
                assert_eq!(ev.deadline, ev.requested);
                last_success = ev.basis;
            }
            ArmReason::Disarmed => assert_eq!(ev.deadline, None),
            ArmReason::Acquired => panic!("acquired twice: {ev:?}"),
        }
        deadline = ev.deadline;
    }
    assert_eq!(count(&events, ArmReason::Renewed), 3, "{events:#?}");
    assert_eq!(count(&events, ArmReason::BeforeRenewal), 3, "{events:#?}");
    assert_eq!(events.last().map(|e| e.reason), Some(ArmReason::Disarmed));
    assert!(killer.kills().is_empty());
    e.cleanup().await;
}

/// When the store hangs, the killer fires 0.8 d after the last successful
/// write started, unless the owner releases first.
pub async fn elections_killer_fires_when_storage_hangs(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", d).await;
    faulty.set_latency(Some(d * 10));
    let reason = ended_within(&l, d * 2).await;
    assert!(matches!(reason, EndReason::Expired), "{reason:?}");
    sleep(d).await;
    let kills = killer.kills();
    assert_eq!(kills.len(), 1, "{kills:?}");
    let events = killer.events();
    let last_success = events
        .iter()
        .filter(|e| matches!(e.reason, ArmReason::Acquired | ArmReason::Renewed))
        .map(|e| e.basis)
        .max()
        .unwrap();
    assert_eq!(kills[0].deadline, last_success + d * 4 / 5);
    assert!(kills[0].at >= kills[0].deadline);
    assert!(kills[0].at <= kills[0].deadline + ctx.margin() + Duration::from_millis(50));
    faulty.set_latency(None);
    e.cleanup().await;
}

/// Acquires a key, then has someone else delete the record and waits until
/// the leader has noticed the loss.
async fn lose_to_a_delete(ctx: &Ctx) -> (Elections, Arc<RecordingKiller>, Key) {
    let d = ctx.lease();
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", d).await;
    delete_behind(ctx, &k, &l).await;
    ended_within(&l, d / 2 + ctx.margin()).await;
    (e, killer, k)
}

/// After a loss, the owner's timely release disarms the killer: no kill.
pub async fn elections_release_after_loss_disarms_killer(ctx: Ctx) {
    let (e, killer, k) = lose_to_a_delete(&ctx).await;
    e.release_leadership(&k).await;
    sleep(ctx.lease() * 2).await;
    assert!(killer.kills().is_empty());
    e.cleanup().await;
}

/// After a loss that the owner never releases, the killer fires.
pub async fn elections_unreleased_loss_is_killed(ctx: Ctx) {
    let (e, killer, _k) = lose_to_a_delete(&ctx).await;
    sleep(ctx.lease()).await;
    assert_eq!(killer.kills().len(), 1);
    e.cleanup().await;
}
