//! Helpers shared by the plain (`harness = false`) benchmarks: latency
//! summaries and child processes that report lines on stdout.

#![allow(dead_code)] // each bench uses a part

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// p50, p99, max of `samples` (sorted in place).
pub(crate) fn percentiles(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[index]
    };
    (at(0.50), at(0.99), at(1.0))
}

/// Formats a duration in the unit that suits it.
pub(crate) fn fmt(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

/// Re-runs this bench binary as a child with `env` set to `spec`; every line
/// it prints is sent to `lines` tagged with `id`.
pub(crate) fn spawn_self(
    env: &str,
    spec: &str,
    id: usize,
    lines: mpsc::Sender<(usize, String)>,
) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--bench")
        .env(env, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send((id, line)).is_err() {
                break;
            }
        }
    });
    child
}
