//! Issue 34, case 4: a leader never hands over to itself. A candidate
//! wins while its candidate record cannot be deleted (every
//! compare-and-delete of its store fails), so the record outlives the
//! campaign; listings must still leave the leader out, and a hand-over to
//! "whoever waited longest" must go to the real candidate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use elections::{Elections, RecordingKiller, candidates::CANDIDATE_PREFIX, inspect};
use elections_testsuite::{Fault, FaultyStorage, Op};
use storage_mem::MemStorage;
use ttl_storage::{Key, TtlStorage};

const D: Duration = Duration::from_secs(20);

/// Candidate records of `key` in the store, whoever wrote them, by value.
async fn stored_candidates(storage: &MemStorage, key: &Key) -> Vec<String> {
    let mut found = Vec::new();
    for slot in 0..elections::candidates::MAX_CANDIDATES {
        let slot = Key::new(format!("{CANDIDATE_PREFIX}{slot:02}/{key}")).unwrap();
        if let Some(record) = storage.get(&slot).await.unwrap() {
            found.push(String::from_utf8_lossy(&record).into_owned());
        }
    }
    found
}

fn values(candidates: &[elections::Candidate]) -> Vec<String> {
    candidates
        .iter()
        .map(|c| String::from_utf8_lossy(&c.value).into_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn case4_a_leader_is_never_its_own_candidate() {
    let storage = MemStorage::new();
    let key = Key::new("case4").unwrap();
    let holder = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let held = holder
        .acquire_leadership(&key, "holder", D)
        .await
        .unwrap()
        .unwrap();

    // alpha cannot delete anything: its candidacy will outlive its campaign.
    let faulty = FaultyStorage::new(Arc::new(storage.clone()));
    faulty.inject(Op::Cad, Fault::Transient, 10_000);
    let alpha = Elections::with_killer(faulty, RecordingKiller::new());
    let (a, k) = (alpha.clone(), key.clone());
    let waiting = tokio::spawn(async move { a.campaign(&k, "alpha", D).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    held.release().await;
    let leading = waiting.await.unwrap().unwrap();

    let charlie = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let (c, k) = (charlie.clone(), key.clone());
    let waiting = tokio::spawn(async move { c.campaign(&k, "charlie", D).await });
    tokio::time::sleep(Duration::from_secs(2)).await;

    // alpha's record is still stored (its withdrawal keeps failing)...
    let stored = stored_candidates(&storage, &key).await;
    assert!(
        stored.iter().any(|r| r.ends_with(" alpha")),
        "the test needs alpha's record to outlive its campaign: {stored:?}"
    );
    // ...but alpha, the leader, is not a candidate.
    assert_eq!(values(&leading.candidates().await.unwrap()), ["charlie"]);
    assert_eq!(
        values(&inspect(&storage, &key).await.unwrap().candidates),
        ["charlie"]
    );
    let to = leading.hand_over(None).await.unwrap();
    assert_eq!(to.value, b"charlie", "handed over to itself");
    let successor = tokio::time::timeout(D / 4, waiting)
        .await
        .expect("charlie took the key at once")
        .unwrap()
        .unwrap();
    assert!(successor.fencing_token() > leading.fencing_token());
    charlie.cleanup().await;
}
