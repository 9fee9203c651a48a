//! `protocol-models`: check the protocol models and print what was explored.
//!
//! ```text
//! cargo run --release -p protocol-models -- all          # every model, then every seeded bug
//! cargo run --release -p protocol-models -- <model> [--bug NAME]
//! ```

use std::process::ExitCode;

use clap::Parser;
use protocol_models::{handover, run, shortest::shortest_violation};

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
}

/// What a run found: `true` when every expectation held (the protocol
/// without violations, every seeded bug refuted).
fn report(outcome: &run::Outcome, seeded: bool) -> bool {
    println!("{}", outcome.summary());
    for violation in &outcome.violations {
        println!("  refuted: {}", violation.property);
        for (step, action) in violation.trace.iter().enumerate() {
            println!("    {:>2}. {action}", step + 1);
        }
    }
    if seeded {
        !outcome.violations.is_empty()
    } else {
        outcome.violations.is_empty()
    }
}

/// Checks the hand-over model (with `bug` seeded), each refuted property's
/// trace replaced by the shortest one.
fn check_handover(name: &str, bug: Option<handover::Bug>, threads: usize) -> run::Outcome {
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
    let all = args.model == "all";
    let mut held = true;
    let mut ran = false;
    if all || args.model == "handover" {
        ran = true;
        match handover(args.bug.as_deref(), all, args.threads) {
            Ok(ok) => held &= ok,
            Err(err) => {
                eprintln!("{err}");
                return ExitCode::from(2);
            }
        }
    }
    if !ran {
        eprintln!("unknown model {:?} (known: handover, all)", args.model);
        return ExitCode::from(2);
    }
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
