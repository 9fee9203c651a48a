//! `cargo xtask sim`: the deterministic simulation, built in release mode.

use anyhow::Context;

/// Options of `sim`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Number of seeds.
    #[arg(long, default_value_t = 10_000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let status = crate::cargo::command()
        .args(["run", "--release", "-q", "-p", "elections-sim", "--"])
        .args(["--seeds", &args.seeds.to_string()])
        .args(["--first", &args.first.to_string()])
        .status()
        .context("running elections-sim")?;
    anyhow::ensure!(status.success(), "the simulation failed ({status})");
    Ok(())
}
