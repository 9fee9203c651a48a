//! `vvm-host` as users of `consul lock` and `etcdctl lock` expect it: a
//! named lock, a missing program caught before anything else, errors said
//! once, quiet success, completions, a recognisable guard. Real processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{fixtures::*, *};
use nix::sys::signal::Signal;

fn run(args: &[&str]) -> Command {
    run_as("cli", args)
}

fn run_as(address: &str, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.arg("run").args(["--address", address]).args(args);
    command.stdin(Stdio::null());
    command
}

#[test]
fn two_names_are_two_locks_on_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("leases.redb").display());
    let mut nodes = Vec::new();
    for name in ["billing", "reports"] {
        let mut child = run(&[
            "--storage",
            &url,
            name,
            "sh",
            "-c",
            &format!("echo leading {name}; exec sleep 1000"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let (out, _) = lines(child.stdout.take().unwrap());
        wait_for_line(&out, &format!("leading {name}"));
        nodes.push(child);
    }
    // Both lead at once: different names never block each other.
    for mut child in nodes {
        signal(&child, Signal::SIGTERM);
        assert_eq!(wait_with_limit(&mut child).code(), Some(0));
    }
}

#[test]
fn a_missing_program_is_caught_before_the_store_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leases.redb");
    let url = format!("redb://{}", file.display());
    // No store yet: it is not created.
    let started = Instant::now();
    let output = run(&["--storage", &url, "job", "nonexistent-typo-vvm"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nonexistent-typo-vvm: command not found"),
        "{stderr}"
    );
    assert!(!file.exists(), "the store was created");
    // Not executable: 126, like a shell.
    let plain = dir.path().join("plain-file");
    std::fs::write(&plain, "").unwrap();
    let output = run(&["--storage", &url, "job", plain.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(126));
    // Found on PATH only as a file that cannot be run: 126 as well, as
    // bash says it (not "command not found")
    let output = run(&["--storage", &url, "job", "plain-file"])
        .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("plain-file: Permission denied"), "{stderr}");

    // Another node leads the same name: the typo still fails at once, and
    // the store is left as it was.
    let mut leader = run(&["--storage", &url, "job", "sleep", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (log, _) = lines(leader.stderr.take().unwrap());
    wait_for_line(&log, "command started");
    let started = Instant::now();
    let output = run(&["--storage", &url, "job", "nonexistent-typo-vvm"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert!(started.elapsed() < Duration::from_secs(1));
    signal(&leader, Signal::SIGTERM);
    assert_eq!(wait_with_limit(&mut leader).code(), Some(0));
}

/// Success is quiet: with defaults, one line each for the acquisition,
/// the command's start (with the containment chosen), its exit and the
/// release; with `RUST_LOG=warn`, nothing. A command's own non-zero exit is
/// said once, at INFO, and passed on: it is the command's failure, not
/// vvm-host's.
#[test]
fn success_is_quiet_and_each_step_is_said_once() {
    let output = run(&["--storage", "mem", "job", "--", "true"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    let lines: Vec<&str> = log.lines().collect();
    for (line, said) in lines.iter().zip([
        "leadership acquired",
        "command started",
        "command exited",
        "leadership released",
    ]) {
        assert!(
            line.contains(" INFO ") && line.contains(said),
            "{said}: {log}"
        );
    }
    assert_eq!(lines.len(), 4, "{log}");
    assert!(lines[1].contains("containment="), "{log}");
    assert!(!log.contains("Some("), "values, not Options: {log}");

    let quiet = run(&["--storage", "mem", "job", "--", "true"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(quiet.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "", "silent at warn");

    let failed = run(&["--storage", "mem", "job", "--", "sh", "-c", "exit 3"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(3), "{log}");
    assert!(!log.contains("ERROR") && !log.contains("WARN"), "{log}");
    assert_eq!(log.matches("exit code 3").count(), 1, "said once: {log}");
}

/// `--log-format json`: one JSON object per line, with the level, the
/// message, the fields and the spans (the fencing token included).
#[test]
fn json_logs_are_one_object_per_line() {
    let output = run(&[
        "--storage",
        "mem",
        "--log-format",
        "json",
        "job",
        "--",
        "true",
    ])
    .env_remove("RUST_LOG")
    .output()
    .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{log}");
    let started = &lines[1];
    assert_eq!(started["level"], "INFO", "{log}");
    assert_eq!(started["fields"]["message"], "command started", "{log}");
    assert!(started["span"]["fencing_token"].is_u64(), "{log}");
    assert!(!log.contains('\u{1b}'), "no colour codes: {log}");
}

/// What `bash -i` offers for `words` (the last one being completed), with
/// the script `vvm-host completions bash` prints loaded.
fn bash_completes(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        r#"source '{}'
fn=$(complete -p vvm-host | sed -E 's/.*-F ([^ ]+).*/\1/')
COMP_WORDS=({})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
COMPREPLY=()
"$fn" vvm-host "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        script.display(),
        quoted.join(" ")
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-i", "-c", &program])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The bash script completes past the subcommand (clap_complete's names
/// for a hyphenated binary are mended), values included, and never offers
/// an internal entry point; zsh and fish scripts are printed too.
#[test]
fn completions_work_past_the_subcommand_in_bash() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("vvm-host.bash");
    let output = Command::new(bin())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    std::fs::write(&script, &output.stdout).unwrap();

    let top = bash_completes(&script, &["vvm-host", ""]);
    for sub in ["run", "status", "handover", "completions"] {
        assert!(top.contains(&sub.to_owned()), "{sub}: {top:?}");
    }
    assert!(!top.iter().any(|w| w.contains("man")), "{top:?}");
    let storage = bash_completes(&script, &["vvm-host", "run", "--st"]);
    assert_eq!(storage, ["--storage"], "{storage:?}");
    let modes = bash_completes(&script, &["vvm-host", "run", "--containment", ""]);
    for mode in ["auto", "cgroup", "pidns"] {
        assert!(modes.contains(&mode.to_owned()), "{mode}: {modes:?}");
    }
    let shells = bash_completes(&script, &["vvm-host", "completions", ""]);
    for shell in ["bash", "zsh", "fish"] {
        assert!(shells.contains(&shell.to_owned()), "{shell}: {shells:?}");
    }
    let handover = bash_completes(&script, &["vvm-host", "handover", "--t"]);
    assert!(handover.contains(&"--to".to_owned()), "{handover:?}");

    for shell in ["zsh", "fish"] {
        let output = Command::new(bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("storage") && !text.contains("__vvm-host-man"),
            "{text}"
        );
    }
}

#[test]
fn the_guard_is_named_vvm_host_guard() {
    let mut child = run(&[
        "--storage",
        "mem",
        "job",
        "sh",
        "-c",
        "echo up; exec sleep 1000",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // the job runs only once the guard has re-executed itself (before, the
    // forked child still has vvm-host's thread name)
    let (out, _) = lines(child.stdout.take().unwrap());
    wait_for_line(&out, "up");
    let guard = guard_of(child.id());
    let comm = std::fs::read_to_string(format!("/proc/{guard}/comm")).unwrap();
    assert_eq!(comm.trim(), "vvm-host-guard");
    let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap();
    assert!(
        cmdline.starts_with(b"vvm-host-guard\0"),
        "{:?}",
        String::from_utf8_lossy(&cmdline)
    );
    signal(&child, Signal::SIGTERM);
    assert_eq!(wait_with_limit(&mut child).code(), Some(0));
}

/// The man page in the repository is the one the binary renders: run
/// `cargo xtask man` after changing the options.
#[test]
fn the_man_pages_are_current() {
    for sub in [
        None,
        Some("run"),
        Some("status"),
        Some("handover"),
        Some("completions"),
    ] {
        let output = Command::new(bin())
            .arg("__vvm-host-man")
            .args(sub)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        let name = sub.map_or_else(|| "vvm-host.1".to_owned(), |s| format!("vvm-host-{s}.1"));
        let path = format!("{}/doc/{name}", env!("CARGO_MANIFEST_DIR"));
        let checked_in = std::fs::read(&path)
            .unwrap_or_else(|_| panic!("{path} is missing: run `cargo xtask man`"));
        assert!(
            output.stdout == checked_in,
            "{path} is stale: run `cargo xtask man`"
        );
    }
}

/// A second SIGTERM during the grace period kills the command at once,
/// as `docker compose` does; leadership is still released after it.
#[test]
fn a_second_signal_ends_the_grace_period() {
    let (mut child, out, log) = spawn_piped(&mut run(&[
        "--storage",
        "mem",
        "--grace-period",
        "60s",
        "job",
        "sh",
        "-c",
        "trap 'echo got-term' TERM; echo ready; while :; do sleep 0.1; done",
    ]));
    wait_for_line(&out, "ready");
    signal(&child, Signal::SIGTERM);
    wait_for_line(&out, "got-term");
    let second = Instant::now();
    signal(&child, Signal::SIGTERM);
    let status = wait_with_limit(&mut child);
    let log = log.join().unwrap();
    assert!(second.elapsed() < Duration::from_secs(10), "{log}");
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("second signal"), "{log}");
    assert!(log.contains("leadership released"), "{log}");
}

/// `--metrics-listen` raises vvm-host's own descriptor limit (its server
/// must survive many idle connections); the command gets the soft limit
/// vvm-host started with.
#[test]
fn the_command_keeps_the_descriptor_limit_vvm_host_started_with() {
    let script = format!(
        "ulimit -Sn 1000 && exec '{}' run --storage mem --metrics-listen 127.0.0.1:0 job sh -c 'echo soft=$(ulimit -Sn)'",
        bin().to_string_lossy()
    );
    let output = Command::new("sh").args(["-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.trim(), "soft=1000");
}

/// `status NAME --watch --json`: one line per change, started before the
/// leaders: no leader, then a, then (after a's orderly stop) b; each line
/// has the one-shot `--json` row's fields plus `time` and `change`, and b's
/// line carries b's own token (what one-shot status reads once b leads).
#[test]
fn status_watch_reports_each_change_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("leases.redb").display());
    // The store must exist for status: a first leader creates it.
    let mut a = run_as("a", &["--storage", &url, "job", "sleep", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (a_log, _) = lines(a.stderr.take().unwrap());
    wait_for_line(&a_log, "command started");
    let mut watcher = Command::new(bin())
        .args(["status", "--storage", &url, "--watch", "--json", "job"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (seen, _) = lines(watcher.stdout.take().unwrap());
    let first: serde_json::Value =
        serde_json::from_str(&wait_for_line(&seen, "\"change\"")).unwrap();
    assert_eq!(first["change"], "leader", "{first}");
    assert!(
        first["leader"].as_str().unwrap().starts_with("a#"),
        "{first}"
    );
    let mut b = run_as("b", &["--storage", &url, "job", "sleep", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (b_log, _) = lines(b.stderr.take().unwrap());
    wait_for_line(&b_log, "key held by another node");
    signal(&a, Signal::SIGTERM);
    assert_eq!(wait_with_limit(&mut a).code(), Some(0));
    wait_for_line(&b_log, "command started");
    // Then b, perhaps after a "no leader" between the two.
    let next: serde_json::Value = loop {
        let line: serde_json::Value =
            serde_json::from_str(&wait_for_line(&seen, "\"change\"")).unwrap();
        if line["change"] == "leader" {
            break line;
        }
        assert_eq!(line["change"], "no_leader", "{line}");
    };
    assert!(next["leader"].as_str().unwrap().starts_with("b#"), "{next}");
    assert!(next["fencing_token"].as_u64().unwrap() > first["fencing_token"].as_u64().unwrap());
    let once = Command::new(bin())
        .args(["status", "--storage", &url, "--json", "job"])
        .output()
        .unwrap();
    let once: serde_json::Value = serde_json::from_slice(&once.stdout).unwrap();
    let row = &once["keys"][0];
    assert_eq!(
        next["fencing_token"], row["fencing_token"],
        "{next} / {row}"
    );
    let fields = |v: &serde_json::Value| {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.retain(|k| k != "time" && k != "change");
        keys.sort();
        keys
    };
    assert_eq!(fields(&next), fields(row), "{next} / {row}");
    signal(&watcher, Signal::SIGINT);
    assert_eq!(wait_with_limit(&mut watcher).code(), Some(0));
    signal(&b, Signal::SIGTERM);
    assert_eq!(wait_with_limit(&mut b).code(), Some(0));
}

/// `--no-wait` (and `--acquisition-duration 0s`) tries once, as `flock -n`
/// does: 124 at once while the lock is held (said at INFO: the expected
/// answer), the command run when it is free.
#[test]
fn no_wait_tries_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("leases.redb").display());
    let mut holder = run_as(
        "holder",
        &[
            "--storage",
            &url,
            "lk",
            "sh",
            "-c",
            "echo leading; exec sleep 1000",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let (out, _) = lines(holder.stdout.take().unwrap());
    wait_for_line(&out, "leading");
    for once in [["--no-wait", ""], ["--acquisition-duration", "0s"]] {
        let args: Vec<&str> = once.into_iter().filter(|a| !a.is_empty()).collect();
        let mut command = run_as("other", &args);
        let output = command
            .args(["--storage", &url, "lk", "echo", "ran"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(124), "{once:?}: {log}");
        assert!(log.contains("not waiting"), "{log}");
        assert!(!log.contains("ERROR"), "{log}");
        assert!(output.stdout.is_empty(), "the command did not run");
    }
    signal(&holder, Signal::SIGTERM);
    assert_eq!(wait_with_limit(&mut holder).code(), Some(0));
    let output = run_as(
        "other",
        &["--no-wait", "--storage", &url, "lk", "echo", "ran"],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "ran\n");
}

/// An environment variable set but empty (`VVM_HOST_GRACE_PERIOD=` in a
/// unit file) counts as unset; every duration flag reads one syntax (a
/// bare number is seconds).
#[test]
fn empty_environment_variables_are_unset_and_durations_read_alike() {
    let output = run(&["--storage", "mem", "job", "true"])
        .env("VVM_HOST_GRACE_PERIOD", "")
        .env("VVM_HOST_LOG", "")
        .env("VVM_HOST_LOG_FORMAT", "")
        .env("VVM_HOST_EXIT_CODE_LOST", "")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert!(
        log.contains("leadership released"),
        "the default filter: {log}"
    );
    for (sub, flag) in [("run", "--grace-period"), ("handover", "--timeout")] {
        let mut command = Command::new(bin());
        command.args([sub, flag, "10", "--storage", "mem", "x"]);
        if sub == "run" {
            command.arg("true");
        }
        let output = command.output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!err.contains("invalid value"), "{sub} {flag} 10: {err}");
        assert_ne!(output.status.code(), Some(2), "{sub} {flag} 10: {err}");
    }
}

/// `redb://tmp/x.redb` (two slashes) would be a path relative to each
/// node's current directory: refused, with the absolute form, before
/// anything is created.
#[test]
fn a_relative_redb_url_is_refused_with_the_absolute_form() {
    let dir = tempfile::tempdir().unwrap();
    for sub in [&["status"][..], &["run"][..]] {
        let mut command = Command::new(bin());
        command
            .current_dir(dir.path())
            .args(sub)
            .args(["--storage", "redb://tmp/x.redb", "demo"]);
        if sub == ["run"] {
            command.arg("true");
        }
        let output = command.output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "{sub:?}: {err}");
        assert!(err.contains("relative"), "{err}");
        let absolute = format!("redb://{}/tmp/x.redb", dir.path().display());
        assert!(err.contains(&absolute), "{absolute}: {err}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing created"
        );
    }
}
