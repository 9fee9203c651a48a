//! Helpers shared by the plain (`harness = false`) benchmarks: latency
//! summaries and child processes that report lines on stdout.

#![allow(dead_code)] // each bench uses a part

use std::{
    future::Future,
    io::{BufRead, BufReader},
    path::PathBuf,
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

/// p50, p99 and max of `samples` (sorted in place) as three columns.
pub(crate) fn columns(samples: &mut [Duration]) -> String {
    let (p50, p99, max) = percentiles(samples);
    format!("{:>9} {:>9} {:>9}", fmt(p50), fmt(p99), fmt(max))
}

/// Prints a row of the latency table of the hand-over benchmarks.
pub(crate) fn report(name: &str, mut samples: Vec<Duration>) {
    let n = samples.len();
    println!("{name:<46} {n:>5} {}", columns(&mut samples));
}

/// The head of the table [`report`] prints rows of.
pub(crate) fn report_head() {
    println!(
        "{:<46} {:>5} {:>9} {:>9} {:>9}",
        "case", "n", "p50", "p99", "max"
    );
}

/// The benchmarks' runtime: two worker threads, as the machines they
/// compare against.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The `main` of a benchmark that re-runs itself as children: in a child
/// started by [`spawn_self`] (`env` set), runs `child` with the spec; without
/// `--bench` (`cargo bench` passes it, `cargo test --benches` does not)
/// only checks that the benchmark starts; else runs `bench` with a fresh
/// temporary directory for its files, removed once it is done.
pub(crate) fn main_with_children<C, B>(
    env: &str,
    child: impl FnOnce(String) -> C,
    bench: impl FnOnce(PathBuf) -> B,
) where
    C: Future<Output = ()>,
    B: Future<Output = ()>,
{
    let runtime = runtime();
    if let Ok(spec) = std::env::var(env) {
        runtime.block_on(child(spec));
    } else if std::env::args().any(|arg| arg == "--bench") {
        let dir = tempfile::tempdir().unwrap();
        runtime.block_on(bench(dir.path().to_path_buf()));
    }
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

/// Runs `n` children of this bench binary ([`spawn_self`], child `id` with
/// `spec(id)`) to their end; every line they printed, tagged with its child,
/// in the order received. Panics if a child fails.
pub(crate) fn run_children(
    env: &str,
    n: usize,
    spec: impl Fn(usize) -> String,
) -> Vec<(usize, String)> {
    let (lines_tx, lines_rx) = mpsc::channel();
    let mut children: Vec<_> = (0..n)
        .map(|id| spawn_self(env, &spec(id), id, lines_tx.clone()))
        .collect();
    drop(lines_tx);
    let lines = lines_rx.iter().collect();
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    lines
}
