//! Visible candidates and hand-over to a named successor.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use elections::{Candidate, Elections, EndReason, HandOverError, Leadership, inspect};
use tokio::{
    task::JoinHandle,
    time::{Instant, timeout},
};
use ttl_storage::{Key, Ttl};

use crate::{Ctx, ctx::sleep};

type Campaign = JoinHandle<Result<Leadership, elections::ElectionsError>>;

fn campaign(e: &Elections, k: &Key, value: &'static str, d: Duration) -> Campaign {
    let (e, k) = (e.clone(), k.clone());
    tokio::spawn(async move { e.campaign(&k, value, d).await })
}

/// How long a waiting candidate may take to notice something: one poll
/// plus the margin.
fn notice(ctx: &Ctx) -> Duration {
    elections::MAX_POLL_INTERVAL + ctx.slack() + ctx.margin()
}

/// Waits until `key` lists exactly the candidates `values` (in any order).
async fn listed(ctx: &Ctx, k: &Key, values: &[&str]) -> Vec<Candidate> {
    let until = Instant::now() + notice(ctx) * 2;
    loop {
        let candidates = inspect(&*ctx.storage, k).await.unwrap().candidates;
        let mut seen: Vec<&[u8]> = candidates.iter().map(|c| &c.value[..]).collect();
        seen.sort();
        let mut want: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
        want.sort();
        if seen == want {
            return candidates;
        }
        assert!(
            Instant::now() < until,
            "candidates {seen:?}, expected {want:?}"
        );
        sleep(Duration::from_millis(100)).await;
    }
}

fn named<'a>(candidates: &'a [Candidate], value: &str) -> &'a Candidate {
    candidates
        .iter()
        .find(|c| c.value == value.as_bytes())
        .expect("candidate listed")
}

/// A waiting candidate is listed beside the lease while it waits, with its
/// value and since when, and is gone once it stops waiting or leads.
pub async fn elections_waiting_candidates_are_listed(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let (c, _kc) = ctx.elections();
    let k = ctx.key("leader");
    let before = SystemTime::now() - Duration::from_secs(1);
    let la = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    assert!(la.candidates().await.unwrap().is_empty());
    let wb = campaign(&b, &k, "bravo", d);
    let wc = campaign(&c, &k, "charlie", d);
    let candidates = listed(&ctx, &k, &["bravo", "charlie"]).await;
    assert!(
        candidates
            .iter()
            .all(|c| c.since >= before && c.since <= SystemTime::now())
    );
    assert_eq!(la.candidates().await.unwrap().len(), 2);
    // Stays listed across its record's TTL (it is renewed while waiting).
    sleep(d).await;
    listed(&ctx, &k, &["bravo", "charlie"]).await;

    // A candidate that stops waiting is withdrawn.
    wc.abort();
    listed(&ctx, &k, &["bravo"]).await;
    // One that leads is no longer a candidate.
    la.release().await;
    let lb = timeout(notice(&ctx), wb).await.unwrap().unwrap().unwrap();
    assert_eq!(lb.value(), b"bravo");
    listed(&ctx, &k, &[]).await;
    for e in [a, b, c] {
        e.cleanup().await;
    }
}

/// With nobody waiting, a hand-over is refused and the leader keeps leading;
/// the forced variant releases.
pub async fn elections_hand_over_without_candidate_is_refused(ctx: Ctx) {
    let d = ctx.lease();
    let (a, killer) = ctx.elections();
    let k = ctx.key("leader");
    let la = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    let refused = la.hand_over(None).await;
    assert!(
        matches!(refused, Err(HandOverError::NoCandidate)),
        "{refused:?}"
    );
    assert!(la.is_active());
    sleep(d).await;
    assert!(la.is_active(), "still renewed");
    assert_eq!(
        ctx.storage.get(&k).await.unwrap().as_deref(),
        Some(la.record_value())
    );
    assert_eq!(la.hand_over_or_release(None).await.unwrap(), None);
    assert_eq!(la.end_reason(), Some(EndReason::Released));
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
    a.cleanup().await;
    assert!(killer.kills().is_empty());
}

/// Hand-over to a named candidate: only it takes the key (the other keeps
/// waiting), with a larger fencing token; then a hand-over without a name
/// goes to the one left.
pub async fn elections_hand_over_to_the_named_candidate(ctx: Ctx) {
    let d = ctx.lease();
    let (a, ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let (c, _kc) = ctx.elections();
    let k = ctx.key("leader");
    let la = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    let mut wb = campaign(&b, &k, "bravo", d);
    let wc = campaign(&c, &k, "charlie", d);
    let candidates = listed(&ctx, &k, &["bravo", "charlie"]).await;
    let to = named(&candidates, "charlie");

    let handed = la.hand_over(Some(to)).await.unwrap();
    assert_eq!(handed.value, b"charlie");
    assert_eq!(la.end_reason(), Some(EndReason::Superseded));
    assert!(ka.kills().is_empty());
    let lc = timeout(notice(&ctx), wc).await.unwrap().unwrap().unwrap();
    assert_eq!(lc.value(), b"charlie");
    assert!(lc.fencing_token() > la.fencing_token());
    let status = inspect(&*ctx.storage, &k).await.unwrap();
    assert_eq!(status.leader.as_deref(), Some(&b"charlie"[..]));
    // Bravo keeps waiting.
    assert!(
        timeout(notice(&ctx), &mut wb).await.is_err(),
        "bravo took it"
    );
    listed(&ctx, &k, &["bravo"]).await;

    // Unnamed: to the only candidate.
    let handed = lc.hand_over(None).await.unwrap();
    assert_eq!(handed.value, b"bravo");
    let lb = timeout(notice(&ctx), wb).await.unwrap().unwrap().unwrap();
    assert!(lb.fencing_token() > lc.fencing_token());
    assert_eq!(lc.end_reason(), Some(EndReason::Superseded));
    for e in [a, b, c] {
        e.cleanup().await;
    }
}

/// The hand-over stops the leader's tracked work before the successor can
/// get in.
pub async fn elections_hand_over_waits_for_tracked_work(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let la = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    let ended_at = Arc::new(Mutex::new(None));
    let ended = ended_at.clone();
    let token = la.cancellation_token();
    la.spawn(async move {
        token.cancelled().await;
        sleep(d / 2).await;
        *ended.lock().unwrap() = Some(Instant::now());
    });
    let wb = campaign(&b, &k, "bravo", d);
    listed(&ctx, &k, &["bravo"]).await;
    la.hand_over(None).await.unwrap();
    let lb = timeout(notice(&ctx), wb).await.unwrap().unwrap().unwrap();
    let ended_at = ended_at.lock().unwrap().expect("work ended");
    assert!(Instant::now() >= ended_at);
    assert!(lb.is_active());
    a.cleanup().await;
    b.cleanup().await;
}

/// A marker reserved for a candidate that never takes it: nobody else gets
/// the key until the marker expires, then anyone may.
pub async fn elections_hand_over_marker_expires_when_the_candidate_is_gone(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let la = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    // A candidate record whose owner is gone (written by hand, long TTL).
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let ghost = format!("cand1 {ms} 00000000000000000000abcd ghost");
    let slot = Key::new(format!("{}00/{k}", elections::candidates::CANDIDATE_PREFIX)).unwrap();
    assert!(
        ctx.storage
            .insert_if_not_exists(&slot, ghost.as_bytes(), Ttl::new(d * 4).unwrap())
            .await
            .unwrap()
    );
    let handed = la.hand_over(None).await.unwrap();
    assert_eq!(handed.value, b"ghost");
    let handed_at = Instant::now();
    let status = inspect(&*ctx.storage, &k).await.unwrap();
    assert!(status.handing_over);
    assert_eq!(status.leader, None);
    // Someone else: refused while the marker lives, then leads.
    assert!(
        b.acquire_leadership(&k, "bravo", d)
            .await
            .unwrap()
            .is_none()
    );
    let lb = timeout(d + notice(&ctx), b.campaign(&k, "bravo", d))
        .await
        .unwrap()
        .unwrap();
    // The marker lives half a lease (at least 2 s).
    let marker_ttl = (d / 2).max(Duration::from_secs(2));
    assert!(
        handed_at.elapsed() + ctx.margin() >= marker_ttl,
        "taken {:?} after the hand-over",
        handed_at.elapsed()
    );
    assert!(lb.fencing_token() > la.fencing_token());
    a.cleanup().await;
    b.cleanup().await;
}
