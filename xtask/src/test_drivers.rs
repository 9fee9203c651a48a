//! `cargo xtask test-drivers`.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;

mod skips;

use crate::{
    engines::{self, Engine, Started},
    workspace_build::{self, TestBinary},
};

/// Options of `test-drivers`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Run only these engines (default: every engine marked default; see
    /// `engines::all`).
    #[arg(long = "engine", value_name = "NAME")]
    engines: Vec<String>,
    /// Run every engine in a container (testcontainers; images overridable
    /// with `TTL_IMAGE_<ENGINE>`) instead of as a local process.
    #[arg(long)]
    docker: bool,
    /// Extra arguments passed to the test binaries (after `--`).
    #[arg(last = true)]
    test_args: Vec<String>,
}

/// What happened to one engine.
struct Outcome {
    name: &'static str,
    startup: Option<Duration>,
    external: bool,
    passed: u64,
    failed: u64,
    ignored: u64,
    /// Tests left out because a program they need is missing.
    skipped: u64,
    /// What was skipped and why.
    skip_notes: Vec<String>,
    run_time: Duration,
    error: Option<String>,
    /// `(package/test, passed, failed, ignored)` per suite binary.
    suites: Vec<(String, u64, u64, u64)>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let all = match args.docker {
        true => crate::docker::engines(),
        false => engines::all(),
    };
    for wanted in &args.engines {
        if !all.iter().any(|e| e.name == wanted) {
            let names: Vec<_> = all.iter().map(|e| e.name).collect();
            anyhow::bail!("unknown engine {wanted:?}; known: {names:?}");
        }
    }
    let selected: Vec<&Engine> = all
        .iter()
        .filter(|e| {
            if args.engines.is_empty() {
                e.default
            } else {
                args.engines.iter().any(|w| w == e.name)
            }
        })
        .collect();
    if selected.is_empty() {
        anyhow::bail!("no engines to test");
    }
    let work_dir = engines::work_dir();
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating {}", work_dir.display()))?;
    let mut binaries = workspace_build::build()?.tests;
    let copies = keep_private_copies(&mut binaries, &selected, &work_dir)?;

    let mut outcomes = Vec::new();
    for engine in selected {
        let engine_started = Instant::now();
        outcomes.extend(run_engine(engine, &work_dir, &binaries, &args.test_args));
        println!(
            "== {}: wall time {:.1}s ==",
            engine.name,
            engine_started.elapsed().as_secs_f64()
        );
    }

    let _ = std::fs::remove_dir_all(&copies);
    println!();
    println!("== test-drivers summary ==");
    println!(
        "{:<20} {:>10} {:>7} {:>7} {:>8} {:>9}  status",
        "engine", "startup", "passed", "failed", "ignored", "suite"
    );
    let mut ok = true;
    for o in &outcomes {
        let startup = match (o.external, o.startup) {
            (true, _) => "external".to_string(),
            (false, Some(d)) => format!("{:.1}s", d.as_secs_f64()),
            (false, None) => "-".to_string(),
        };
        let status = match &o.error {
            Some(e) => {
                ok = false;
                format!("FAILED: {e}")
            }
            None if o.failed > 0 || o.passed == 0 => {
                ok = false;
                "FAILED".to_string()
            }
            None => "ok".to_string(),
        };
        println!(
            "{:<20} {:>10} {:>7} {:>7} {:>8} {:>8.1}s  {status}",
            o.name,
            startup,
            o.passed,
            o.failed,
            o.ignored,
            o.run_time.as_secs_f64()
        );
        for (suite, passed, failed, ignored) in &o.suites {
            println!("  {suite:<31}{passed:>6} {failed:>7} {ignored:>8}");
        }
        for note in &o.skip_notes {
            println!("  {note}");
        }
    }
    let passed: u64 = outcomes.iter().map(|o| o.passed).sum();
    let failed: u64 = outcomes.iter().map(|o| o.failed).sum();
    let skipped: u64 = outcomes.iter().map(|o| o.skipped).sum();
    match skipped {
        0 => println!("test-drivers: {passed} passed, {failed} failed"),
        _ => println!("test-drivers: {passed} passed, {failed} failed, {skipped} skipped"),
    }
    if !ok {
        anyhow::bail!("test-drivers failed");
    }
    Ok(())
}

impl Outcome {
    fn new(name: &'static str) -> Self {
        Outcome {
            name,
            startup: None,
            external: false,
            passed: 0,
            failed: 0,
            ignored: 0,
            skipped: 0,
            skip_notes: Vec::new(),
            run_time: Duration::ZERO,
            error: None,
            suites: Vec::new(),
        }
    }
}

/// Copies the selected engines' test binaries under `work_dir` and points
/// at the copies. Worktrees of this workspace sharing one
/// `CARGO_TARGET_DIR` build to the same file names (cargo hashes path
/// packages relative to the workspace root), so another checkout's build
/// could replace a binary while the suites run; the copy taken right after
/// the build keeps this checkout's.
fn keep_private_copies(
    binaries: &mut HashMap<(String, String), TestBinary>,
    selected: &[&Engine],
    work_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let private = work_dir.join(format!("test-binaries-{}", std::process::id()));
    std::fs::create_dir_all(&private).with_context(|| format!("creating {}", private.display()))?;
    for engine in selected {
        for (package, test) in engine.suites {
            let key = (package.to_string(), test.to_string());
            let Some(binary) = binaries.get_mut(&key) else {
                continue;
            };
            if binary.executable.starts_with(&private) {
                continue;
            }
            let Some(name) = binary.executable.file_name() else {
                continue;
            };
            let copy = private.join(name);
            std::fs::copy(&binary.executable, &copy)
                .with_context(|| format!("copying {}", binary.executable.display()))?;
            binary.executable = copy;
        }
    }
    Ok(private)
}

/// Starts `engine` (or uses its external endpoint), runs its suites, and
/// with a [`engines::Degraded`] round breaks it and runs them again: one
/// outcome per round. The engine is stopped before this returns.
fn run_engine(
    engine: &Engine,
    work_dir: &Path,
    binaries: &HashMap<(String, String), TestBinary>,
    test_args: &[String],
) -> Vec<Outcome> {
    let mut outcome = Outcome::new(engine.name);
    println!("== {}: starting ==", engine.name);
    let started = Instant::now();
    let mut running: Started = match engine.external() {
        Some(external) => {
            outcome.external = true;
            external
        }
        None => match (engine.start)(&work_dir.join(engine.name)) {
            Ok(running) => running,
            Err(err) => {
                outcome.error = Some(format!("could not start: {err:#}"));
                eprintln!("{}: could not start: {err:#}", engine.name);
                return vec![outcome];
            }
        },
    };
    if !outcome.external {
        outcome.startup = Some(started.elapsed());
        println!(
            "== {}: ready in {:.1}s ==",
            engine.name,
            started.elapsed().as_secs_f64()
        );
    }
    run_suites(engine, binaries, &running, test_args, &mut outcome);
    let mut outcomes = vec![outcome];
    if let Some(degraded) = &engine.degraded {
        let mut second = Outcome::new(degraded.name);
        if outcomes[0].external {
            second.error = Some("skipped: an external engine is never broken on purpose".into());
        } else {
            println!("== {}: breaking {} ==", degraded.name, engine.name);
            match (degraded.apply)(&mut running) {
                Ok(()) => run_suites(engine, binaries, &running, test_args, &mut second),
                Err(err) => second.error = Some(format!("could not degrade: {err:#}")),
            }
        }
        outcomes.push(second);
    }
    drop(running);
    println!("== {}: stopped ==", engine.name);
    outcomes
}

/// Runs every suite of `engine` against `running`, adding to `outcome`.
fn run_suites(
    engine: &Engine,
    binaries: &HashMap<(String, String), TestBinary>,
    running: &Started,
    test_args: &[String],
    outcome: &mut Outcome,
) {
    let suite_started = Instant::now();
    for (package, test) in engine.suites {
        let Some(binary) = binaries.get(&(package.to_string(), test.to_string())) else {
            outcome.error = Some(format!("{package}: no test target {test:?} was built"));
            continue;
        };
        if let Err(err) = run_suite(
            engine.name,
            package,
            test,
            binary,
            running,
            test_args,
            outcome,
        ) {
            outcome.error = Some(format!("{package}: {err:#}"));
        }
    }
    outcome.run_time = suite_started.elapsed();
}

fn run_suite(
    engine: &str,
    package: &str,
    test: &str,
    binary: &TestBinary,
    running: &Started,
    test_args: &[String],
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let skip = skips::for_suite(engine, &running.env, package, test, &binary.executable)?;
    outcome.skipped += skip.count;
    outcome.skip_notes.extend(skip.notes);
    // As `cargo test` runs it: from the package's directory.
    let mut cmd = Command::new(&binary.executable);
    cmd.args(["--ignored", "--test-threads", "16"])
        .args(&skip.args)
        .args(test_args)
        .current_dir(&binary.package_dir)
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .envs(running.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped());
    println!("== running {package} --test {test} ==");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {}", binary.executable.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut saw_result = false;
    let mut suite = (format!("{package}/{test}"), 0, 0, 0);
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(counts) = parse_result_line(&line) {
            saw_result = true;
            outcome.passed += counts.0;
            outcome.failed += counts.1;
            outcome.ignored += counts.2;
            (suite.1, suite.2, suite.3) =
                (suite.1 + counts.0, suite.2 + counts.1, suite.3 + counts.2);
        }
    }
    outcome.suites.push(suite);
    let status = child.wait()?;
    if !saw_result {
        anyhow::bail!("the test binary printed no result line ({status})");
    }
    if !status.success() && outcome.failed == 0 {
        anyhow::bail!("the test binary failed ({status})");
    }
    Ok(())
}

/// Parses libtest's `test result: ok. 3 passed; 1 failed; 2 ignored; ...`.
fn parse_result_line(line: &str) -> Option<(u64, u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let mut counts = (0, 0, 0);
    for part in rest.split(';') {
        let mut words = part.split_whitespace().rev();
        let (Some(label), Some(n)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        match label.trim_end_matches('.') {
            "passed" => counts.0 = n,
            "failed" => counts.1 = n,
            "ignored" => counts.2 = n,
            _ => {}
        }
    }
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::parse_result_line;

    #[test]
    fn parses_libtest_summary() {
        assert_eq!(
            parse_result_line(
                "test result: ok. 41 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 9.1s"
            ),
            Some((41, 0, 2))
        );
        assert_eq!(
            parse_result_line("test result: FAILED. 40 passed; 1 failed; 0 ignored;"),
            Some((40, 1, 0))
        );
        assert_eq!(parse_result_line("running 3 tests"), None);
    }
}
