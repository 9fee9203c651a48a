//! Misuse: a file held by another process, corrupt files, files that are not
//! storage files, missing directories. Every case must fail fast with a typed
//! error naming the file, and leave the file untouched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use storage_redb::{OpenError, RedbStorage};
use ttl_storage::{Key, Ttl, TtlStorage};

/// Set in the child process that holds the file open.
const HOLD_ENV: &str = "STORAGE_REDB_TEST_HOLD";

async fn open_quickly(path: &Path) -> Result<RedbStorage, OpenError> {
    tokio::time::timeout(Duration::from_secs(30), RedbStorage::open(path))
        .await
        .expect("open must fail fast, not hang")
}

async fn write_some(path: &Path, n: usize) {
    let s = RedbStorage::open(path).await.unwrap();
    for i in 0..n {
        let key = Key::new(format!("key/{i}")).unwrap();
        assert!(
            s.insert_if_not_exists(&key, &[i as u8; 100], Ttl::NEVER)
                .await
                .unwrap()
        );
    }
    s.close().await.unwrap();
}

#[tokio::test]
async fn file_held_by_another_process() {
    if let Ok(path) = std::env::var(HOLD_ENV) {
        // Child: hold the file until the parent closes our stdin.
        let s = RedbStorage::open(&path).await.unwrap();
        // libtest may print its progress on the same line: match with `contains`.
        println!("\nREADY");
        let _ = std::io::stdin().lines().count();
        s.close().await.unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.redb");
    write_some(&path, 3).await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "file_held_by_another_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLD_ENV, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = stdout
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("READY"));
    assert!(ready, "the child did not open the file");

    let err = open_quickly(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err:?}");
    assert!(err.to_string().contains(path.to_str().unwrap()), "{err}");

    drop(child.stdin.take());
    // Keep reading so the child can print its test result.
    let _ = stdout.count();
    assert!(child.wait().unwrap().success());
    // Released with the process: the file opens now and kept its data.
    let s = open_quickly(&path).await.unwrap();
    let key = Key::new("key/2").unwrap();
    assert_eq!(s.get(&key).await.unwrap(), Some(vec![2u8; 100]));
}

#[tokio::test]
async fn second_open_in_the_same_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let first = open_quickly(&path).await.unwrap();
    let err = open_quickly(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err:?}");
    first.close().await.unwrap();
    open_quickly(&path).await.unwrap();
}

#[tokio::test]
async fn non_redb_files_are_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>); 3] = [
        ("text.redb", b"hello, I am a config file\n".to_vec()),
        ("short.redb", b"red".to_vec()),
        (
            "random.redb",
            (0..100_000u32).map(|i| (i * 7919 % 251) as u8).collect(),
        ),
    ];
    for (name, content) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, &content).unwrap();
        let err = open_quickly(&path).await.unwrap_err();
        assert!(matches!(err, OpenError::NotRedb { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains(name), "{err}");
        assert!(
            std::fs::read(&path).unwrap() == content,
            "{name} was modified"
        );
    }
}

#[tokio::test]
async fn corrupt_files_are_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.redb");
    write_some(&path, 200).await;
    let mut bytes = std::fs::read(&path).unwrap();
    // Keep redb's header and scramble every page after it.
    for (i, byte) in bytes.iter_mut().enumerate().skip(4096) {
        *byte ^= 0x5a ^ (i as u8);
    }
    std::fs::write(&path, &bytes).unwrap();

    let err = open_quickly(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::Corrupted { .. }), "{err:?}");
    assert!(err.to_string().contains("corrupt.redb"), "{err}");
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "the corrupt file was modified"
    );
}

#[tokio::test]
async fn truncated_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.redb");
    write_some(&path, 200).await;
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let err = open_quickly(&path).await.unwrap_err();
    assert!(
        matches!(err, OpenError::Corrupted { .. } | OpenError::Io { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("truncated.redb"), "{err}");
}

#[tokio::test]
async fn redb_files_of_other_programs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        let table: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("accounts");
        txn.open_table(table).unwrap().insert(1, 100).unwrap();
        txn.commit().unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = open_quickly(&path).await.unwrap_err();
    match &err {
        OpenError::ForeignDatabase { tables, .. } => assert_eq!(tables, &["accounts"]),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the file was modified"
    );
}

#[tokio::test]
async fn empty_files_are_initialised() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    std::fs::write(&path, b"").unwrap();
    let s = open_quickly(&path).await.unwrap();
    let key = Key::new("k").unwrap();
    assert!(
        s.insert_if_not_exists(&key, b"v", Ttl::NEVER)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn missing_parent_dirs_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/c/s.redb");
    let s = open_quickly(&path).await.unwrap();
    assert!(path.is_file());
    s.close().await.unwrap();
}

#[tokio::test]
async fn missing_parent_dirs_can_be_reported_instead() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope/s.redb");
    let err = RedbStorage::builder()
        .create_parent_dirs(false)
        .open(&path)
        .await
        .unwrap_err();
    assert!(matches!(err, OpenError::MissingParentDir { .. }), "{err:?}");
    assert!(err.to_string().contains("nope"), "{err}");
    assert!(!dir.path().join("nope").exists());
}

#[tokio::test]
async fn unusable_paths_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let err = open_quickly(dir.path()).await.unwrap_err();
    assert!(matches!(err, OpenError::InvalidPath { .. }), "{err:?}");
    let err = open_quickly(Path::new("")).await.unwrap_err();
    assert!(matches!(err, OpenError::InvalidPath { .. }), "{err:?}");
    // A regular file where a parent directory should be.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = open_quickly(&file.join("s.redb")).await.unwrap_err();
    assert!(matches!(err, OpenError::Io { .. }), "{err:?}");
}

/// The path no longer names the file a handle has open — deleted, renamed
/// away, replaced by a copy — in either mode: every operation fails with a
/// permanent error naming the file (the store is lost), while a fresh open
/// of the path uses the new file.
#[tokio::test]
async fn a_file_deleted_renamed_or_replaced_under_a_handle_is_a_lost_store() {
    let key = Key::new("leader/1").unwrap();
    let ttl = Ttl::from_secs(60).unwrap();
    for how in ["deleted", "renamed", "replaced"] {
        for shared in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("leases.redb");
            let storage: Box<dyn TtlStorage> = if shared {
                Box::new(storage_redb::SharedRedbStorage::open(&path).await.unwrap())
            } else {
                Box::new(RedbStorage::open(&path).await.unwrap())
            };
            assert!(storage.insert_if_not_exists(&key, b"a", ttl).await.unwrap());
            match how {
                "deleted" => std::fs::remove_file(&path).unwrap(),
                "renamed" => std::fs::rename(&path, dir.path().join("old.redb")).unwrap(),
                _ => {
                    let copy = dir.path().join("copy.redb");
                    std::fs::copy(&path, &copy).unwrap();
                    std::fs::rename(&copy, &path).unwrap();
                }
            }
            let what = format!("{how}, shared={shared}");
            let renewed = storage.compare_and_swap(&key, b"a", b"a", ttl).await;
            let err = renewed.expect_err(&what);
            assert_eq!(
                err.kind(),
                ttl_storage::ErrorKind::Permanent,
                "{what}: {err}"
            );
            assert!(err.to_string().contains("no longer names"), "{what}: {err}");
            assert!(err.to_string().contains("leases.redb"), "{what}: {err}");
            let read = storage.get(&key).await.expect_err(&what);
            assert_eq!(read.kind(), ttl_storage::ErrorKind::Permanent, "{what}");
            drop(storage);
        }
    }
}
