//! Storage conformance cases: the contract of `ttl_storage::TtlStorage`.

use std::{sync::Arc, time::Duration};

use ttl_storage::{
    DynTtlStorage, ErrorKind, Key, MAX_VALUE_LEN, StorageError, Ttl, ValidationError,
};

use crate::{Ctx, ctx::sleep};

/// Insert on an absent key creates the record.
pub async fn storage_insert_when_absent(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"a".to_vec()));
}

/// Insert on a live record fails and leaves it untouched.
pub async fn storage_insert_when_present(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert!(!s.insert_if_not_exists(&k, b"b", ctx.ttl()).await.unwrap());
    assert!(!s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"a".to_vec()));
}

/// Insert on an expired record succeeds.
pub async fn storage_insert_when_expired(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"b", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"b".to_vec()));
}

/// A record is still live just before its TTL.
pub async fn storage_record_lives_its_ttl(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    let ttl = Ttl::from_secs(3).unwrap();
    assert!(s.insert_if_not_exists(&k, b"a", ttl).await.unwrap());
    sleep(Duration::from_millis(2500)).await;
    assert_eq!(s.get(&k).await.unwrap(), Some(b"a".to_vec()));
    assert!(!s.insert_if_not_exists(&k, b"b", ttl).await.unwrap());
}

/// CAS with the right old value swaps.
pub async fn storage_cas_match(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_swap(&k, b"a", b"b", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"b".to_vec()));
    assert!(s.compare_and_swap(&k, b"b", b"b", ctx.ttl()).await.unwrap());
}

/// CAS with a wrong old value fails and changes nothing.
pub async fn storage_cas_mismatch(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert!(!s.compare_and_swap(&k, b"x", b"b", ctx.ttl()).await.unwrap());
    assert!(!s.compare_and_swap(&k, b"", b"b", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"a".to_vec()));
}

/// CAS on an absent key fails and does not create it.
pub async fn storage_cas_absent(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(!s.compare_and_swap(&k, b"a", b"b", ctx.ttl()).await.unwrap());
    assert!(!s.compare_and_swap(&k, b"", b"b", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), None);
}

/// CAS on an expired record fails and does not revive it.
pub async fn storage_cas_expired(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert!(!s.compare_and_swap(&k, b"a", b"a", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), None);
}

/// CAS restarts the TTL: the record outlives its first TTL.
pub async fn storage_cas_refreshes_ttl(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    let t = Duration::from_secs(4);
    let ttl = Ttl::new(t).unwrap();
    assert!(s.insert_if_not_exists(&k, b"a", ttl).await.unwrap());
    sleep(Duration::from_millis(2500)).await;
    assert!(s.compare_and_swap(&k, b"a", b"a", ttl).await.unwrap());
    // Past the first TTL (plus the driver's granularity), within the second.
    sleep(t + ctx.slack() - Duration::from_millis(2500)).await;
    assert_eq!(
        s.get(&k).await.unwrap(),
        Some(b"a".to_vec()),
        "the swap did not restart the TTL"
    );
    sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        s.get(&k).await.unwrap(),
        None,
        "the record outlived its TTL"
    );
}

/// CAD with the right value deletes; the key can be inserted again.
pub async fn storage_cad_match(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(!s.compare_and_delete(&k, b"a").await.unwrap());
    assert!(s.insert_if_not_exists(&k, b"b", ctx.ttl()).await.unwrap());
}

/// CAD with a wrong value fails and changes nothing.
pub async fn storage_cad_mismatch(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert!(!s.compare_and_delete(&k, b"b").await.unwrap());
    assert!(!s.compare_and_delete(&k, b"").await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"a".to_vec()));
}

/// CAD on an absent key fails.
pub async fn storage_cad_absent(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(!s.compare_and_delete(&k, b"a").await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), None);
}

/// CAD on an expired record fails.
pub async fn storage_cad_expired(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert!(!s.compare_and_delete(&k, b"a").await.unwrap());
}

/// An empty value is a value, distinct from an absent record.
pub async fn storage_value_empty(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(Vec::new()));
    assert!(!s.insert_if_not_exists(&k, b"x", ctx.ttl()).await.unwrap());
    assert!(!s.compare_and_swap(&k, b"x", b"y", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_swap(&k, b"", b"x", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_swap(&k, b"x", b"", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_delete(&k, b"").await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), None);
}

/// NUL and non-UTF-8 bytes round-trip and compare exactly.
pub async fn storage_value_binary(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    let v: &[u8] = b"\0a\0\xff\xfe\0";
    assert!(s.insert_if_not_exists(&k, v, ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(v));
    assert!(
        !s.compare_and_swap(&k, b"\0a", b"x", ctx.ttl())
            .await
            .unwrap()
    );
    assert!(
        !s.compare_and_swap(&k, b"\0a\0\xff\xfe\0\0", b"x", ctx.ttl())
            .await
            .unwrap()
    );
    assert!(s.compare_and_swap(&k, v, b"\0", ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"\0".to_vec()));
}

/// A 64 KiB value round-trips and compares exactly.
pub async fn storage_value_64k(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    let big: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut other = big.clone();
    other[40_000] ^= 1;
    assert!(s.insert_if_not_exists(&k, &big, ctx.ttl()).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(big.clone()));
    assert!(
        !s.compare_and_swap(&k, &other, b"x", ctx.ttl())
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_swap(&k, &big, &other, ctx.ttl())
            .await
            .unwrap()
    );
    assert_eq!(s.get(&k).await.unwrap(), Some(other.clone()));
    assert!(s.compare_and_delete(&k, &other).await.unwrap());
}

/// A value over the limit is refused with a typed error and nothing is written.
pub async fn storage_value_too_large_rejected(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    let huge = vec![1u8; MAX_VALUE_LEN + 1];
    let err = s
        .insert_if_not_exists(&k, &huge, ctx.ttl())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::Invalid(ValidationError::ValueTooLong { .. })
        ),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    let err = s
        .compare_and_swap(&k, b"a", &huge, ctx.ttl())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Invalid(_)), "{err:?}");
    assert_eq!(s.get(&k).await.unwrap(), Some(b"a".to_vec()));
}

/// `Ttl::NEVER` records outlive any TTL, through swaps too.
pub async fn storage_never_expiring_record(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"1", Ttl::NEVER).await.unwrap());
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&k).await.unwrap(), Some(b"1".to_vec()));
    assert!(
        s.compare_and_swap(&k, b"1", b"2", Ttl::NEVER)
            .await
            .unwrap()
    );
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&k).await.unwrap(), Some(b"2".to_vec()));
    assert!(s.compare_and_delete(&k, b"2").await.unwrap());
}

/// `get_entry` reads what `get` reads, with a time left that is consistent
/// with the TTL written (or unknown, where the driver cannot tell).
pub async fn storage_get_entry_matches_get(ctx: Ctx) {
    use ttl_storage::TimeLeft;
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert_eq!(s.get_entry(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"a\0", ctx.ttl()).await.unwrap());
    let entry = s.get_entry(&k).await.unwrap().expect("a live record");
    assert_eq!(entry.value, b"a\0".to_vec());
    match entry.time_left {
        TimeLeft::Unknown => {}
        // Drivers with whole-second expiry write up to a second more.
        TimeLeft::About(left) => assert!(
            left <= ctx.ttl_duration() + Duration::from_secs(2),
            "{left:?} left of a {:?} TTL",
            ctx.ttl_duration()
        ),
        TimeLeft::Never => panic!("an expiring record reported as never expiring"),
    }
    assert!(
        s.compare_and_swap(&k, b"a\0", b"b", Ttl::NEVER)
            .await
            .unwrap()
    );
    let entry = s.get_entry(&k).await.unwrap().expect("a live record");
    assert_eq!(entry.value, b"b".to_vec());
    assert!(
        matches!(entry.time_left, TimeLeft::Never | TimeLeft::Unknown),
        "{entry:?}"
    );
    assert!(s.compare_and_delete(&k, b"b").await.unwrap());
    assert_eq!(s.get_entry(&k).await.unwrap(), None);
}

/// A swap to `Ttl::NEVER` removes the expiry of an expiring record, and a
/// swap to an expiring TTL adds one to a permanent record.
pub async fn storage_cas_changes_expiry(ctx: Ctx) {
    let s = &ctx.storage;
    let k = ctx.key("k");
    assert!(s.insert_if_not_exists(&k, b"a", ctx.ttl()).await.unwrap());
    assert!(
        s.compare_and_swap(&k, b"a", b"b", Ttl::NEVER)
            .await
            .unwrap()
    );
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&k).await.unwrap(), Some(b"b".to_vec()));
    assert!(s.compare_and_swap(&k, b"b", b"c", ctx.ttl()).await.unwrap());
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&k).await.unwrap(), None);
}

/// Operations on one key never affect another.
pub async fn storage_independent_keys(ctx: Ctx) {
    let s = &ctx.storage;
    let (a, b, c) = (ctx.key("a"), ctx.key("b"), ctx.key("a/b"));
    assert!(s.insert_if_not_exists(&a, b"1", ctx.ttl()).await.unwrap());
    assert!(s.insert_if_not_exists(&b, b"1", Ttl::NEVER).await.unwrap());
    assert!(s.insert_if_not_exists(&c, b"1", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_swap(&a, b"1", b"2", ctx.ttl()).await.unwrap());
    assert!(s.compare_and_delete(&c, b"1").await.unwrap());
    assert_eq!(s.get(&a).await.unwrap(), Some(b"2".to_vec()));
    assert_eq!(s.get(&b).await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.get(&c).await.unwrap(), None);
    sleep(ctx.ttl_duration() + ctx.slack()).await;
    assert_eq!(s.get(&a).await.unwrap(), None);
    assert_eq!(s.get(&b).await.unwrap(), Some(b"1".to_vec()));
    assert!(s.compare_and_delete(&b, b"1").await.unwrap());
}

const CONTENDERS: usize = 16;
const ROUNDS: usize = 50;

/// Did a write by `me` win? An outcome-unknown answer is resolved by
/// reading the record back (every contender writes a distinct value).
async fn resolve(
    s: &DynTtlStorage,
    k: &Key,
    me: &[u8],
    result: Result<bool, StorageError>,
) -> bool {
    match result {
        Ok(won) => won,
        Err(err) if err.kind() == ErrorKind::OutcomeUnknown => {
            s.get(k).await.unwrap().as_deref() == Some(me)
        }
        Err(err) if err.kind() == ErrorKind::Transient => false,
        Err(err) => panic!("unexpected error in race: {err:?}"),
    }
}

/// One racing round: `CONTENDERS` tasks released together by a barrier,
/// contender `c` writing value `name(c)` with `write`; returns the values
/// whose write won (outcome-unknown answers resolved by reading back).
async fn race_round<F, Fut>(
    ctx: &Ctx,
    k: &Arc<Key>,
    name: impl Fn(usize) -> Vec<u8>,
    write: F,
) -> Vec<Vec<u8>>
where
    F: Fn(DynTtlStorage, Arc<Key>, Vec<u8>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<bool, StorageError>> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(CONTENDERS));
    let mut tasks = Vec::new();
    for c in 0..CONTENDERS {
        let (s, k, barrier, write, me) = (
            ctx.storage.clone(),
            k.clone(),
            barrier.clone(),
            write.clone(),
            name(c),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let result = write(s.clone(), k.clone(), me.clone()).await;
            resolve(&s, &k, &me, result).await.then_some(me)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        if let Some(me) = task.await.unwrap() {
            winners.push(me);
        }
    }
    winners
}

/// 16 contenders x 50 rounds of concurrent inserts: exactly one wins each round.
pub async fn storage_race_insert(ctx: Ctx) {
    let ttl = Ttl::from_secs(60).unwrap();
    for round in 0..ROUNDS {
        let k = Arc::new(ctx.key(&format!("r{round}")));
        let winners = race_round(
            &ctx,
            &k,
            |c| format!("contender-{c}").into_bytes(),
            move |s, k, me| async move { s.insert_if_not_exists(&k, &me, ttl).await },
        )
        .await;
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        assert_eq!(
            ctx.storage.get(&k).await.unwrap().as_ref(),
            Some(&winners[0])
        );
        ctx.storage
            .compare_and_delete(&k, &winners[0])
            .await
            .unwrap();
    }
}

/// 16 contenders x 50 rounds of concurrent swaps from the same value:
/// exactly one wins each round.
pub async fn storage_race_cas(ctx: Ctx) {
    let k = Arc::new(ctx.key("k"));
    let ttl = Ttl::from_secs(60).unwrap();
    let mut current = b"start".to_vec();
    assert!(
        ctx.storage
            .insert_if_not_exists(&k, &current, ttl)
            .await
            .unwrap()
    );
    for round in 0..ROUNDS {
        let old = Arc::new(current.clone());
        let mut winners = race_round(
            &ctx,
            &k,
            |c| format!("round-{round}-contender-{c}").into_bytes(),
            move |s, k, me| {
                let old = old.clone();
                async move { s.compare_and_swap(&k, &old, &me, ttl).await }
            },
        )
        .await;
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        current = winners.remove(0);
        assert_eq!(ctx.storage.get(&k).await.unwrap(), Some(current.clone()));
    }
    ctx.storage.compare_and_delete(&k, &current).await.unwrap();
}
