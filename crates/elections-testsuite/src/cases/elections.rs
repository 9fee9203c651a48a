//! Election cases: the original suite's seven, plus takeover, contention,
//! input checks and task hygiene. Renewal faults are in `renewal.rs`, killer
//! deadlines in `killer.rs`, fencing tokens in `fencing.rs`.

use std::time::Duration;

use elections::{
    ArmEvent, ArmReason, Elections, ElectionsError, EndReason, Leadership, fencing, record,
};
use tokio::time::{Instant, timeout};
use ttl_storage::{Key, Ttl};

use crate::{Ctx, Fault, Op, ctx::sleep};

pub(super) async fn acquire(e: &Elections, k: &Key, v: &str, d: Duration) -> Leadership {
    e.acquire_leadership(k, v, d)
        .await
        .expect("acquire failed")
        .expect("key unexpectedly held")
}

/// Waits for the handle to fire, at most `within`.
pub(super) async fn ended_within(l: &Leadership, within: Duration) -> EndReason {
    let reason = timeout(within, l.ended())
        .await
        .unwrap_or_else(|_| panic!("leadership did not end within {within:?}"));
    assert_eq!(l.end_reason().as_ref(), Some(&reason));
    reason
}

/// Someone else swaps the record of `l` for `value` (the swap must win):
/// the leadership ends as stolen by `value` at its next renewal.
pub(super) async fn assert_stolen_by_a_swap(ctx: &Ctx, k: &Key, l: &Leadership, value: &[u8]) {
    let d = ctx.lease();
    let ttl = Ttl::new(d).unwrap();
    let swapped = ctx
        .storage
        .compare_and_swap(k, l.record_value(), value, ttl);
    assert!(swapped.await.unwrap());
    let reason = ended_within(l, d / 4 + d / 10 + ctx.margin()).await;
    let by = Some(value.to_vec());
    assert_eq!(reason, EndReason::Stolen { by });
}

/// Someone else deletes the record of `l` (the delete must win).
pub(super) async fn delete_behind(ctx: &Ctx, k: &Key, l: &Leadership) {
    let deleted = ctx.storage.compare_and_delete(k, l.record_value());
    assert!(deleted.await.unwrap());
}

pub(super) fn count(events: &[ArmEvent], reason: ArmReason) -> usize {
    events.iter().filter(|e| e.reason == reason).count()
}

/// Original case 1: acquire, hold, release.
pub async fn elections_basic_usage(ctx: Ctx) {
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "node-1", ctx.lease()).await;
    assert!(l.is_active());
    assert_eq!(l.key(), &k);
    assert_eq!(l.value(), b"node-1");
    assert!(l.fencing_token() >= 1);
    assert_eq!(
        ctx.storage.get(&k).await.unwrap().as_deref(),
        Some(l.record_value())
    );
    assert_eq!(e.held_keys(), vec![k.clone()]);
    e.release_leadership(&k).await;
    assert!(!l.is_active());
    assert_eq!(l.end_reason(), Some(EndReason::Released));
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
    assert!(e.held_keys().is_empty());
    e.cleanup().await;
    assert!(killer.kills().is_empty());
}

/// Original case 2: a held key cannot be acquired, by another instance or this one.
pub async fn elections_acquire_when_already_held(ctx: Ctx) {
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let _l = acquire(&a, &k, "a", ctx.lease()).await;
    assert!(
        b.acquire_leadership(&k, "b", ctx.lease())
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        a.acquire_leadership(&k, "a", ctx.lease()).await,
        Err(ElectionsError::AlreadyHeld(_))
    ));
    let stored = ctx.storage.get(&k).await.unwrap().unwrap();
    assert_eq!(record::leader_value(&stored), b"a");
    a.cleanup().await;
    b.cleanup().await;
}

/// Original case 3: the handle fires when someone changes the record.
pub async fn elections_handle_fires_when_key_changed(ctx: Ctx) {
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let d = ctx.lease();
    let l = acquire(&e, &k, "me", d).await;
    assert_stolen_by_a_swap(&ctx, &k, &l, b"intruder").await;
    // The loss neither deletes the other's record nor disarms the killer.
    assert_eq!(
        ctx.storage.get(&k).await.unwrap(),
        Some(b"intruder".to_vec())
    );
    assert_ne!(
        killer.events().last().map(|e| e.reason),
        Some(ArmReason::Disarmed)
    );
    e.release_leadership(&k).await;
    assert_eq!(
        killer.events().last().map(|e| e.reason),
        Some(ArmReason::Disarmed)
    );
    assert_eq!(
        ctx.storage.get(&k).await.unwrap(),
        Some(b"intruder".to_vec())
    );
    e.cleanup().await;
    assert!(killer.kills().is_empty());
}

/// Original case 4: the handle fires when someone deletes the record.
pub async fn elections_handle_fires_when_key_deleted(ctx: Ctx) {
    let (e, _killer) = ctx.elections();
    let k = ctx.key("leader");
    let d = ctx.lease();
    let l = acquire(&e, &k, "me", d).await;
    delete_behind(&ctx, &k, &l).await;
    let reason = ended_within(&l, d / 4 + d / 10 + ctx.margin()).await;
    assert_eq!(reason, EndReason::Expired);
    e.cleanup().await;
}

/// Original case 5: releasing a key never acquired is a no-op.
pub async fn elections_release_without_acquire_is_noop(ctx: Ctx) {
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    e.release_leadership(&k).await;
    assert!(
        ctx.storage
            .insert_if_not_exists(&k, b"other", ctx.ttl())
            .await
            .unwrap()
    );
    e.release_leadership(&k).await;
    assert_eq!(ctx.storage.get(&k).await.unwrap(), Some(b"other".to_vec()));
    assert!(killer.events().is_empty());
    let l = acquire(&e, &ctx.key("x"), "me", ctx.lease()).await;
    e.release_leadership(&k).await;
    assert!(l.is_active(), "releasing another key ended this leadership");
    e.cleanup().await;
}

/// Original case 6: no acquisition after cleanup.
pub async fn elections_acquire_fails_after_cleanup(ctx: Ctx) {
    let (e, _killer) = ctx.elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", ctx.lease()).await;
    e.cleanup().await;
    assert!(e.is_finalized());
    assert_eq!(l.end_reason(), Some(EndReason::Released));
    assert!(matches!(
        e.acquire_leadership(&k, "me", ctx.lease()).await,
        Err(ElectionsError::Finalized)
    ));
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
    e.cleanup().await; // idempotent
}

/// Original case 7: cleanup while a renewal is in flight, and while one is
/// failing and losing leadership, completes without deadlock.
pub async fn elections_cleanup_during_renewal_no_deadlock(ctx: Ctx) {
    let d = ctx.lease();
    // In flight: every call takes d/8.
    let (e, _killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("slow");
    let l = acquire(&e, &k, "me", d).await;
    faulty.set_latency(Some(d / 8));
    sleep(d / 4 + d / 16).await; // the renewal is now waiting on the store
    timeout(d * 2, e.cleanup())
        .await
        .expect("cleanup deadlocked");
    assert_eq!(l.end_reason(), Some(EndReason::Released));
    assert_eq!(e.background_tasks(), 0);

    // Failing: the renewal round is retrying when cleanup comes.
    let (e, _killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("failing");
    let l = acquire(&e, &k, "me", d).await;
    faulty.inject(Op::Cas, Fault::Transient, 3);
    sleep(d / 4 + d / 40).await;
    timeout(d * 2, e.cleanup())
        .await
        .expect("cleanup deadlocked");
    assert!(!l.is_active());
    assert_eq!(e.background_tasks(), 0);
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
}

/// A renewed leadership outlives many durations.
pub async fn elections_leadership_survives_many_durations(ctx: Ctx) {
    let (e, killer) = ctx.elections();
    let k = ctx.key("leader");
    let d = ctx.lease();
    let l = acquire(&e, &k, "me", d).await;
    sleep(d * 5).await;
    assert!(l.is_active());
    assert_eq!(
        ctx.storage.get(&k).await.unwrap().as_deref(),
        Some(l.record_value())
    );
    let renewed = count(&killer.events(), ArmReason::Renewed);
    assert!(renewed >= 16, "only {renewed} renewals in 5 durations");
    assert!(killer.kills().is_empty());
    e.cleanup().await;
}

/// A second contender takes over only once the silent holder's lease ran
/// out, and the silent holder had given up (handle fired, killer deadline
/// passed) before that.
pub async fn elections_takeover_only_after_ttl(ctx: Ctx) {
    let d = ctx.lease();
    let (a, killer, faulty) = ctx.faulty_elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let la = acquire(&a, &k, "a", d).await;
    sleep(d / 2).await;
    faulty.set_partitioned(true); // a can no longer reach the store
    let last_success = killer
        .events()
        .iter()
        .filter(|e| matches!(e.reason, ArmReason::Acquired | ArmReason::Renewed))
        .map(|e| e.basis)
        .max()
        .unwrap();
    let step = d / 20;
    let lb = loop {
        match b.acquire_leadership(&k, "b", d).await {
            Ok(Some(lb)) => break lb,
            Ok(None) => {}
            // The contract: a transient or outcome-unknown storage error is
            // for the caller to retry (a real cluster returns them under
            // contention, e.g. a Paxos round that times out).
            Err(ElectionsError::Storage(err))
                if matches!(
                    err.kind(),
                    ttl_storage::ErrorKind::Transient | ttl_storage::ErrorKind::OutcomeUnknown
                ) => {}
            Err(err) => panic!("acquire failed: {err:?}"),
        }
        assert!(
            Instant::now() < last_success + d * 2,
            "no takeover within two durations"
        );
        sleep(step).await;
    };
    let taken_at = Instant::now();
    assert!(
        taken_at >= last_success + d,
        "taken over {:?} after the holder's last renewal, before its lease ended",
        taken_at - last_success
    );
    assert!(
        taken_at <= last_success + d + step + ctx.slack() + ctx.margin(),
        "takeover took {:?} after the last renewal",
        taken_at - last_success
    );
    assert!(!la.is_active(), "the old holder still believed it led");
    let kill_deadline = last_success + d * 4 / 5;
    assert!(kill_deadline < taken_at);
    assert_eq!(
        killer.kills().len(),
        1,
        "the killer should have fired for the silent holder"
    );
    assert!(lb.fencing_token() > la.fencing_token());
    a.cleanup().await;
    b.cleanup().await;
}

/// Several contenders at once: exactly one leads.
///
/// On a replicated store contention can make a contender's acquisition fail
/// with a storage error (a Paxos round that timed out: outcome unknown; the
/// contender withdraws its record). The contract allows that: such a
/// contender does not lead, and like a real one it tries again.
pub async fn elections_concurrent_contenders_one_leader(ctx: Ctx) {
    let d = ctx.lease();
    let k = ctx.key("leader");
    let mut set = tokio::task::JoinSet::new();
    let mut all = Vec::new();
    for i in 0..8 {
        let (e, _killer) = ctx.elections();
        all.push(e.clone());
        let k = k.clone();
        set.spawn(async move {
            let mut errors = Vec::new();
            loop {
                match e.acquire_leadership(&k, format!("c{i}"), d).await {
                    Ok(leadership) => return leadership,
                    Err(ElectionsError::Storage(err)) if errors.len() < 5 => {
                        errors.push(err);
                        sleep(d / 10).await;
                    }
                    Err(err) => panic!("contender c{i}: {err:?} after {errors:?}"),
                }
            }
        });
    }
    let mut leaders = 0;
    while let Some(r) = set.join_next().await {
        leaders += usize::from(r.unwrap().is_some());
    }
    assert_eq!(leaders, 1);
    for e in all {
        e.cleanup().await;
    }
}

/// Bad input is refused with typed errors, nothing written.
pub async fn elections_invalid_input_rejected(ctx: Ctx) {
    let (e, _killer) = ctx.elections();
    let k = ctx.key("leader");
    for bad in [
        Duration::ZERO,
        Duration::from_millis(500),
        Duration::from_millis(2500),
    ] {
        assert!(matches!(
            e.acquire_leadership(&k, "me", bad).await,
            Err(ElectionsError::Invalid(_))
        ));
    }
    let reserved = fencing::counter_key(&k).unwrap();
    assert!(matches!(
        e.acquire_leadership(&reserved, "me", ctx.lease()).await,
        Err(ElectionsError::ReservedKey(_))
    ));
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
    e.cleanup().await;
}

/// No background task survives cleanup, whatever state leaderships are in.
pub async fn elections_no_task_survives_cleanup(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer) = ctx.elections();
    let held: Vec<_> = ["a", "b", "c"].iter().map(|n| ctx.key(n)).collect();
    let mut handles = Vec::new();
    for k in &held {
        handles.push(acquire(&e, k, "me", d).await);
    }
    assert_eq!(
        e.background_tasks(),
        6,
        "a renewal and a killer per leadership"
    );
    ctx.storage
        .compare_and_delete(&held[0], handles[0].record_value())
        .await
        .unwrap();
    ended_within(&handles[0], d / 2 + ctx.margin()).await;
    e.cleanup().await;
    assert_eq!(e.background_tasks(), 0);
    assert!(handles.iter().all(|l| !l.is_active()));
    for k in &held {
        assert_eq!(ctx.storage.get(k).await.unwrap(), None);
    }
    sleep(d).await;
    assert!(killer.kills().is_empty());
}

/// A release whose compare-and-delete is applied late cannot delete a later
/// leadership of the same contender with the same value: every leadership
/// stores unique bytes (found by `elections-sim`).
pub async fn elections_late_delete_spares_next_leadership(ctx: Ctx) {
    let d = ctx.lease();
    let (e, _killer) = ctx.elections();
    let k = ctx.key("leader");
    let first = acquire(&e, &k, "me", d).await;
    let old_record = first.record_value().to_vec();
    e.release_leadership(&k).await;
    let second = acquire(&e, &k, "me", d).await;
    assert_ne!(second.record_value(), old_record.as_slice());
    // The first release's delete, delayed in the network, lands now.
    assert!(
        !ctx.storage
            .compare_and_delete(&k, &old_record)
            .await
            .unwrap()
    );
    sleep(d / 2).await;
    assert!(second.is_active());
    assert_eq!(
        ctx.storage.get(&k).await.unwrap().as_deref(),
        Some(second.record_value())
    );
    e.cleanup().await;
}
