//! The benchmark as a program: it holds what it was asked to, reports it
//! as JSON, and says plainly when it cannot open the store. (Its figures
//! are not checked here: speed is measured, never asserted.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_elections-scale"))
}

#[test]
fn holds_every_key_and_reports_json() {
    let output = bench()
        .args([
            "--storage",
            "mem",
            "--keys",
            "300",
            "--duration",
            "4s",
            "--run",
            "2s",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(json["held"], 300, "{json}");
    assert_eq!(json["not_acquired"], 0, "{json}");
    assert_eq!(json["errors"], 0, "{json}");
    assert_eq!(json["killer_firings"], 0, "{json}");
    // 2 s of a 4 s lease: every key renewed about twice (d/4 = 1 s).
    assert!(json["renewals"].as_u64().unwrap() > 0, "{json}");
}

#[test]
fn a_store_that_cannot_be_opened_is_said_once() {
    let output = bench()
        .args(["--storage", "nosuch://x", "--keys", "1", "--run", "1s"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("nosuch").count(), 1, "{stderr}");
}
