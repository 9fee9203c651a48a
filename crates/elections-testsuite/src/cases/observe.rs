//! `Elections::observe`: every change once, store trouble, never a write.

use std::time::Duration;

use elections::{Observation, Observer};
use tokio::time::timeout;
use ttl_storage::Ttl;

use crate::{Ctx, Op, ctx::sleep};

/// The next observation, within `within`.
async fn next_within(obs: &mut Observer, within: Duration) -> Observation {
    timeout(within, obs.next())
        .await
        .unwrap_or_else(|_| panic!("no observation within {within:?}"))
        .expect("the stream ended")
}

/// Nothing more is reported for `quiet`.
async fn nothing_for(obs: &mut Observer, quiet: Duration) {
    if let Ok(extra) = timeout(quiet, obs.next()).await {
        panic!("reported without a change: {extra:?}");
    }
}

/// How long a change may take to be reported: one poll plus the margin.
fn report_time(ctx: &Ctx) -> Duration {
    elections::MAX_POLL_INTERVAL + ctx.slack() + ctx.margin()
}

fn leader_of(observation: &Observation) -> (Vec<u8>, Option<u64>) {
    match observation {
        Observation::Leader {
            value,
            fencing_token,
            ..
        } => (value.clone(), *fencing_token),
        other => panic!("expected a leader, got {other:?}"),
    }
}

/// No leader, a leader, its release, the next leader, a stolen record: each
/// reported once, and renewals are not changes.
pub async fn elections_observe_reports_every_change_once(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let mut obs = a.observe(&k);
    assert_eq!(
        next_within(&mut obs, report_time(&ctx)).await,
        Observation::NoLeader
    );

    let la = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    let (value, token) = leader_of(&next_within(&mut obs, report_time(&ctx)).await);
    assert_eq!(value, b"alpha");
    assert_eq!(token, Some(la.fencing_token()));
    // Two renewals later: still nothing new.
    nothing_for(&mut obs, d / 2 + d / 10).await;

    let token_a = la.fencing_token();
    la.release().await;
    assert_eq!(
        next_within(&mut obs, report_time(&ctx)).await,
        Observation::NoLeader
    );

    let lb = b.acquire_leadership(&k, "bravo", d).await.unwrap().unwrap();
    let (value, token) = leader_of(&next_within(&mut obs, report_time(&ctx)).await);
    assert_eq!(value, b"bravo");
    assert_eq!(token, Some(lb.fencing_token()));
    assert!(lb.fencing_token() > token_a);

    // Someone overwrites the record: a new holder, seen without a removal.
    assert!(
        ctx.storage
            .compare_and_swap(&k, lb.record_value(), b"charlie", Ttl::new(d).unwrap())
            .await
            .unwrap()
    );
    let (value, _) = leader_of(&next_within(&mut obs, report_time(&ctx)).await);
    assert_eq!(value, b"charlie");
    nothing_for(&mut obs, d / 4).await;
    a.cleanup().await;
    b.cleanup().await;
}

/// The same value acquired again is a new leadership, hence a change.
pub async fn elections_observe_sees_a_new_leadership_with_the_same_value(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let k = ctx.key("leader");
    let first = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    let mut obs = a.observe(&k);
    let (_, token1) = leader_of(&next_within(&mut obs, report_time(&ctx)).await);
    // Release and re-acquire between two reads.
    first.release().await;
    let second = a.acquire_leadership(&k, "alpha", d).await.unwrap().unwrap();
    let mut seen = next_within(&mut obs, report_time(&ctx)).await;
    if seen == Observation::NoLeader {
        seen = next_within(&mut obs, report_time(&ctx)).await;
    }
    let (value, token2) = leader_of(&seen);
    assert_eq!(value, b"alpha");
    assert_eq!(token2, Some(second.fencing_token()));
    assert!(token2 > token1);
    a.cleanup().await;
}

/// Store trouble is reported once per outage, recovery is reported, and
/// observing never writes.
pub async fn elections_observe_reports_store_trouble_once_and_never_writes(ctx: Ctx) {
    let d = ctx.lease();
    let (leader, _k1) = ctx.elections();
    let (watcher, _k2, faulty) = ctx.faulty_elections();
    let k = ctx.key("leader");
    let _l = leader
        .acquire_leadership(&k, "alpha", d)
        .await
        .unwrap()
        .unwrap();
    let mut obs = watcher.observe(&k);
    let (value, _) = leader_of(&next_within(&mut obs, report_time(&ctx)).await);
    assert_eq!(value, b"alpha");

    faulty.set_partitioned(true);
    let trouble = next_within(&mut obs, report_time(&ctx)).await;
    assert!(
        matches!(&trouble, Observation::Unknown { error } if error.contains("partitioned")),
        "{trouble:?}"
    );
    // Three more polls fail: not reported again.
    nothing_for(&mut obs, elections::MAX_POLL_INTERVAL * 3).await;
    faulty.set_partitioned(false);
    let (value, _) = leader_of(&next_within(&mut obs, report_time(&ctx)).await);
    assert_eq!(value, b"alpha");

    for op in [Op::Insert, Op::Cas, Op::Cad] {
        assert_eq!(faulty.calls(op), 0, "observe wrote: {op:?}");
    }
    assert!(faulty.calls(Op::Get) >= 3);
    drop(obs);
    sleep(Duration::from_millis(10)).await;
    leader.cleanup().await;
    watcher.cleanup().await;
}
