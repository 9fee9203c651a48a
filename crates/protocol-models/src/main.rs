//! `protocol-models`: check the protocol models and print what was explored.
//!
//! ```text
//! cargo run --release -p protocol-models -- all          # every model, then every seeded bug
//! cargo run --release -p protocol-models -- <model> [--bug NAME]
//! ```
//!
//! Exits 1 when a model has a violation or a seeded bug is not refuted, 2
//! on an unknown model or bug.

use std::process::ExitCode;

use clap::Parser;
use protocol_models::{
    handover,
    ownership::{self, Ownership},
    run::{self, Outcome},
    shortest::shortest_violation,
};

#[derive(Parser)]
#[command(about = "Model checks of the ownership and hand-over protocols")]
struct Args {
    /// Which model to check (`all` for every model and every seeded bug).
    model: String,
    /// Check the protocol with this seeded bug instead (must be refuted).
    #[arg(long)]
    bug: Option<String>,
    /// Checker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The bounds of a single model run: `full` (3 pods, one fault kind),
    /// `pairs` (2 pods, two fault kinds) or `small` (what the debug-build
    /// tests check). `all` checks the fixed models under `full` and
    /// `pairs`, and the seeded bugs under `full`.
    #[arg(long, default_value = "full", value_parser = ["full", "pairs", "small"])]
    bounds: String,
}

/// Prints `outcome`; whether it is what was expected: no violation for a
/// model as fixed, a refuted property (its trace printed) for a seeded bug.
fn report(outcome: &Outcome, seeded: bool) -> bool {
    println!("{}", outcome.summary());
    for violation in &outcome.violations {
        println!("  violated: {}", violation.property);
        for (i, step) in violation.trace.iter().enumerate() {
            println!("    {:>2}. {step}", i + 1);
        }
    }
    match (seeded, outcome.violations.is_empty()) {
        (false, true) | (true, false) => true,
        (false, false) => {
            println!("  FAILED: the model has a counterexample");
            false
        }
        (true, true) => {
            println!("  FAILED: the seeded bug was not found");
            false
        }
    }
}

/// The bounds called `name`.
fn bounds(name: &str) -> ownership::Config {
    match name {
        "small" => ownership::Config::SMALL,
        "pairs" => ownership::Config::PAIRS,
        "deep" => ownership::Config::DEEP,
        _ => ownership::Config::FULL,
    }
}

/// The ownership model under the bounds called `name`, fixed (`bug`
/// `None`) or with a seeded bug.
fn check_ownership(name: &str, bug: Option<ownership::Bug>, threads: usize) -> bool {
    let (name, config) = match bug.and_then(ownership::Bug::bounds) {
        Some(deeper) => ("deep", deeper),
        None => (name, bounds(name)),
    };
    let label = match bug {
        Some(bug) => format!("ownership --bounds {name} --bug {}", bug.name()),
        None => format!("ownership --bounds {name}"),
    };
    let ok = report(
        &run::check(&label, Ownership::new(config, bug), threads),
        bug.is_some(),
    );
    if bug.is_some()
        && let Some(steps) = ownership::counterexample(config, bug)
    {
        println!("  the same trace with the state after each step:");
        for (i, (step, state)) in steps.iter().enumerate() {
            println!("    {i:>2}. {step}\n          {state}");
        }
    }
    ok
}

/// Checks the hand-over model (with `bug` seeded), each refuted property's
/// trace replaced by the shortest one.
fn check_handover(name: &str, bug: Option<handover::Bug>, threads: usize) -> Outcome {
    let model = handover::HandOver { bug };
    let mut outcome = run::check(name, model, threads);
    for violation in &mut outcome.violations {
        if let Some(path) = shortest_violation(&model, &violation.property) {
            violation.trace = path.iter().map(|a| format!("{a:?}")).collect();
        }
    }
    outcome
}

/// The hand-over model: the protocol, then (with `bugs`) every seeded bug;
/// or only the bug named `bug`.
fn handover(bug: Option<&str>, bugs: bool, threads: usize) -> Result<bool, String> {
    if let Some(name) = bug {
        let bug = handover::Bug::parse(name).ok_or_else(|| {
            let known: Vec<_> = handover::Bug::ALL.iter().map(|b| b.name()).collect();
            format!("no seeded bug {name:?} in handover (known: {known:?})")
        })?;
        let name = format!("handover --bug {}", bug.name());
        return Ok(report(&check_handover(&name, Some(bug), threads), true));
    }
    let mut held = report(&check_handover("handover", None, threads), false);
    if bugs {
        for bug in handover::Bug::ALL {
            let name = format!("handover --bug {}", bug.name());
            held &= report(&check_handover(&name, Some(bug), threads), true);
        }
    }
    Ok(held)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let started = std::time::Instant::now();
    let held = match (args.model.as_str(), args.bug.as_deref()) {
        ("all", None) => {
            let mut ok = check_ownership("full", None, args.threads);
            ok &= check_ownership("pairs", None, args.threads);
            ok &= check_ownership("deep", None, args.threads);
            for bug in ownership::Bug::ALL {
                ok &= check_ownership("full", Some(bug), args.threads);
            }
            match handover(None, true, args.threads) {
                Ok(held) => ok & held,
                Err(err) => {
                    eprintln!("{err}");
                    return ExitCode::from(2);
                }
            }
        }
        ("ownership", None) => check_ownership(&args.bounds, None, args.threads),
        ("ownership", Some(name)) => match ownership::Bug::named(name) {
            Some(bug) => check_ownership(&args.bounds, Some(bug), args.threads),
            None => {
                let known: Vec<&str> = ownership::Bug::ALL.iter().map(|b| b.name()).collect();
                eprintln!("unknown bug {name:?} of the ownership model (known: {known:?})");
                return ExitCode::from(2);
            }
        },
        ("handover", bug) => match handover(bug, false, args.threads) {
            Ok(held) => held,
            Err(err) => {
                eprintln!("{err}");
                return ExitCode::from(2);
            }
        },
        (model, _) => {
            eprintln!("unknown model {model:?} (known: all, ownership, handover)");
            return ExitCode::from(2);
        }
    };
    println!(
        "models: {} in {:.1}s",
        if held { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    if held {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
