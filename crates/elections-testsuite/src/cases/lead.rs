//! `Elections::lead` and tracked work: the work stops before the killer is
//! disarmed and before the next leader can get in.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use elections::{ArmReason, EndReason, LeadError};
use tokio::time::Instant;
use ttl_storage::Ttl;

use crate::{Ctx, ctx::sleep};

/// When the killer was disarmed (the last `Disarmed` event's time).
fn disarmed_at(killer: &elections::RecordingKiller) -> Instant {
    killer
        .events()
        .iter()
        .rev()
        .find(|e| e.reason == ArmReason::Disarmed)
        .map(|e| e.basis)
        .expect("the killer was never disarmed")
}

/// The work returns: `lead` returns its output, then releases.
pub async fn elections_lead_returns_the_output_then_releases(ctx: Ctx) {
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let storage = ctx.storage.clone();
    let key = k.clone();
    let out = e
        .lead(&k, "me", ctx.lease(), |leader| async move {
            assert!(leader.fencing_token() >= 1);
            assert_eq!(leader.value(), b"me");
            // Still leading while the work runs.
            let stored = storage.get(&key).await.unwrap().unwrap();
            assert_eq!(elections::record::leader_value(&stored), b"me");
            sleep(leader.duration() / 2).await;
            assert!(leader.is_active());
            leader.fencing_token()
        })
        .await
        .expect("lead failed");
    assert!(out >= 1);
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None, "released");
    assert!(e.held_keys().is_empty());
    e.cleanup().await;
    assert!(killer.kills().is_empty());
}

/// `lead` waits while another holds the key, and leads once it is released.
pub async fn elections_lead_waits_for_the_key(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let held = a.acquire_leadership(&k, "a", d).await.unwrap().unwrap();
    let releaser = tokio::spawn(async move {
        sleep(d / 2).await;
        held.release().await;
    });
    let started = Instant::now();
    let who = b
        .lead(&k, "b", d, |leader| async move { leader.value().to_vec() })
        .await
        .unwrap();
    assert_eq!(who, b"b");
    assert!(started.elapsed() >= d / 2);
    releaser.await.unwrap();
    a.cleanup().await;
    b.cleanup().await;
}

/// A loss cancels the work; `lead` waits for it to return, and only then
/// releases (disarms the killer); the typed reason is returned.
pub async fn elections_lead_stops_the_work_before_disarming(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let storage = ctx.storage.clone();
    let key = k.clone();
    let stopped_at = Arc::new(Mutex::new(None));
    let stopped = stopped_at.clone();
    let result = e
        .lead(&k, "me", d, |leader| async move {
            let record = storage.get(&key).await.unwrap().unwrap();
            assert!(
                storage
                    .compare_and_swap(&key, &record, b"intruder", Ttl::new(d).unwrap())
                    .await
                    .unwrap()
            );
            let reason = leader.cancelled().await;
            // Stopping takes a while; the killer must stay armed meanwhile.
            sleep(d / 10).await;
            *stopped.lock().unwrap() = Some(Instant::now());
            reason
        })
        .await;
    let Err(LeadError::Ended { reason, overran }) = result else {
        panic!("expected the leadership to end first: {result:?}");
    };
    assert_eq!(
        reason,
        EndReason::Stolen {
            by: Some(b"intruder".to_vec())
        }
    );
    assert!(!overran);
    let stopped_at = stopped_at.lock().unwrap().expect("the work never stopped");
    assert!(
        disarmed_at(&killer) >= stopped_at,
        "disarmed before the work stopped"
    );
    assert!(killer.kills().is_empty());
    assert_eq!(
        ctx.storage.get(&k).await.unwrap(),
        Some(b"intruder".to_vec())
    );
    e.cleanup().await;
}

/// Work that ignores the loss is waited for only until the killer deadline:
/// the killer fires, and `lead` drops the work and reports the overrun.
pub async fn elections_lead_work_that_ignores_the_loss_is_killed(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let storage = ctx.storage.clone();
    let key = k.clone();
    let result = e
        .lead(&k, "me", d, |_leader| async move {
            let record = storage.get(&key).await.unwrap().unwrap();
            assert!(storage.compare_and_delete(&key, &record).await.unwrap());
            std::future::pending::<()>().await;
        })
        .await;
    let Err(LeadError::Ended { reason, overran }) = result else {
        panic!("expected the leadership to end first: {result:?}");
    };
    assert_eq!(reason, EndReason::Expired);
    assert!(overran);
    // The killer's task runs at the same instant; give it a moment.
    sleep(Duration::from_millis(50)).await;
    assert_eq!(killer.kills().len(), 1, "the killer fired");
    e.cleanup().await;
}

/// Issue 23: a release waits for the work spawned with `Leadership::spawn`
/// (even one that ignores its stop signal) before it disarms the killer and
/// deletes the record: the next leader cannot get in while it runs.
pub async fn elections_release_waits_for_tracked_work(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer) = ctx.elections();
    let (other, _ko) = ctx.elections();
    let k = ctx.key("leader");
    let l = e.acquire_leadership(&k, "me", d).await.unwrap().unwrap();
    let ended_at = Arc::new(Mutex::new(None));
    let ended = ended_at.clone();
    let token = l.cancellation_token();
    l.spawn(async move {
        token.cancelled().await;
        // Ignores the stop signal for a while (longer than a lease).
        sleep(d * 3 / 2).await;
        *ended.lock().unwrap() = Some(Instant::now());
    });
    let release = tokio::spawn(l.clone().release());
    sleep(d).await;
    assert!(!l.is_active(), "the handle fired at once");
    assert!(
        other
            .acquire_leadership(&k, "other", d)
            .await
            .unwrap()
            .is_none(),
        "the next leader got in while tracked work still ran"
    );
    release.await.unwrap();
    let ended_at = ended_at.lock().unwrap().expect("the task never ended");
    assert!(
        disarmed_at(&killer) >= ended_at,
        "disarmed before the work ended"
    );
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None, "released");
    assert!(killer.kills().is_empty(), "renewal went on while waiting");
    e.cleanup().await;
    other.cleanup().await;
}
