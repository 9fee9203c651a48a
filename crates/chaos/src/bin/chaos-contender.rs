//! A chaos contender process: see [`chaos::contender`].

use std::time::Duration;

use chaos::contender::{ContenderConfig, run};
use clap::Parser;

/// Contends for one key and writes to the guarded resource while leading.
#[derive(Parser)]
struct Args {
    /// Store URL (`scylla://`, `dynamodb://`, `redis://`, `postgres://`, `etcd://`).
    #[arg(long)]
    url: String,
    /// Election key.
    #[arg(long)]
    key: String,
    /// Guarded resource id.
    #[arg(long)]
    resource: String,
    /// Where the guarded resource lives, if not at `--url` (a path to it
    /// that a cut of the store's path leaves open).
    #[arg(long)]
    resource_url: Option<String>,
    /// This contender's name.
    #[arg(long)]
    name: String,
    /// Lease in whole seconds.
    #[arg(long, default_value_t = 4)]
    lease_secs: u64,
    /// Break the rules on purpose: no killer, keep writing after a loss.
    #[arg(long)]
    zombie: bool,
    /// Negative control: write to the resource without fencing.
    #[arg(long)]
    unfenced: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = chaos::process::start("info,scylla=warn");
    run(ContenderConfig {
        url: args.url,
        key: args.key,
        resource: args.resource,
        resource_url: args.resource_url,
        name: args.name,
        lease: Duration::from_secs(args.lease_secs),
        zombie: args.zombie,
        unfenced: args.unfenced,
    })
    .await?;
    Ok(())
}
