//! `cargo xtask bench scale`: many leaderships in one process, measured
//! (`crates/elections-scale`), on an engine this starts itself.
//!
//! ```text
//! cargo xtask bench scale --engine mem|redb|valkey|postgres|etcd|cassandra|dynamodb --keys N
//! ```
//!
//! A benchmark, not a test: it prints figures and fails only when it
//! cannot run. By default the program is a release build (figures worth
//! quoting); `--from-test-build` runs the workspace test build's binary
//! instead (no compile: CI's smoke run, whose figures say nothing).

use std::{path::PathBuf, process::Command};

use anyhow::Context;

use crate::engines;

/// Options of `bench`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// N leaderships held by one process: renewals/s, CPU per renewal, lag, shed, killer firings.
    Scale(ScaleArgs),
}

#[derive(clap::Args)]
struct ScaleArgs {
    /// `mem`, `redb`, or an engine xtask starts (`valkey`, `postgres`, `etcd`, `cassandra`, `dynamodb`).
    #[arg(long, default_value = "mem")]
    engine: String,
    /// Leaderships to hold.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// The leadership duration.
    #[arg(long, default_value = "20s")]
    duration: String,
    /// How long to measure once the keys are held.
    #[arg(long, default_value = "60s")]
    run: String,
    /// Acquisition attempts in flight at once during the ramp.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Run the workspace test build's binary (no compile; a smoke run).
    #[arg(long)]
    from_test_build: bool,
}

/// `(engine, engines::all() entry, the variable it sets)` for the engines
/// xtask starts.
const STARTED: &[(&str, &str, &str)] = &[
    ("valkey", "valkey", "VALKEY_URL"),
    ("postgres", "postgres", "POSTGRES_URL"),
    ("etcd", "etcd", "ETCD_URL"),
    ("cassandra", "cassandra", "SCYLLA_URI"),
    ("dynamodb", "dynamodb", "DYNAMODB_ENDPOINT"),
];

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    match args.what {
        What::Scale(args) => scale(&args),
    }
}

fn scale(args: &ScaleArgs) -> anyhow::Result<()> {
    let program = if args.from_test_build {
        crate::workspace_build::build()?.bin("elections-scale")?
    } else {
        release_binary()?
    };
    let work_dir = engines::work_dir().join("bench-scale");
    std::fs::create_dir_all(&work_dir)?;
    // Kept alive (and stopped on drop) for the run.
    let mut _running = None;
    let mut store_pid = None;
    let url = match args.engine.as_str() {
        "mem" => "mem".to_owned(),
        "redb" => {
            let file = work_dir.join(format!("scale-{}.redb", std::process::id()));
            let _ = std::fs::remove_file(&file);
            format!("redb://{}", file.display())
        }
        name => {
            let (_, entry, var) = STARTED
                .iter()
                .find(|(n, _, _)| *n == name)
                .with_context(|| format!("unknown engine {name}"))?;
            let all = engines::all();
            let engine = all
                .iter()
                .find(|e| e.name == *entry)
                .with_context(|| format!("no engine {entry}"))?;
            println!("== bench scale {name}: starting the engine ==");
            let started = match engine.external() {
                Some(external) => external,
                None => (engine.start)(&work_dir.join(engine.name))?,
            };
            store_pid = started.pids().first().copied();
            let value = started
                .env
                .iter()
                .find(|(k, _)| k == var)
                .map(|(_, v)| crate::chaos::store_url(name, v))
                .with_context(|| format!("the engine did not set {var}"))?;
            _running = Some(started);
            value
        }
    };
    println!(
        "== bench scale {}: {} keys, d = {}, window {} ==",
        args.engine, args.keys, args.duration, args.run
    );
    let mut command = Command::new(&program);
    command
        .arg("--storage")
        .arg(&url)
        .arg("--keys")
        .arg(args.keys.to_string())
        .arg("--duration")
        .arg(&args.duration)
        .arg("--run")
        .arg(&args.run)
        .arg("--concurrency")
        .arg(args.concurrency.to_string());
    if let Some(pid) = store_pid {
        command.arg("--store-pid").arg(pid.to_string());
    }
    let started = std::time::Instant::now();
    let status = command
        .status()
        .with_context(|| format!("running {}", program.display()))?;
    anyhow::ensure!(status.success(), "elections-scale failed ({status})");
    println!(
        "== bench scale {}: done in {:.0} s ==",
        args.engine,
        started.elapsed().as_secs_f64()
    );
    if args.engine == "redb" {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    Ok(())
}

/// `cargo build --release -p elections-scale`, and its binary.
fn release_binary() -> anyhow::Result<PathBuf> {
    let root = crate::tidy::workspace_root();
    let status = crate::cargo::command()
        .current_dir(&root)
        .args(["build", "--release", "-p", "elections-scale"])
        .status()
        .context("running cargo build")?;
    anyhow::ensure!(status.success(), "the release build failed ({status})");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    Ok(target_dir.join("release").join("elections-scale"))
}
