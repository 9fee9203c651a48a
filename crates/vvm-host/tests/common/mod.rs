//! Helpers shared by the end-to-end tests of the real `vvm-host` binary.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

pub mod failover;
pub mod fixtures;

use std::{
    io::{BufRead, BufReader, Read},
    process::{Child, Command, ExitStatus, Output, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use storage_redb::RedbStorage;
use ttl_storage::{Key, TtlStorage};

pub const BIN: &str = env!("CARGO_BIN_EXE_vvm-host");

/// The binary under test: `VVM_HOST_TEST_BIN` when set (to run these tests
/// against another build, e.g. an older one, to show a test fails there),
/// else this crate's.
pub fn bin() -> std::ffi::OsString {
    std::env::var_os("VVM_HOST_TEST_BIN").unwrap_or_else(|| BIN.into())
}
/// Generous: CI machines are slow; nothing here waits this long when it works.
pub const LIMIT: Duration = Duration::from_secs(60);

/// The lock name the tests run under (keys `e2e/1..=N`).
pub const NAME: &str = "e2e";

/// `vvm-host run --address e2e --log info ARGS...`, with the lock name
/// [`NAME`] put before the `--` of `args` (or at the end).
pub fn vvm_host(args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.args(["run", "--address", "e2e", "--log", "info"]);
    match args.iter().position(|arg| *arg == "--") {
        Some(at) => command.args(&args[..at]).arg(NAME).args(&args[at..]),
        None => command.args(args).arg(NAME),
    };
    command
        // Through the environment, so a test's --storage flag overrides it.
        .env("VVM_HOST_STORAGE", "mem")
        .stdin(Stdio::null());
    command
}

/// A vvm-host leading on `url` for a minute (its command `sleep 1000`),
/// once its command has started; its log is read and dropped.
pub fn leader_on(url: &str) -> Child {
    let args = ["--storage", url, "--leadership-duration", "60s"];
    spawn_started(&[&args[..], &["--", "sleep", "1000"]].concat()).0
}

/// Spawns `command` with its stdout dropped: `(child, its log line by
/// line, all of its log once it closes)`.
pub fn spawn_logging(
    command: &mut Command,
) -> (Child, mpsc::Receiver<String>, thread::JoinHandle<String>) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (log_rx, log) = lines(child.stderr.take().unwrap());
    (child, log_rx, log)
}

/// [`vvm_host`] with `args`, spawned by [`spawn_logging`], once it has
/// started its command.
pub fn spawn_started(args: &[&str]) -> (Child, mpsc::Receiver<String>, thread::JoinHandle<String>) {
    let (child, log_rx, log) = spawn_logging(&mut vvm_host(args));
    wait_for_line(&log_rx, "command started");
    (child, log_rx, log)
}

/// Sends `sig` to `child`, waits for it to exit: its status and `log`.
pub fn stop(
    child: &mut Child,
    sig: Signal,
    log: thread::JoinHandle<String>,
) -> (ExitStatus, String) {
    signal(child, sig);
    let status = wait_with_limit(child);
    (status, log.join().unwrap())
}

/// The record of key 1 in a redb file vvm-host has exited from.
pub fn stored_key1(path: &std::path::Path) -> Option<Vec<u8>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let storage = RedbStorage::open(path).await.unwrap();
        let record = storage
            .get(&Key::new(format!("{NAME}/1")).unwrap())
            .await
            .unwrap();
        storage.close().await.unwrap();
        record
    })
}

pub fn wait_with_limit(child: &mut Child) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("vvm-host did not exit within {LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Forwards every line of `reader` to a channel, and collects them all.
pub fn lines(
    reader: impl Read + Send + 'static,
) -> (mpsc::Receiver<String>, thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(reader).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, handle)
}

/// Spawns `command` with its stdout and stderr piped: `(child, stdout line
/// by line, all of stderr once it closes)`.
pub fn spawn_piped(
    command: &mut Command,
) -> (Child, mpsc::Receiver<String>, thread::JoinHandle<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, _) = lines(child.stdout.take().unwrap());
    let (_, err) = lines(child.stderr.take().unwrap());
    (child, out, err)
}

/// Spawns `vvm-host run --address <address>` on `storage` (info log, 6 s
/// leadership) with `rest` after (options, the lock, `--` and its command)
/// and `env` set; stdin closed, stderr dropped: `(child, stdout line by
/// line)`.
pub fn spawn_node(
    storage: &str,
    address: &str,
    rest: &[&str],
    env: (&str, &str),
) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(bin())
        .args(["run", "--address", address, "--log", "info"])
        .args(["--storage", storage, "--leadership-duration", "6s"])
        .args(rest)
        .env(env.0, env.1)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (out, _all) = lines(child.stdout.take().unwrap());
    (child, out)
}

pub fn wait_for_line(rx: &mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no line containing {what:?}: {e}"));
        if line.contains(what) {
            return line;
        }
    }
}

pub fn assert_gone(pid: i32) {
    // vvm-host reaped its child; if anything still ran it would answer.
    assert_eq!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH));
}

/// True while a process with this pid exists (a zombie counts).
pub fn exists(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

/// Waits until `pid` is gone; returns the wall-clock time it was first seen
/// gone (polled every 5 ms). Panics after [`LIMIT`].
pub fn wait_gone(pid: i32) -> std::time::SystemTime {
    let started = Instant::now();
    while exists(pid) {
        assert!(started.elapsed() < LIMIT, "process {pid} still runs");
        thread::sleep(Duration::from_millis(5));
    }
    std::time::SystemTime::now()
}

/// The number after `prefix` on the next line that starts with it.
pub fn read_number(rx: &mpsc::Receiver<String>, prefix: &str) -> i32 {
    let line = wait_for_line(rx, prefix);
    line.trim()
        .trim_start_matches(prefix)
        .parse()
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// Shell words that print `pid=` and the shell's pid as the host sees it
/// (`/proc` is the host's; `$$` is the job's PID namespace's), for `sh -c`
/// and `bash -c` alike (`read` with a redirection runs in the shell
/// itself).
pub const ECHO_PID: &str = "read -r vvm_test_pid _ < /proc/self/stat; echo pid=$vvm_test_pid";

/// A job for `bash -c`: prints `pid=` (the command), starts a grandchild
/// that leaves the process group and session with `setsid` and prints
/// `gc=` (each as the host numbers them), then prints `ready` and runs
/// `rest`.
///
/// A leading `trap ... TERM; ` of `rest` is set first, before `ready`: the
/// tests signal as soon as they read it.
pub fn job_with_escaping_grandchild(rest: &str) -> String {
    let start = format!(
        "{ECHO_PID}; exec 3< <(exec setsid sh -c 'read -r p _ < /proc/self/stat; echo $p; exec sleep 1000'); read -r gc <&3; echo gc=$gc; echo ready"
    );
    match rest.split_once(" TERM; ") {
        Some((trap, after)) if trap.starts_with("trap ") => {
            format!("{trap} TERM; {start}; {after}")
        }
        _ => format!("{start}; {rest}"),
    }
}

/// Sends `signal` to the child process.
pub fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), signal).unwrap();
}

/// `vvm-host` on `dir`'s redb file, leading for `lease` (whole seconds),
/// with storage faults injected through `dir/fault` (which also records the
/// writes), running `bash -c script`.
pub fn faulty_host(
    dir: &std::path::Path,
    lease: Duration,
    extra: &[&str],
    script: &str,
) -> Command {
    let url = format!("redb://{}", dir.join("leases.redb").display());
    let lease = format!("{}s", lease.as_secs());
    let mut args = vec!["--storage", &url, "--leadership-duration", &lease];
    args.extend(extra);
    args.extend(["--", "bash", "-c", script]);
    let mut command = vvm_host(&args);
    command.env("VVM_HOST_FAULT_FILE", dir.join("fault"));
    command
}

/// When the lease granted by the last write of a [`faulty_host`] on `dir`
/// ends.
pub fn lease_end(dir: &std::path::Path, lease: Duration) -> std::time::SystemTime {
    last_write(&dir.join("fault")) + lease
}

/// A child process killed and reaped when dropped, so that a failed
/// assertion leaves nothing running.
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The wall-clock start of the last successful write that vvm-host's
/// fault-injection hook saw (see `VVM_HOST_FAULT_FILE`).
pub fn last_write(fault_file: &std::path::Path) -> std::time::SystemTime {
    let mut path = fault_file.as_os_str().to_owned();
    path.push(".last-write");
    let nanos: u64 = std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::time::UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// A finished command's exit code (-1 when signalled), stdout and stderr.
pub fn text(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Candidates of `lock` as `vvm-host status --json` lists them.
pub fn candidates(storage: &str, lock: &str) -> usize {
    let out = Command::new(bin())
        .args(["status", "--json", "--storage", storage, lock])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    json.pointer("/keys/0/candidates")
        .and_then(|c| c.as_array().map(Vec::len))
        .unwrap_or(0)
}

/// Waits (at most [`LIMIT`]) until `status` lists `n` candidates of `lock`.
pub fn wait_for_candidates(storage: &str, lock: &str, n: usize) {
    let deadline = Instant::now() + LIMIT;
    while candidates(storage, lock) < n {
        assert!(Instant::now() < deadline, "{n} candidates never listed");
        std::thread::sleep(Duration::from_millis(100));
    }
}
