//! Crash safety of the shared mode: several child processes share one file,
//! each writing from several tasks and printing each acknowledged write; each
//! is SIGKILLed at its own random moment (mid-write, possibly holding the
//! lock). The parent then opens the file (verifying every page checksum) and
//! finds every acknowledged write. Repeated on the same file, so each round
//! also recovers from the previous crashes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use rand::Rng;
use storage_redb::SharedRedbStorage;
use ttl_storage::{Key, Ttl, TtlStorage};

/// Set (to `round:process:path`) in the child processes.
const CHILD_ENV: &str = "STORAGE_REDB_TEST_SHARED_CRASH_CHILD";
const TEST_NAME: &str = "acknowledged_writes_of_many_processes_survive_sigkill";
const ROUNDS: usize = 3;
const PROCESSES: usize = 3;
const WRITERS: usize = 3;

fn value_of(key: &str) -> Vec<u8> {
    format!("value of {key}").into_bytes()
}

/// A child: writes until killed, printing each acknowledged write.
async fn child(path: &Path, round: usize, process: usize) {
    let storage = SharedRedbStorage::open(path).await.unwrap();
    let counter = Key::new("counter").unwrap();
    // Every process tries; one creates it (in round 0).
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
                let key = format!("r{round}/p{process}/w{writer}/{i}");
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
            // Processes race on the counter: only matching swaps succeed.
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

/// What the killed children acknowledged.
#[derive(Default)]
struct Acks {
    keys: Vec<String>,
    counter: u64,
}

fn spawn_child(
    path: &Path,
    round: usize,
    process: usize,
    lines: mpsc::Sender<(usize, String)>,
) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{round}:{process}:{}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send((process, line)).is_err() {
                break;
            }
        }
    });
    child
}

fn run_children_and_kill(path: &Path, round: usize) -> Acks {
    let (lines_tx, lines_rx) = mpsc::channel();
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|process| spawn_child(path, round, process, lines_tx.clone()))
        .collect();
    drop(lines_tx);
    let mut acks = Acks::default();
    let mut started = [false; PROCESSES];
    let record =
        |acks: &mut Acks, started: &mut [bool; PROCESSES], (process, line): (usize, String)| {
            if line.contains("STARTED") {
                started[process] = true;
            } else if let Some((_, key)) = line.split_once("ACK ") {
                acks.keys.push(key.to_owned());
            } else if let Some((_, n)) = line.split_once("CAS ") {
                acks.counter = acks.counter.max(n.parse().unwrap());
            }
        };
    while started.iter().any(|s| !s) {
        match lines_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => record(&mut acks, &mut started, line),
            Err(err) => panic!("round {round}: a child never started: {err}"),
        }
    }
    // Each child dies at its own random moment, the others still writing.
    for child in &mut children {
        let delay = Duration::from_millis(rand::rng().random_range(50..400));
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
    }
    for child in &mut children {
        child.wait().unwrap();
    }
    // Everything the children printed before dying is still in the pipes;
    // the reader threads end at end of file.
    for line in lines_rx.iter() {
        record(&mut acks, &mut started, line);
    }
    acks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_of_many_processes_survive_sigkill() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(3, ':');
        let round = parts.next().unwrap().parse().unwrap();
        let process = parts.next().unwrap().parse().unwrap();
        child(Path::new(parts.next().unwrap()), round, process).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut counter_acked = 0;
    for round in 0..ROUNDS {
        let path_for_children = path.clone();
        let acks =
            tokio::task::spawn_blocking(move || run_children_and_kill(&path_for_children, round))
                .await
                .unwrap();
        assert!(
            !acks.keys.is_empty(),
            "round {round}: no write was acknowledged"
        );
        eprintln!(
            "round {round}: {} inserts and swaps up to {} acknowledged by {PROCESSES} processes before SIGKILL",
            acks.keys.len(),
            acks.counter
        );
        for key in acks.keys {
            let value = value_of(&key);
            acked.insert(key, value);
        }
        counter_acked = counter_acked.max(acks.counter);

        // Open: verifies every page checksum under the lock (corruption fails it).
        let storage = SharedRedbStorage::open(&path).await.unwrap();
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
        // At most one swap per process was committed but not acknowledged.
        assert!(
            (counter_acked..=counter_acked + PROCESSES as u64).contains(&counter),
            "round {round}: counter {counter}, last acknowledged {counter_acked}"
        );
        counter_acked = counter;
        let key = Key::new(format!("after/{round}")).unwrap();
        assert!(
            storage
                .insert_if_not_exists(&key, b"ok", Ttl::NEVER)
                .await
                .unwrap()
        );
        acked.insert(key.into_string(), b"ok".to_vec());
    }
}
