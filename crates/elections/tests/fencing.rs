//! Fencing tokens never repeat across a re-created store: a store wiped and
//! created again, or restored from an older backup, hands out tokens larger
//! than any it handed out before (the floor taken from the wall clock; see
//! `elections::fencing`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use elections::{Elections, RecordingKiller, fencing};
use storage_mem::MemStorage;
use ttl_storage::{Key, Ttl, TtlStorage};

const LEASE: Duration = Duration::from_secs(20);

/// One leadership of `key` on `storage`, released: its fencing token.
async fn lead_once(storage: &MemStorage, key: &Key) -> u64 {
    let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let leadership = elections
        .acquire_leadership(key, "node", LEASE)
        .await
        .unwrap()
        .expect("the key is free");
    let token = leadership.fencing_token();
    leadership.release().await;
    elections.cleanup().await;
    token
}

#[tokio::test]
async fn two_leaderships_across_a_re_created_store_get_growing_tokens() {
    let key = Key::new("nightly").unwrap();
    let first = lead_once(&MemStorage::new(), &key).await;
    // The store is wiped and created again: its counters start afresh.
    let second = lead_once(&MemStorage::new(), &key).await;
    assert!(
        second > first,
        "the re-created store handed out {second} after {first}"
    );
    assert!(second <= fencing::MAX_TOKEN, "{second} does not fit an i64");
}

#[tokio::test]
async fn a_store_restored_from_an_older_backup_hands_out_larger_tokens() {
    let key = Key::new("nightly").unwrap();
    let counter = fencing::counter_key(&key).unwrap();
    let live = MemStorage::new();
    let backed_up = lead_once(&live, &key).await;
    let backup = live.get(&counter).await.unwrap().unwrap();
    let mut latest = backed_up;
    for _ in 0..3 {
        let next = lead_once(&live, &key).await;
        assert!(next > latest, "{next} after {latest}");
        latest = next;
    }
    // The backup is restored: the counter goes back to where it was.
    let restored = MemStorage::new();
    assert!(
        restored
            .insert_if_not_exists(&counter, &backup, Ttl::NEVER)
            .await
            .unwrap()
    );
    let after = lead_once(&restored, &key).await;
    assert!(
        after > latest,
        "the restored store handed out {after}, not above {latest}"
    );
}

#[tokio::test]
async fn an_exhausted_counter_is_an_error_not_a_token_beyond_i64() {
    let key = Key::new("nightly").unwrap();
    let counter = fencing::counter_key(&key).unwrap();
    let storage = MemStorage::new();
    let at_max = fencing::MAX_TOKEN.to_string();
    assert!(
        storage
            .insert_if_not_exists(&counter, at_max.as_bytes(), Ttl::NEVER)
            .await
            .unwrap()
    );
    let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let err = elections
        .acquire_leadership(&key, "node", LEASE)
        .await
        .map(|held| held.map(|l| l.fencing_token()));
    assert!(
        !matches!(err, Ok(Some(_))),
        "a token beyond i64::MAX was handed out: {err:?}"
    );
    elections.cleanup().await;
}
