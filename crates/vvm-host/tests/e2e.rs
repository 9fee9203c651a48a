//! End to end: the real `vvm-host` binary, its exit statuses, signals, and
//! the command it runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{ExitStatus, Stdio};

use common::*;
use nix::sys::signal::Signal;

#[test]
fn exit_status_of_a_short_command_is_propagated() {
    let output = vvm_host(&["--", "sh", "-c", "echo key=$VVM_HOST_KEY; exit 7"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "key=e2e/1\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("leadership released"), "{stderr}");

    let output = vvm_host(&["--", "true"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0));

    let output = vvm_host(&["--", "/nonexistent/command"]).output().unwrap();
    assert_eq!(output.status.code(), Some(127));
}

/// Starts a long-running shell command under vvm-host, sends SIGTERM to
/// vvm-host once the command runs; returns vvm-host's status, the
/// command's pid, its stdout and vvm-host's log.
fn run_and_terminate(extra: &[&str], script: &str) -> (ExitStatus, i32, String, String) {
    run_and_signal(extra, script, Signal::SIGTERM)
}

/// As [`run_and_terminate`], with `signal` instead of SIGTERM.
fn run_and_signal(
    extra: &[&str],
    script: &str,
    signal: Signal,
) -> (ExitStatus, i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leases.redb");
    let url = format!("redb://{}", file.display());
    let mut args = vec!["--storage", &url];
    args.extend(extra);
    args.extend(["--", "sh", "-c", script]);
    let mut child = vvm_host(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out_rx, out) = lines(child.stdout.take().unwrap());
    let (_, err) = lines(child.stderr.take().unwrap());
    let pid = read_number(&out_rx, "pid=");
    wait_for_line(&out_rx, "ready");
    let (status, log) = stop(&mut child, signal, err);
    (status, pid, out.join().unwrap(), log)
}

/// `signal` to vvm-host while its command traps SIGTERM: the command gets
/// SIGTERM, stops, and only then is leadership released; exit 0. The log.
fn stops_the_command_then_releases_leadership(signal: Signal) -> String {
    let (status, pid, stdout, log) = run_and_signal(
        &["--grace-period", "30s"],
        &format!(
            "{ECHO_PID}; trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.1; done"
        ),
        signal,
    );
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(stdout.contains("got-term"), "{stdout}");
    assert_gone(pid);
    // The order: the command stopped, then leadership was released.
    let stopped = log.find("command stopped").expect(&log);
    let released = log.find("leadership released").expect(&log);
    assert!(stopped < released, "{log}");
    log
}

/// SIGINT (Ctrl-C) to vvm-host: the command gets SIGTERM (not SIGINT: the
/// guard keeps it out of the terminal's group), stops, and only then is
/// leadership released.
#[test]
fn sigint_stops_the_command_then_releases_leadership() {
    stops_the_command_then_releases_leadership(Signal::SIGINT);
}

#[test]
fn sigterm_stops_the_command_then_releases_leadership() {
    let log = stops_the_command_then_releases_leadership(Signal::SIGTERM);
    assert!(!log.contains("SIGKILL"), "{log}");
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
    let (status, pid, _stdout, log) = run_and_terminate(
        &["--grace-period", "500ms"],
        &format!("{ECHO_PID}; trap '' TERM; echo ready; while :; do sleep 0.1; done"),
    );
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("SIGKILL"), "{log}");
    assert_gone(pid);
    let killed = log.find("SIGKILL").expect(&log);
    let released = log.find("leadership released").expect(&log);
    assert!(killed < released, "{log}");
}

/// `vvm-host run NAME COMMAND...` without `--`, on the default storage.
#[test]
fn run_without_the_double_dash_leads_and_stops_on_sigint() {
    // The default storage: a redb file under $XDG_DATA_HOME/vvm-host/.
    let data = tempfile::tempdir().unwrap();
    let (mut child, out_rx, err) = spawn_piped(
        std::process::Command::new(bin())
            .args(["run", "--address", "e2e", NAME, "sh", "-c"])
            .arg("echo key=$VVM_HOST_KEY; exec sleep 1000")
            .env("XDG_DATA_HOME", data.path()),
    );
    assert_eq!(wait_for_line(&out_rx, "key="), "key=e2e/1");
    let (status, log) = stop(&mut child, Signal::SIGINT, err);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("leadership released"), "{log}");
    let file = data.path().join("vvm-host").join("vvm-host.redb");
    assert_eq!(stored_key1(&file), None, "{log}");
}

#[test]
fn bad_options_are_refused_clearly() {
    let output = vvm_host(&["--cluster-size", "0"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--cluster-size"));

    let output = vvm_host(&["--leadership-duration", "1500ms", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("whole seconds"), "{stderr}");

    let output = vvm_host(&["--leadership-duration", "0s", "--", "true"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("must be positive"));

    // `run` without a name (and so without a command) is a usage error.
    let output = std::process::Command::new(bin())
        .arg("run")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("<NAME>"));

    let output = vvm_host(&["--storage", "nope://x"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown storage scheme"), "{stderr}");
}

#[test]
fn storage_that_cannot_be_opened_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-database.redb");
    std::fs::write(&file, b"this is not a redb file").unwrap();
    let url = format!("redb://{}", file.display());
    let output = vvm_host(&["--storage", &url, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    // The error status moves with its flag, like the others.
    let moved = vvm_host(&["--storage", &url, "--exit-code-error", "77", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(moved.status.code(), Some(77));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot open storage"), "{stderr}");
    assert!(stderr.contains("not a redb database"), "{stderr}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"this is not a redb file",
        "left untouched"
    );
}

/// In the exclusive mode a redb file belongs to one process: a second
/// vvm-host on it is refused (the default, shared mode is for several).
#[test]
fn an_exclusive_redb_file_held_by_another_vvm_host_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "redb://{}?mode=exclusive",
        dir.path().join("leases.redb").display()
    );
    let (mut first, _, err) = spawn_started(&["--storage", &url, "--", "sleep", "1000"]);

    let second = vvm_host(&["--storage", &url, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("already open"), "{stderr}");

    let (status, log) = stop(&mut first, Signal::SIGTERM, err);
    assert_eq!(status.code(), Some(0), "{log}");
}

/// A crashed vvm-host's record survives in the redb file: the next one on
/// the same file finds the key held and leads only once the lease expired.
#[test]
fn after_a_crash_the_next_vvm_host_waits_for_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leases.redb");
    let url = format!("redb://{}", file.display());
    let args = [
        "--storage",
        &url,
        "--leadership-duration",
        "4s",
        "--",
        "sleep",
        "1000",
    ];

    let (mut crashed, _, _) = spawn_started(&args);
    crashed.kill().unwrap(); // SIGKILL: no release
    crashed.wait().unwrap();
    assert!(
        stored_key1(&file).is_some(),
        "the record outlives the crash"
    );

    let (mut next, err_rx, err) = spawn_logging(&mut vvm_host(&args));
    let standby = wait_for_line(&err_rx, "key held by another node");
    assert!(
        standby.contains("holder=\"e2e#pid") && standby.contains("waiting indefinitely"),
        "{standby}"
    );
    wait_for_line(&err_rx, "command started");
    let (status, log) = stop(&mut next, Signal::SIGTERM, err);
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(stored_key1(&file), None, "{log}");
}

/// `vvm-host status` names the leader of a running vvm-host (another process
/// on the same shared file) and the one a crashed vvm-host left in the file,
/// with its fencing token and the lease's time left, which it never extends;
/// exits 3 while no key has a leader.
#[test]
fn status_names_the_leader_and_reads_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leases.redb");
    let url = format!("redb://{}", file.display());
    let status = |extra: &[&str]| {
        let mut command = std::process::Command::new(bin());
        command
            .args(["status", "--storage", &url])
            .args(extra)
            .arg(NAME);
        command.output().unwrap()
    };
    let json_status = || {
        let output = status(&["--json"]);
        assert_eq!(output.status.code(), Some(0));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };

    // No store yet: status says so, with its own status, and creates nothing.
    let missing = status(&[]);
    assert_eq!(missing.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no store at"));
    assert!(!file.exists(), "status created the store");

    let mut leader = leader_on(&url);

    // While it runs, in another process.
    let live = json_status();
    assert_eq!(live["leaders"], 1, "{live}");
    assert!(
        live["keys"][0]["leader"]
            .as_str()
            .unwrap()
            .starts_with("e2e#pid"),
        "{live}"
    );
    assert_eq!(live["keys"][0]["expiry"], "expires", "{live}");
    // The leader's token (tokens start from the wall clock, see
    // `elections::fencing`): the crashed leader's record keeps it.
    let token = live["keys"][0]["fencing_token"].as_u64().unwrap();
    assert!(token > 1, "{live}");
    let left = live["keys"][0]["time_left_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 60_000, "{live}");

    leader.kill().unwrap();
    leader.wait().unwrap();

    let table = status(&["--cluster-size", "2"]);
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().unwrap().contains("TIME LEFT"), "{text}");
    let row = text.lines().find(|l| l.starts_with("e2e/1")).expect(&text);
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert!(columns[1].starts_with("e2e#pid"), "{text}");
    assert_eq!(columns[2], token.to_string(), "{text}");
    assert!(columns[3].ends_with('s'), "{text}");
    let row = text.lines().find(|l| l.starts_with("e2e/2")).expect(&text);
    assert!(row.contains("(none)"), "{text}");

    let body = json_status();
    assert_eq!(body["leaders"], 1);
    // The VVM's value: the address, then this process's id.
    let leader = body["keys"][0]["leader"].as_str().unwrap();
    assert!(leader.starts_with("e2e#pid"), "{leader}");
    assert_eq!(body["keys"][0]["fencing_token"], token);
    let first = body["keys"][0]["time_left_ms"].as_u64().unwrap();

    // Read only: the lease runs down between two looks (nothing renews it).
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    let later = json_status()["keys"][0]["time_left_ms"].as_u64().unwrap();
    assert!(
        later < first,
        "status extended the lease: {first} ms, then {later} ms"
    );

    // Read only: the record is the crashed leader's, unchanged.
    assert!(stored_key1(&file).unwrap().starts_with(b"e2e#"));
}

/// `--pass-stdin` gives the command vvm-host's standard input, in every
/// containment mode that works here (through the guard, and the
/// namespace's init); without it the command reads /dev/null even while
/// vvm-host's own standard input is an open pipe nobody writes to.
#[test]
fn pass_stdin_gives_the_command_vvm_hosts_input_and_otherwise_dev_null() {
    use std::io::Write;
    let mut modes = vec!["subreaper", "pidns"];
    if fixtures::is_root() {
        modes.push("cgroup");
    }
    for mode in modes {
        let mut host = vvm_host(&["--containment", mode, "--pass-stdin", "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut input = host.stdin.take().unwrap();
        input.write_all(b"line one\nline two\n").unwrap();
        drop(input);
        let output = host.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{mode}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "line one\nline two\n",
            "{mode}"
        );

        // Without the flag: EOF at once, though our end stays open.
        let mut host = vvm_host(&["--containment", mode, "--", "sh", "-c", "cat; echo eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let input = host.stdin.take().unwrap();
        let status = wait_with_limit(&mut host);
        drop(input);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut host.stdout.take().unwrap(), &mut out).unwrap();
        assert_eq!(status.code(), Some(0), "{mode}");
        assert_eq!(out, "eof\n", "{mode}");
    }
}
