//! The store's identity is part of the lease: a redb file deleted, renamed
//! or replaced while A leads (a cleanup script, `rm -rf ~/.local/share`, a
//! backup restored with `cp` + `mv`) is a lost store. A second `vvm-host
//! run` on the path elects over another file and may lead at once; A must
//! stop its job and exit with the "leadership lost" status, and the two
//! leaderships must hold different fencing tokens, the later one larger, so
//! fencing at the resource tells them apart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{fixtures::*, *};

/// The leadership duration: renewals every 1 s, loss declared within
/// about 1.4 s of the file going.
const LEASE: &str = "4s";

/// Where the store lives, and how it is reached.
enum Store {
    /// `--storage redb://PATH[?mode=...]`.
    Url { path: PathBuf, url: String },
    /// No `--storage`: the default file under `XDG_DATA_HOME`.
    Default { data_home: PathBuf, path: PathBuf },
}

impl Store {
    fn url(dir: &Path, query: &str) -> Store {
        let path = dir.join("leases.redb");
        let url = format!("redb://{}{query}", path.display());
        Store::Url { path, url }
    }

    fn default(dir: &Path) -> Store {
        let data_home = dir.join("data");
        let path = data_home.join("vvm-host").join("vvm-host.redb");
        Store::Default { data_home, path }
    }

    fn path(&self) -> &Path {
        match self {
            Store::Url { path, .. } | Store::Default { path, .. } => path,
        }
    }

    /// `vvm-host run` on this store, running `sh -c script`.
    fn host(&self, script: &str) -> Command {
        let mut args = vec!["--leadership-duration", LEASE];
        if let Store::Url { url, .. } = self {
            args.extend(["--storage", url]);
        }
        args.extend(["--", "sh", "-c", script]);
        let mut command = vvm_host(&args);
        if let Store::Default { data_home, .. } = self {
            command
                .env_remove("VVM_HOST_STORAGE")
                .env("XDG_DATA_HOME", data_home);
        }
        command
    }
}

/// What happens to the file while A leads.
#[derive(Debug, Clone, Copy)]
enum Fate {
    /// `rm -rf` of its directory.
    Deleted,
    /// `mv` to another name.
    Renamed,
    /// A copy put in its place (`cp` + `mv`: a backup restored).
    Replaced,
}

fn befall(fate: Fate, path: &Path) {
    match fate {
        Fate::Deleted => std::fs::remove_dir_all(path.parent().unwrap()).unwrap(),
        Fate::Renamed => std::fs::rename(path, path.with_extension("old")).unwrap(),
        Fate::Replaced => {
            let copy = path.with_extension("copy");
            std::fs::copy(path, &copy).unwrap();
            std::fs::rename(&copy, path).unwrap();
        }
    }
}

fn token(line: &str) -> u64 {
    line.trim()
        .trim_start_matches("token=")
        .parse()
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// A leads on `store`; the file meets `fate`; B starts on the same path.
/// A must stop its job and exit 123 within two leases, saying why; B must
/// lead with a larger fencing token.
fn a_lost_store_stops_the_leader(store: &Store, fate: Fate) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work.log");
    let script = format!("echo token=$VVM_HOST_FENCING_TOKEN; {}", work_loop(&work));
    let (mut a, a_out, a_log) = spawn_piped(&mut store.host(&script));
    let a_token = token(&wait_for_line(&a_out, "token="));
    wait_for_work(&work, 3);

    befall(fate, store.path());
    let gone_at = Instant::now();
    let mut b = Reaped(
        store
            .host("echo token=$VVM_HOST_FENCING_TOKEN; exec sleep 1000")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (b_out, _) = lines(b.stdout.take().unwrap());

    // A notices at its next renewal: it stops its job and exits 123.
    let limit = Duration::from_secs(8);
    let status = loop {
        if let Some(status) = a.try_wait().unwrap() {
            break status;
        }
        if gone_at.elapsed() > limit {
            let _ = a.kill();
            let _ = a.wait();
            panic!(
                "{fate:?}: A still led {limit:?} after its store file went\n{}",
                a_log.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = a_log.join().unwrap();
    assert_eq!(status.code(), Some(123), "{fate:?}: {log}");
    assert!(log.contains("no longer names"), "{fate:?}: {log}");
    let stopped = last_work(&work).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        last_work(&work).unwrap(),
        stopped,
        "{fate:?}: A's job worked on after A exited"
    );

    let b_token = token(&wait_for_line(&b_out, "token="));
    assert!(
        b_token > a_token,
        "{fate:?}: B leads with token {b_token}, not above A's {a_token}"
    );
}

/// The default store (no `--storage`, shared mode), its directory removed
/// (`rm -rf ~/.local/share/vvm-host`).
#[test]
fn a_deleted_default_store_is_a_lost_store() {
    let dir = tempfile::tempdir().unwrap();
    a_lost_store_stops_the_leader(&Store::default(dir.path()), Fate::Deleted);
}

/// `--storage` in shared mode, the file replaced by a copy of itself (a
/// backup restored with `cp` + `mv`).
#[test]
fn a_replaced_shared_store_is_a_lost_store() {
    let dir = tempfile::tempdir().unwrap();
    a_lost_store_stops_the_leader(&Store::url(dir.path(), ""), Fate::Replaced);
}

/// `--storage` in exclusive mode, the file renamed away.
#[test]
fn a_renamed_exclusive_store_is_a_lost_store() {
    let dir = tempfile::tempdir().unwrap();
    a_lost_store_stops_the_leader(&Store::url(dir.path(), "?mode=exclusive"), Fate::Renamed);
}
