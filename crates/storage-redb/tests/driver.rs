//! Behaviour of the driver itself: the contract's operations, races, expiry,
//! reclamation, restart and options.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::{sync::Arc, time::Duration};

use storage_redb::{CloseError, OpenError, RedbStorage};
use ttl_storage::{Key, MAX_VALUE_LEN, StorageError, Ttl, TtlStorage, ValidationError};

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

fn secs(n: u64) -> Ttl {
    Ttl::from_secs(n).unwrap()
}

async fn fresh() -> (tempfile::TempDir, RedbStorage) {
    let dir = tempfile::tempdir().unwrap();
    let storage = RedbStorage::open(dir.path().join("s.redb")).await.unwrap();
    (dir, storage)
}

#[tokio::test]
async fn conditional_writes() {
    let (_dir, s) = fresh().await;
    let k = key("a");
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"v1", secs(60)).await.unwrap());
    assert!(!s.insert_if_not_exists(&k, b"v2", secs(60)).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), Some(b"v1".to_vec()));

    assert!(
        !s.compare_and_swap(&k, b"v2", b"v3", secs(60))
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_swap(&k, b"v1", b"v3", secs(60))
            .await
            .unwrap()
    );
    assert_eq!(s.get(&k).await.unwrap(), Some(b"v3".to_vec()));

    assert!(!s.compare_and_delete(&k, b"v1").await.unwrap());
    assert!(s.compare_and_delete(&k, b"v3").await.unwrap());
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(!s.compare_and_delete(&k, b"v3").await.unwrap());
    assert!(
        !s.compare_and_swap(&k, b"v3", b"v4", secs(60))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn values_are_opaque_bytes() {
    let (_dir, s) = fresh().await;
    for (name, value) in [
        ("empty", &b""[..]),
        ("nul", b"\0\0x\0"),
        ("high", &[0xff, 0xfe]),
    ] {
        let k = key(name);
        assert!(s.insert_if_not_exists(&k, value, Ttl::NEVER).await.unwrap());
        assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(value));
        assert!(s.compare_and_delete(&k, value).await.unwrap());
    }
    let big = vec![7u8; MAX_VALUE_LEN];
    assert!(
        s.insert_if_not_exists(&key("big"), &big, Ttl::NEVER)
            .await
            .unwrap()
    );
    assert_eq!(s.get(&key("big")).await.unwrap(), Some(big));
}

#[tokio::test]
async fn oversized_values_are_rejected_before_io() {
    let (_dir, s) = fresh().await;
    let huge = vec![0u8; MAX_VALUE_LEN + 1];
    let err = s
        .insert_if_not_exists(&key("k"), &huge, Ttl::NEVER)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StorageError::Invalid(ValidationError::ValueTooLong { .. })
    ));
    let err = s
        .compare_and_swap(&key("k"), b"", &huge, Ttl::NEVER)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Invalid(_)));
    let err = s.compare_and_delete(&key("k"), &huge).await.unwrap_err();
    assert!(matches!(err, StorageError::Invalid(_)));
    assert_eq!(s.get(&key("k")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_inserts_have_one_winner() {
    let (_dir, s) = fresh().await;
    for round in 0..5 {
        let k = key(&format!("race/{round}"));
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let (s, k) = (s.clone(), k.clone());
                tokio::spawn(async move {
                    let value = format!("candidate {i}");
                    let won = s
                        .insert_if_not_exists(&k, value.as_bytes(), secs(60))
                        .await
                        .unwrap();
                    won.then_some(value)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            winners.extend(task.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(
            s.get(&k).await.unwrap(),
            Some(winners[0].clone().into_bytes())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_swaps_have_one_winner() {
    let (_dir, s) = fresh().await;
    let k = key("counter");
    assert!(s.insert_if_not_exists(&k, b"0", Ttl::NEVER).await.unwrap());
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move {
                let new = format!("1 by {i}");
                s.compare_and_swap(&k, b"0", new.as_bytes(), Ttl::NEVER)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut wins = 0;
    for task in tasks {
        wins += usize::from(task.await.unwrap());
    }
    assert_eq!(wins, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_are_not_lost() {
    let (_dir, s) = fresh().await;
    let k = key("n");
    assert!(s.insert_if_not_exists(&k, b"0", Ttl::NEVER).await.unwrap());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    loop {
                        let current = s.get(&k).await.unwrap().unwrap();
                        let n: u64 = std::str::from_utf8(&current).unwrap().parse().unwrap();
                        let next = (n + 1).to_string();
                        if s.compare_and_swap(&k, &current, next.as_bytes(), Ttl::NEVER)
                            .await
                            .unwrap()
                        {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(s.get(&k).await.unwrap(), Some(b"80".to_vec()));
}

#[tokio::test]
async fn expired_records_are_invisible_to_every_operation() {
    let (_dir, s) = fresh().await;
    let (a, b, c) = (key("a"), key("b"), key("c"));
    for k in [&a, &b, &c] {
        assert!(s.insert_if_not_exists(k, b"v", secs(1)).await.unwrap());
    }
    assert!(
        s.insert_if_not_exists(&key("forever"), b"v", Ttl::NEVER)
            .await
            .unwrap()
    );
    assert_eq!(s.get(&a).await.unwrap(), Some(b"v".to_vec()));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.get(&a).await.unwrap(), None);
    assert!(!s.compare_and_swap(&b, b"v", b"w", secs(5)).await.unwrap());
    assert!(!s.compare_and_delete(&c, b"v").await.unwrap());
    assert!(s.insert_if_not_exists(&a, b"again", secs(5)).await.unwrap());
    assert_eq!(s.get(&a).await.unwrap(), Some(b"again".to_vec()));
    assert_eq!(s.get(&key("forever")).await.unwrap(), Some(b"v".to_vec()));
}

#[tokio::test]
async fn swap_restarts_the_ttl() {
    let (_dir, s) = fresh().await;
    let k = key("lease");
    assert!(s.insert_if_not_exists(&k, b"me", secs(2)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(s.compare_and_swap(&k, b"me", b"me", secs(3)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // 2.5 s after the insert (its TTL was 2 s), 1.5 s after the renewal: still held.
    assert_eq!(s.get(&k).await.unwrap(), Some(b"me".to_vec()));
    // Renewing to a never-expiring record drops it from the expiry index.
    assert!(
        s.compare_and_swap(&k, b"me", b"me", Ttl::NEVER)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(s.sweep_now(100).await.unwrap(), 0);
    assert_eq!(s.get(&k).await.unwrap(), Some(b"me".to_vec()));
}

#[tokio::test]
async fn sweep_is_bounded_and_skips_live_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = RedbStorage::builder()
        .without_sweep()
        .open(dir.path().join("s.redb"))
        .await
        .unwrap();
    for i in 0..25 {
        assert!(
            s.insert_if_not_exists(&key(&format!("short/{i}")), b"x", secs(2))
                .await
                .unwrap()
        );
    }
    assert!(
        s.insert_if_not_exists(&key("long"), b"x", secs(60))
            .await
            .unwrap()
    );
    assert!(
        s.insert_if_not_exists(&key("never"), b"x", Ttl::NEVER)
            .await
            .unwrap()
    );
    // Touching an expired key reclaims it; swept twice it is not counted twice.
    assert!(
        s.insert_if_not_exists(&key("touched"), b"x", secs(2))
            .await
            .unwrap()
    );
    assert_eq!(
        s.sweep_now(100).await.unwrap(),
        0,
        "nothing has expired yet"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert!(
        s.insert_if_not_exists(&key("touched"), b"y", Ttl::NEVER)
            .await
            .unwrap()
    );
    assert_eq!(s.sweep_now(10).await.unwrap(), 10);
    assert_eq!(s.sweep_now(10).await.unwrap(), 10);
    assert_eq!(s.sweep_now(10).await.unwrap(), 5);
    assert_eq!(s.sweep_now(10).await.unwrap(), 0);
    assert_eq!(s.get(&key("long")).await.unwrap(), Some(b"x".to_vec()));
    assert_eq!(s.get(&key("never")).await.unwrap(), Some(b"x".to_vec()));
    assert_eq!(s.get(&key("touched")).await.unwrap(), Some(b"y".to_vec()));
}

#[tokio::test]
async fn background_sweep_reclaims_expired_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = RedbStorage::builder()
        .sweep_interval(Duration::from_millis(50))
        .open(dir.path().join("s.redb"))
        .await
        .unwrap();
    for i in 0..20 {
        assert!(
            s.insert_if_not_exists(&key(&format!("k/{i}")), b"x", secs(1))
                .await
                .unwrap()
        );
    }
    // Wait until the background sweep has taken them all: a manual pass then
    // finds nothing left (bounded wait, no timing assertion).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    loop {
        if s.sweep_now(1000).await.unwrap() == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweep never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.close().await.unwrap();
}

#[tokio::test]
async fn churn_does_not_grow_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let s = RedbStorage::builder()
        .without_sweep()
        .open(&path)
        .await
        .unwrap();
    let round = |s: RedbStorage, round: usize| async move {
        for i in 0..200 {
            let k = key(&format!("churn/{round}/{i}"));
            assert!(
                s.insert_if_not_exists(&k, &[1u8; 512], secs(1))
                    .await
                    .unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        while s.sweep_now(1000).await.unwrap() > 0 {}
    };
    round(s.clone(), 0).await;
    round(s.clone(), 1).await;
    let after_warmup = std::fs::metadata(&path).unwrap().len();
    for r in 2..6 {
        round(s.clone(), r).await;
    }
    let after_churn = std::fs::metadata(&path).unwrap().len();
    assert!(
        after_churn <= after_warmup * 2,
        "file grew from {after_warmup} to {after_churn} bytes under churn"
    );
}

#[tokio::test]
async fn records_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let s = RedbStorage::open(&path).await.unwrap();
    assert!(
        s.insert_if_not_exists(&key("lease"), b"me", secs(60))
            .await
            .unwrap()
    );
    assert!(
        s.insert_if_not_exists(&key("short"), b"me", secs(1))
            .await
            .unwrap()
    );
    assert!(
        s.insert_if_not_exists(&key("fence"), b"7", Ttl::NEVER)
            .await
            .unwrap()
    );
    s.close().await.unwrap();

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let s = RedbStorage::open(&path).await.unwrap();
    assert_eq!(s.get(&key("lease")).await.unwrap(), Some(b"me".to_vec()));
    assert_eq!(s.get(&key("fence")).await.unwrap(), Some(b"7".to_vec()));
    // The expiry is absolute: the record expired while the file was closed.
    assert_eq!(s.get(&key("short")).await.unwrap(), None);
    assert!(
        !s.compare_and_swap(&key("short"), b"me", b"me", secs(5))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn close_refuses_while_clones_are_alive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let s = RedbStorage::open(&path).await.unwrap();
    let other = s.clone();
    let err = s.close().await.unwrap_err();
    assert!(matches!(err, CloseError::InUse { .. }), "{err}");
    assert!(
        other
            .insert_if_not_exists(&key("k"), b"v", Ttl::NEVER)
            .await
            .unwrap()
    );
    other.close().await.unwrap();
    // Closed for good: the file can be opened again at once.
    let s = RedbStorage::open(&path).await.unwrap();
    assert_eq!(s.get(&key("k")).await.unwrap(), Some(b"v".to_vec()));
}

#[tokio::test]
async fn works_as_a_dyn_storage() {
    let (_dir, s) = fresh().await;
    let dynamic: ttl_storage::DynTtlStorage = Arc::new(s);
    assert!(
        dynamic
            .insert_if_not_exists(&key("k"), b"v", secs(5))
            .await
            .unwrap()
    );
    assert_eq!(dynamic.get(&key("k")).await.unwrap(), Some(b"v".to_vec()));
}

#[tokio::test]
async fn invalid_options_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let cases = [
        RedbStorage::builder()
            .sweep_interval(Duration::ZERO)
            .clone(),
        RedbStorage::builder().sweep_limit(0).clone(),
        RedbStorage::builder().max_batch(0).clone(),
        RedbStorage::builder().cache_size(10).clone(),
    ];
    for builder in cases {
        let err = builder.open(&path).await.unwrap_err();
        assert!(matches!(err, OpenError::InvalidOption { .. }), "{err}");
    }
    assert!(!path.exists(), "an invalid option must not create the file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_group_commit_answers_are_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let s = RedbStorage::builder()
        .max_batch(1)
        .open(dir.path().join("s.redb"))
        .await
        .unwrap();
    let k = key("race");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (s, k) = (s.clone(), k.clone());
            tokio::spawn(async move { s.insert_if_not_exists(&k, &[i], secs(60)).await.unwrap() })
        })
        .collect();
    let mut wins = 0;
    for task in tasks {
        wins += usize::from(task.await.unwrap());
    }
    assert_eq!(wins, 1);
}
