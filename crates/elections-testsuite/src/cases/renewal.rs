//! Renewal cases: transient errors retried, three failures end the
//! leadership, and writes whose outcome is unknown resolved by reading back.
use elections::{ArmReason, EndReason, record};

use crate::{Ctx, Fault, Op, ctx::sleep};

use super::elections::{acquire, assert_stolen_by_a_swap, count, ended_within};

/// Transient renewal errors are retried; leadership is kept when a retry succeeds.
pub async fn elections_transient_errors_retried(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", d).await;
    faulty.inject(Op::Cas, Fault::Transient, 2);
    sleep(d / 4 + d / 10 + d / 8).await;
    assert_eq!(faulty.injected(), 2);
    assert!(l.is_active());
    let events = killer.events();
    assert_eq!(count(&events, ArmReason::BeforeRenewal), 3, "{events:#?}");
    assert_eq!(count(&events, ArmReason::Renewed), 1, "{events:#?}");
    sleep(d).await;
    assert!(l.is_active());
    assert!(killer.kills().is_empty());
    e.cleanup().await;
}

/// Three failed attempts end the leadership; the record stays (it may still
/// protect running work) and the killer stays armed until the owner releases.
pub async fn elections_released_after_three_failed_attempts(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", d).await;
    faulty.inject(Op::Cas, Fault::Transient, 3);
    let reason = ended_within(&l, d / 4 + d / 10 + d / 10 + ctx.margin()).await;
    assert!(
        matches!(reason, EndReason::StoreUnavailable { attempts: 3, .. }),
        "{reason:?}"
    );
    assert_eq!(
        faulty.calls(Op::Cas),
        1 + 3,
        "confirming write + three attempts"
    );
    assert_eq!(
        ctx.storage.get(&k).await.unwrap().as_deref(),
        Some(l.record_value())
    );
    assert_ne!(
        killer.events().last().map(|e| e.reason),
        Some(ArmReason::Disarmed)
    );
    e.release_leadership(&k).await;
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
    assert_eq!(
        killer.events().last().map(|e| e.reason),
        Some(ArmReason::Disarmed)
    );
    sleep(d).await;
    assert!(killer.kills().is_empty());
    e.cleanup().await;
}

/// A renewal whose outcome is unknown but was applied: leadership is kept.
pub async fn elections_outcome_unknown_renewal_applied(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", d).await;
    faulty.inject(Op::Cas, Fault::UnknownApplied, 1);
    sleep(d).await;
    assert!(l.is_active());
    assert_eq!(faulty.injected(), 1);
    assert!(
        faulty.calls(Op::Get) >= 1,
        "the outcome was not resolved by reading back"
    );
    assert!(killer.kills().is_empty());
    e.cleanup().await;
}

/// A renewal whose outcome is unknown and was not applied, while the record
/// was taken: resolved by reading back as a loss, without retrying.
pub async fn elections_outcome_unknown_renewal_not_applied(ctx: Ctx) {
    let d = ctx.lease();
    let (e, killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("leader");
    let l = acquire(&e, &k, "me", d).await;
    faulty.inject(Op::Cas, Fault::UnknownNotApplied, 1);
    assert_stolen_by_a_swap(&ctx, &k, &l, b"other").await;
    assert_eq!(faulty.calls(Op::Cas), 2, "confirming write + one attempt");
    assert_eq!(count(&killer.events(), ArmReason::BeforeRenewal), 1);
    e.cleanup().await;
    assert_eq!(ctx.storage.get(&k).await.unwrap(), Some(b"other".to_vec()));
}

/// An acquisition whose insert has an unknown outcome: applied means leading;
/// found not applied, the same unique value is inserted again (the first
/// insert may still land, and would then block the key for a whole lease),
/// up to three times, then the acquisition fails and the key stays free.
pub async fn elections_outcome_unknown_acquire(ctx: Ctx) {
    let d = ctx.lease();
    let (e, _killer, faulty) = ctx.faulty_elections();
    let k = ctx.key("applied");
    faulty.inject(Op::Insert, Fault::UnknownApplied, 1);
    let l = e.acquire_leadership(&k, "me", d).await.unwrap();
    assert!(l.is_some(), "an applied insert must end in leadership");
    assert_eq!(
        record::leader_value(&ctx.storage.get(&k).await.unwrap().unwrap()),
        b"me"
    );

    let k2 = ctx.key("not-applied");
    let inserts = faulty.calls(Op::Insert);
    faulty.inject(Op::Insert, Fault::UnknownNotApplied, 1);
    let l2 = e.acquire_leadership(&k2, "me", d).await.unwrap();
    assert!(l2.is_some(), "the retried insert must lead");
    // Two inserts of the record (one retry), one creating its fencing counter.
    assert_eq!(faulty.calls(Op::Insert) - inserts, 3, "one retry");

    let k3 = ctx.key("never-known");
    let inserts = faulty.calls(Op::Insert);
    faulty.inject(Op::Insert, Fault::UnknownNotApplied, 3);
    let err = e.acquire_leadership(&k3, "me", d).await.unwrap_err();
    assert!(
        err.to_string().contains("unknown") || format!("{err:?}").contains("Unknown"),
        "{err:?}"
    );
    assert_eq!(faulty.calls(Op::Insert) - inserts, 3, "three attempts");
    assert_eq!(
        ctx.storage.get(&k3).await.unwrap(),
        None,
        "the key stays free"
    );
    assert!(e.acquire_leadership(&k3, "me", d).await.unwrap().is_some());
    e.cleanup().await;
}
