//! vvm-host's failures as an operator reads them: one line, each cause said
//! once, no debug dumps. Real processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};

use common::*;

fn run(args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command.arg("run").args(["--address", "errors"]).args(args);
    command.stdin(Stdio::null());
    command
}

/// Each "cannot open storage" error names its cause once.
#[test]
fn storage_errors_say_their_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.redb");
    std::fs::write(&junk, b"not a database").unwrap();
    let directory = dir.path().join("a-directory.redb");
    std::fs::create_dir(&directory).unwrap();
    for (path, cause) in [
        (
            "/proc/vvm-host-no-such/x.redb".to_owned(),
            "No such file or directory",
        ),
        (directory.display().to_string(), "it is a directory"),
        (junk.display().to_string(), "is not a redb database file"),
    ] {
        let url = format!("redb://{path}");
        let output = run(&["--storage", &url, "job", "true"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(125), "{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("cannot open storage"))
            .expect(&stderr);
        assert_eq!(line.matches(cause).count(), 1, "{line}");
    }
}

/// A network store that refuses the connection: `status` says so in one
/// line, the OS's words once (`Connection refused (os error 111)`), with
/// no debug structure and no segment said twice, for every network driver
/// this binary has (the others are reported skipped).
#[test]
fn a_refused_connection_is_said_once_per_driver() {
    for url in [
        "redis://127.0.0.1:1",
        "postgres://u:p@127.0.0.1:1/db?connect_timeout=2s",
        "etcd://127.0.0.1:1",
    ] {
        let output = Command::new(bin())
            .args(["status", "--storage", url, "x"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("is not built in") {
            eprintln!("SKIPPED {url}: driver not built into this vvm-host");
            continue;
        }
        assert_eq!(output.status.code(), Some(125), "{url}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{url}: one line: {stderr}");
        let line = lines[0];
        assert_eq!(line.matches("Connection refused").count(), 1, "{line}");
        assert!(
            !line.contains("Os {") && !line.contains("tonic::"),
            "{line}"
        );
        let segments: Vec<&str> = line.split(": ").collect();
        assert!(
            segments.windows(2).all(|w| w[0] != w[1]),
            "a segment said twice: {line}"
        );
    }
}
