//! The chaos harness: see [`chaos::harness`]. Exits non-zero on any violation.

use std::time::Duration;

use anyhow::Context;
use chaos::{
    harness::{HarnessConfig, run},
    process::Output,
    server_clock::{ClockFile, ServerClock, ServerClockFault},
};
use clap::Parser;

/// Runs contenders under faults against a real engine and checks the history.
#[derive(Parser)]
struct Args {
    /// Engine URL, direct (`scylla://host:port/keyspace?...`, `redis://`,
    /// `postgres://`, `etcd://`, `dynamodb://...&endpoint=...`).
    #[arg(long, env = "SCYLLA_URI")]
    url: String,
    /// Engine name for the summary.
    #[arg(long, default_value = "cassandra")]
    engine: String,
    /// Seconds of fault injection.
    #[arg(long, default_value_t = 120)]
    duration_secs: u64,
    /// Lease in whole seconds.
    #[arg(long, default_value_t = 4)]
    lease_secs: u64,
    /// Contender processes.
    #[arg(long, default_value_t = 3)]
    contenders: usize,
    /// Run no zombie (by default the last slot's contenders are zombies:
    /// no killer, they keep writing after a loss, to exercise fencing).
    #[arg(long)]
    no_zombie: bool,
    /// Negative control: the guarded resource accepts any token. With
    /// zombies the run must then report stale writes accepted (and fail).
    #[arg(long)]
    unfenced: bool,
    /// Contenders connect straight to the engine, without a fault proxy
    /// each (for a cluster URL naming several nodes; the partition scenario
    /// is then skipped: partition the engine's nodes instead).
    #[arg(long)]
    direct: bool,
    /// Clock-rate fault: the first slot's contenders run under libfaketime
    /// at this rate of real time (`1.15` fast, `0.77` slow).
    #[arg(long)]
    clock_rate: Option<f64>,
    /// Milliseconds added to the takeover bound (an engine that refuses
    /// writes, or keeps a dead holder's lease, for a known while after a
    /// failover).
    #[arg(long, default_value_t = 0)]
    takeover_slack_ms: u64,
    /// Server clock fault (`step:+30s`, `step:-30s`, `strobe`): the harness
    /// rewrites `--server-clock-file`, which the engine's preload library
    /// reads its wall-clock offset from (`cargo xtask chaos --server-clock`
    /// starts the engine so).
    #[arg(long, requires = "server_clock_file")]
    server_clock: Option<ServerClockFault>,
    /// The offset file of `--server-clock`.
    #[arg(long, requires = "server_clock")]
    server_clock_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    output: Output,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = chaos::process::start("warn");
    anyhow::ensure!(args.lease_secs >= 1, "the lease is at least 1 s");
    if let Some(rate) = args.clock_rate {
        anyhow::ensure!(
            rate.is_finite() && (0.1..=10.0).contains(&rate),
            "--clock-rate {rate}: expected a rate from 0.1 to 10"
        );
    }
    let exe = std::env::current_exe()?;
    let contender = exe
        .parent()
        .context("no directory for the harness executable")?
        .join("chaos-contender");
    let work_dir = args.output.work_dir("chaos");
    let lease = Duration::from_secs(args.lease_secs);
    if let Some(rate) = args.clock_rate {
        println!("clock-rate fault: slot 0's contenders run at x{rate} (libfaketime)");
    }
    let server_clock = match (args.server_clock, args.server_clock_file) {
        (Some(fault), Some(file)) => {
            println!(
                "server clock fault: {fault}, through {} (the engine's wall clock)",
                file.display()
            );
            Some(ServerClock {
                fault,
                file: ClockFile::new(file),
            })
        }
        _ => None,
    };
    println!(
        "chaos on {}: {} contenders{}, lease {}s, {}s of faults, logs in {}",
        args.engine,
        args.contenders,
        if args.direct {
            " (direct, no proxies)"
        } else {
            ""
        },
        args.lease_secs,
        args.duration_secs,
        work_dir.display()
    );
    let report = run(HarnessConfig {
        url: args.url,
        contender,
        contenders: args.contenders,
        lease,
        duration: Duration::from_secs(args.duration_secs),
        work_dir,
        zombie: !args.no_zombie,
        unfenced: args.unfenced,
        direct: args.direct,
        clock_rate: args.clock_rate,
        takeover_slack: Duration::from_millis(args.takeover_slack_ms),
        server_clock,
    })
    .await?;
    println!();
    println!("== chaos summary: {} ==", args.engine);
    println!("{report}");
    args.output
        .append_summary(&args.engine, report.summary_line())?;
    anyhow::ensure!(report.ok(), "chaos run on {} found violations", args.engine);
    Ok(())
}
