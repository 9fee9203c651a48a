//! `cargo xtask model`: the protocol models (`crates/protocol-models`),
//! checked exhaustively in a release build: every model must hold, and every
//! seeded bug must be refuted with a trace.

use anyhow::Context;

/// Options of `model`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// One model (default: all of them, then every seeded bug).
    #[arg(default_value = "all")]
    model: String,
    /// Check this seeded bug of the model instead (it must be refuted).
    #[arg(long)]
    bug: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let mut command = crate::cargo::command();
    command
        .args(["run", "--release", "-q", "-p", "protocol-models", "--"])
        .arg(&args.model);
    if let Some(bug) = &args.bug {
        command.args(["--bug", bug]);
    }
    let status = command.status().context("running protocol-models")?;
    anyhow::ensure!(status.success(), "the model check failed ({status})");
    Ok(())
}
