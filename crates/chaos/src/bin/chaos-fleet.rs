//! Coordinator chaos: see [`chaos::fleet`]. Exits non-zero when a
//! destination was served by two pods at once (or nothing was served).

use std::time::Duration;

use anyhow::Context;
use chaos::{
    fleet::{FleetConfig, run},
    process::Output,
};
use clap::Parser;

/// Runs pods and coordinators under faults on one Valkey and checks that
/// no destination was served by two pods at once.
#[derive(Parser)]
struct Args {
    /// Valkey URL, direct (`redis://127.0.0.1:6379`).
    #[arg(long, env = "VALKEY_URL")]
    url: String,
    /// Seconds of fault injection.
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    /// Pod processes (at least 3).
    #[arg(long, default_value_t = 3)]
    pods: usize,
    /// Coordinator processes (at least 2).
    #[arg(long, default_value_t = 2)]
    coordinators: usize,
    /// Destinations served by one pod each (plus 2 fanned-out ones).
    #[arg(long, default_value_t = 12)]
    destinations: usize,
    /// Concurrent callers.
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// The pods' member record TTL in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    ttl_ms: u64,
    /// Negative control: pods without the ownership fence. The run must
    /// then find overlaps (and fail).
    #[arg(long)]
    unfenced: bool,
    /// Pods keep a call's result without re-checking ownership after the
    /// work (the fence at admission only).
    #[arg(long)]
    no_commit_check: bool,
    #[command(flatten)]
    output: Output,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = chaos::process::start("warn");
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("no directory for the executable")?;
    let work_dir = args.output.work_dir("chaos-fleet");
    println!(
        "coordinator chaos: {} pods, {} coordinators, {} destinations (+2 fanned out), ttl {} ms, \
         {} s of faults{}, logs in {}",
        args.pods,
        args.coordinators,
        args.destinations,
        args.ttl_ms,
        args.duration_secs,
        if args.unfenced { ", UNFENCED" } else { "" },
        work_dir.display()
    );
    let report = run(FleetConfig {
        url: args.url,
        pod_exe: dir.join("chaos-pod"),
        coordinator_exe: dir.join("chaos-coordinator"),
        pods: args.pods,
        coordinators: args.coordinators,
        destinations: args.destinations,
        workers: args.workers,
        ttl: Duration::from_millis(args.ttl_ms),
        duration: Duration::from_secs(args.duration_secs),
        work_dir,
        unfenced: args.unfenced,
        no_commit_check: args.no_commit_check,
    })
    .await?;
    for overlap in &report.history.overlaps {
        println!("OVERLAP {overlap}");
    }
    if report.torn_lines > 0 {
        println!("({} torn history lines skipped)", report.torn_lines);
    }
    println!();
    println!("== chaos summary: coordinator ==");
    println!("{report}");
    args.output.append_summary("coordinator", &report)?;
    anyhow::ensure!(
        report.ok(),
        "coordinator chaos: {} calls served by two pods at once ({} served)",
        report.history.overlapping,
        report.history.served
    );
    Ok(())
}
