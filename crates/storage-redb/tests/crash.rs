//! Crash safety of both modes: child processes perform acknowledged writes
//! in a loop (each from several tasks, printing each acknowledged write) and
//! are SIGKILLed at random moments (mid-write, possibly holding the lock);
//! the parent then opens the file (verifying every page checksum) and finds
//! every acknowledged write. Repeated on the same file, so each round also
//! recovers from the previous crashes.
//!
//! - exclusive mode (`RedbStorage`): one child, 4 rounds, 4 writers;
//! - shared mode (`SharedRedbStorage`): 3 children sharing the file at
//!   once, 3 rounds, 3 writers each, racing on one counter.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, mpsc},
    time::Duration,
};

use rand::Rng;
use storage_redb::{RedbStorage, SharedRedbStorage};
use ttl_storage::{DynTtlStorage, Key, Ttl};

/// Set (to `round:process:path`) in the child processes.
const CHILD_ENV: &str = "STORAGE_REDB_TEST_CRASH_CHILD";

/// One mode's test.
#[derive(Clone, Copy)]
struct Mode {
    /// The test's name, which its children run.
    test: &'static str,
    shared: bool,
    rounds: usize,
    processes: usize,
    writers: usize,
    /// Milliseconds before each SIGKILL, from the first child started.
    kill_after: (u64, u64),
}

const EXCLUSIVE: Mode = Mode {
    test: "acknowledged_writes_survive_sigkill",
    shared: false,
    rounds: 4,
    processes: 1,
    writers: 4,
    kill_after: (100, 600),
};

const SHARED: Mode = Mode {
    test: "acknowledged_writes_of_many_processes_survive_sigkill",
    shared: true,
    rounds: 3,
    processes: 3,
    writers: 3,
    kill_after: (50, 400),
};

/// An open handle of either mode.
enum Opened {
    Exclusive(RedbStorage),
    Shared(SharedRedbStorage),
}

impl Mode {
    async fn open(self, path: &Path) -> Opened {
        if self.shared {
            Opened::Shared(SharedRedbStorage::open(path).await.unwrap())
        } else {
            Opened::Exclusive(RedbStorage::open(path).await.unwrap())
        }
    }
}

impl Opened {
    fn storage(&self) -> DynTtlStorage {
        match self {
            Opened::Exclusive(s) => Arc::new(s.clone()),
            Opened::Shared(s) => Arc::new(s.clone()),
        }
    }

    /// Closes the file, so that the next round's children can open it.
    async fn close(self) {
        match self {
            Opened::Exclusive(s) => s.close().await.unwrap(),
            Opened::Shared(s) => s.close().await.unwrap(),
        }
    }
}

fn value_of(key: &str) -> Vec<u8> {
    format!("value of {key}").into_bytes()
}

/// A child: writes until killed, printing each acknowledged write.
async fn child(mode: Mode, path: &Path, round: usize, process: usize) {
    let storage = mode.open(path).await.storage();
    let counter = Key::new("counter").unwrap();
    // Every process tries; one creates it (in round 0).
    storage
        .insert_if_not_exists(&counter, b"0", Ttl::NEVER)
        .await
        .unwrap();
    println!("\nSTARTED");
    let mut tasks = Vec::new();
    for writer in 0..mode.writers {
        let storage = storage.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0u64.. {
                let key = format!("r{round}/p{process}/w{writer}/{i}");
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
    mode: Mode,
    path: &Path,
    round: usize,
    process: usize,
    lines: mpsc::Sender<(usize, String)>,
) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([mode.test, "--exact", "--nocapture", "--test-threads=1"])
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

fn run_children_and_kill(mode: Mode, path: &Path, round: usize) -> Acks {
    let (lines_tx, lines_rx) = mpsc::channel();
    let mut children: Vec<Child> = (0..mode.processes)
        .map(|process| spawn_child(mode, path, round, process, lines_tx.clone()))
        .collect();
    drop(lines_tx);
    let mut acks = Acks::default();
    let mut started = vec![false; mode.processes];
    let record = |acks: &mut Acks, started: &mut [bool], (process, line): (usize, String)| {
        if line.contains("STARTED") {
            started[process] = true;
        } else if let Some((_, key)) = line.split_once("ACK ") {
            acks.keys.push(key.to_owned());
        } else if let Some((_, n)) = line.split_once("CAS ") {
            acks.counter = acks.counter.max(n.parse().unwrap());
        }
    };
    // Wait until every child has the file open.
    while started.iter().any(|s| !s) {
        match lines_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => record(&mut acks, &mut started, line),
            Err(err) => panic!("round {round}: a child never started: {err}"),
        }
    }
    // Each child dies at its own random moment, the others still writing.
    let (from, to) = mode.kill_after;
    for child in &mut children {
        let delay = Duration::from_millis(rand::rng().random_range(from..to));
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

/// The parent (or, with [`CHILD_ENV`] set, a child) of `mode`'s test.
async fn crash_rounds(mode: Mode) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(3, ':');
        let round = parts.next().unwrap().parse().unwrap();
        let process = parts.next().unwrap().parse().unwrap();
        child(mode, Path::new(parts.next().unwrap()), round, process).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut counter_acked = 0;
    for round in 0..mode.rounds {
        let path_for_children = path.clone();
        let acks = tokio::task::spawn_blocking(move || {
            run_children_and_kill(mode, &path_for_children, round)
        })
        .await
        .unwrap();
        assert!(
            !acks.keys.is_empty(),
            "round {round}: no write was acknowledged"
        );
        eprintln!(
            "round {round}: {} inserts and swaps up to {} acknowledged by {} process(es) before SIGKILL",
            acks.keys.len(),
            acks.counter,
            mode.processes
        );
        for key in acks.keys {
            let value = value_of(&key);
            acked.insert(key, value);
        }
        counter_acked = counter_acked.max(acks.counter);

        // Open: verifies every page checksum (corruption fails it).
        let opened = mode.open(&path).await;
        let storage = opened.storage();
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
            (counter_acked..=counter_acked + mode.processes as u64).contains(&counter),
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
        drop(storage);
        opened.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    crash_rounds(EXCLUSIVE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_of_many_processes_survive_sigkill() {
    crash_rounds(SHARED).await;
}
