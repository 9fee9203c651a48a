//! `protocol-models`: check the protocol models and print what was explored.
//!
//! ```text
//! cargo run --release -p protocol-models -- all          # every model, then every seeded bug
//! cargo run --release -p protocol-models -- <model> [--bug NAME]
//! ```

use std::process::ExitCode;

use clap::Parser;

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

fn main() -> ExitCode {
    let args = Args::parse();
    eprintln!(
        "unknown model {:?} (threads {}, bug {:?})",
        args.model, args.threads, args.bug
    );
    ExitCode::from(2)
}
