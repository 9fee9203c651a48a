//! Crash safety: a child process performs acknowledged writes in a loop and is
//! SIGKILLed at a random moment; the parent reopens the file (verifying every
//! page checksum) and finds every acknowledged write. Repeated on the same
//! file, so each round also recovers from the previous crash.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use rand::Rng;
use storage_redb::RedbStorage;
use ttl_storage::{Key, Ttl, TtlStorage};

/// Set (to the file path and the round) in the child process.
const CHILD_ENV: &str = "STORAGE_REDB_TEST_CRASH_CHILD";
const TEST_NAME: &str = "acknowledged_writes_survive_sigkill";
const ROUNDS: usize = 4;
const WRITERS: usize = 4;

fn value_of(key: &str) -> Vec<u8> {
    format!("value of {key}").into_bytes()
}

/// The child: writes until killed, printing each acknowledged write.
async fn child(path: &Path, round: usize) {
    let storage = RedbStorage::open(path).await.unwrap();
    let counter = Key::new("counter").unwrap();
    storage
        .insert_if_not_exists(&counter, b"0", Ttl::NEVER)
        .await
        .unwrap();
    println!("\nSTARTED");
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let storage = storage.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0u64.. {
                let key = format!("r{round}/w{writer}/{i}");
                // Half expire (in an hour), half never: both paths are exercised.
                let ttl = if i % 2 == 0 {
                    Ttl::NEVER
                } else {
                    Ttl::from_secs(3600).unwrap()
                };
                let k = Key::new(key.as_str()).unwrap();
                if storage
                    .insert_if_not_exists(&k, &value_of(&key), ttl)
                    .await
                    .unwrap()
                {
                    println!("\nACK {key}");
                }
            }
        }));
    }
    tasks.push(tokio::spawn(async move {
        loop {
            let current = storage.get(&counter).await.unwrap().unwrap();
            let n: u64 = std::str::from_utf8(&current).unwrap().parse().unwrap();
            let next = (n + 1).to_string();
            if storage
                .compare_and_swap(&counter, &current, next.as_bytes(), Ttl::NEVER)
                .await
                .unwrap()
            {
                println!("\nCAS {next}");
            }
        }
    }));
    for task in tasks {
        task.await.unwrap();
    }
}

/// What one killed child acknowledged.
#[derive(Default)]
struct Acks {
    keys: Vec<String>,
    counter: u64,
    started: bool,
}

fn run_child_and_kill(path: &Path, round: usize) -> Acks {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{round}:{}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acks = Acks::default();
    let record = |acks: &mut Acks, line: &str| {
        if line.contains("STARTED") {
            acks.started = true;
        } else if let Some((_, key)) = line.split_once("ACK ") {
            acks.keys.push(key.to_owned());
        } else if let Some((_, n)) = line.split_once("CAS ") {
            acks.counter = acks.counter.max(n.parse().unwrap());
        }
    };
    // Wait until the child has the file open, then kill it at a random moment.
    while !acks.started {
        match lines_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => record(&mut acks, &line),
            Err(err) => panic!("round {round}: the child never started: {err}"),
        }
    }
    let delay = Duration::from_millis(rand::rng().random_range(100..600));
    std::thread::sleep(delay);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    // Everything the child printed before dying is still in the pipe.
    for line in lines_rx.try_iter() {
        record(&mut acks, &line);
    }
    acks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (round, path) = spec.split_once(':').unwrap();
        child(Path::new(path), round.parse().unwrap()).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut counter_acked = 0;
    for round in 0..ROUNDS {
        let path_for_child = path.clone();
        let acks = tokio::task::spawn_blocking(move || run_child_and_kill(&path_for_child, round))
            .await
            .unwrap();
        assert!(
            !acks.keys.is_empty(),
            "round {round}: no write was acknowledged"
        );
        eprintln!(
            "round {round}: {} inserts and swaps up to {} acknowledged before SIGKILL",
            acks.keys.len(),
            acks.counter
        );
        for key in acks.keys {
            let value = value_of(&key);
            acked.insert(key, value);
        }
        counter_acked = counter_acked.max(acks.counter);

        // Reopen: the open verifies every page checksum (corruption fails it).
        let storage = RedbStorage::open(&path).await.unwrap();
        for (key, value) in &acked {
            let got = storage.get(&Key::new(key.as_str()).unwrap()).await.unwrap();
            assert_eq!(
                got.as_ref(),
                Some(value),
                "round {round}: lost acknowledged {key}"
            );
        }
        let counter = storage
            .get(&Key::new("counter").unwrap())
            .await
            .unwrap()
            .unwrap();
        let counter: u64 = std::str::from_utf8(&counter).unwrap().parse().unwrap();
        // At most one swap was in flight (committed, unacknowledged) when killed.
        assert!(
            counter == counter_acked || counter == counter_acked + 1,
            "round {round}: counter {counter}, last acknowledged {counter_acked}"
        );
        counter_acked = counter;
        // The recovered file takes writes again.
        let key = Key::new(format!("after/{round}")).unwrap();
        assert!(
            storage
                .insert_if_not_exists(&key, b"ok", Ttl::NEVER)
                .await
                .unwrap()
        );
        acked.insert(key.into_string(), b"ok".to_vec());
        storage.close().await.unwrap();
    }
}
