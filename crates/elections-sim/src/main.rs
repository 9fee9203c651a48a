//! `elections-sim`: run many seeds and print a summary.
//!
//! ```text
//! cargo run --release -p elections-sim -- --seeds 10000
//! cargo run -p elections-sim -- --seed 1234 --log     # replay one seed, print its history
//! cargo run --release -p elections-sim -- --anchor etcd --unguarded-late-writes  # must fail
//! cargo run --release -p elections-sim -- --seeds 200 --preemption-bug no-min-tenure  # must fail
//! ```

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use elections_sim::{
    Anchor, FaultCounts, LateWrites, PreemptionBug, RunReport, SimConfig, run_seed,
};

#[derive(Parser)]
#[command(about = "Deterministic simulation of elections under faults")]
struct Args {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Run only this seed (and print its event log with --log).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the event log of each run.
    #[arg(long)]
    log: bool,
    /// Count every expiry from this anchor (`apply`, `etcd`, `dynamodb`)
    /// instead of `seed % 3`.
    #[arg(long, value_parser = parse_anchor)]
    anchor: Option<Anchor>,
    /// Negative control: let late writes of the send-anchored drivers land
    /// unguarded, as before issue 34's fix (afc8b88). Runs must fail.
    #[arg(long)]
    unguarded_late_writes: bool,
    /// Negative control: a deliberate bug in the priority seeds'
    /// preemption (`no-hold-down`, `no-min-tenure`, `equals-preempt`,
    /// `never-preempt`). Runs must fail.
    #[arg(long, value_parser = parse_bug)]
    preemption_bug: Option<PreemptionBug>,
    /// Negative control: the observers poll instead of following the
    /// store's writes, as before issue 37's fix. Runs must fail
    /// (leaderships missed).
    #[arg(long)]
    observers_poll: bool,
}

fn parse_bug(name: &str) -> Result<PreemptionBug, String> {
    PreemptionBug::ALL
        .into_iter()
        .find(|b| b.name() == name)
        .ok_or_else(|| {
            format!("unknown preemption bug {name:?}: no-hold-down, no-min-tenure, equals-preempt or never-preempt")
        })
}

fn parse_anchor(name: &str) -> Result<Anchor, String> {
    Anchor::ALL
        .into_iter()
        .find(|a| a.name() == name)
        .ok_or_else(|| format!("unknown anchor {name:?}: apply, etcd or dynamodb"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = SimConfig {
        anchor: args.anchor,
        unguarded_late_writes: args.unguarded_late_writes,
        preemption_bug: args.preemption_bug,
        observers_poll: args.observers_poll,
        ..SimConfig::default()
    };
    let seeds = match args.seed {
        Some(seed) => seed..seed + 1,
        None => args.first..args.first + args.seeds,
    };
    let started = std::time::Instant::now();
    let reports = match run_all(seeds, &config, args.log) {
        Ok(reports) => reports,
        Err(err) => {
            eprintln!("could not build a runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let (mut runs, mut intervals, mut failed) = (0u64, 0u64, Vec::new());
    let mut vvm_runs = 0u64;
    let mut priority_runs = 0u64;
    let mut preemption = elections_sim::PreemptionVerdict::default();
    let mut by_anchor = [0u64; 3];
    let mut late = LateWrites::default();
    let (mut two_locks, mut mixed) = (0u64, 0u64);
    let mut requests = elections_sim::RequestCounts::default();
    let (mut size_overlaps, mut untruthful) = (0usize, 0usize);
    let mut faults = FaultCounts::default();
    let mut ops = elections_sim::OpCounts::default();
    let (mut overlaps, mut fencing) = (0usize, 0usize);
    let (mut worst_takeover, mut worst_recovery) = (Duration::ZERO, Duration::ZERO);
    for report in reports {
        let seed = report.seed;
        if std::env::var_os("SIM_PRINT_HASH").is_some() {
            println!("seed {seed} hash {:016x}", report.log_hash);
        }
        runs += 1;
        vvm_runs += u64::from(report.kind == elections_sim::ContenderKind::Vvm);
        late.add(&report.late);
        priority_runs += u64::from(report.priorities);
        preemption.add(&report.preemption);
        if let Some(i) = Anchor::ALL.iter().position(|a| *a == report.anchor) {
            by_anchor[i] += 1;
        }
        two_locks += u64::from(report.locks > 1);
        mixed += u64::from(report.mixed_sizes);
        requests.add(&report.requests);
        size_overlaps += report.size_overlaps.len();
        untruthful += report.request_violations.len();
        intervals += report.intervals as u64;
        faults.add(&report.faults);
        ops.add(&report.ops);
        overlaps += report.verdict.overlaps.len();
        fencing += report.verdict.fencing_violations.len();
        worst_takeover = worst_takeover.max(report.verdict.worst_takeover);
        worst_recovery = worst_recovery.max(report.worst_recovery());
        if args.log {
            for line in &report.log {
                println!("{line}");
            }
        }
        if !report.passed() {
            print_failure(&report);
            failed.push(seed);
        }
    }
    println!("== elections-sim summary ==");
    println!(
        "runs:                 {runs} ({vvm_runs} with whole VVMs, {} with bare elections)",
        runs - vvm_runs
    );
    println!(
        "expiry anchors:       {} at apply, {} at the etcd lease grant, {} at the DynamoDB client{}",
        by_anchor[0],
        by_anchor[1],
        by_anchor[2],
        if config.unguarded_late_writes {
            " (late writes UNGUARDED: negative control)"
        } else {
            ""
        }
    );
    println!(
        "late writes:          {} refused by the driver's guard, {} renewals landed late and shortened the lease",
        late.refused, late.renewals_shortened
    );
    println!(
        "VVM seeds:            {two_locks} with two locks whose names share a prefix, {mixed} with mixed cluster sizes"
    );
    println!("leaderships:          {intervals}");
    println!("faults injected:      {} {faults:?}", faults.total());
    println!(
        "operations:           {} campaigns, {} hand-overs ({} refused: the named candidate had gone; {} failed; {} not asked: nobody waiting), {} observations",
        ops.campaigns,
        ops.handovers,
        ops.handover_refusals,
        ops.handover_failures,
        ops.handover_skipped,
        ops.observations
    );
    println!(
        "observers:            {} stale at the end, {} leaderships missed, {} writes; {} identical consecutive reports (distinct records)",
        ops.observe_stale, ops.observe_missed, ops.observer_writes, ops.observe_duplicates
    );
    println!(
        "hand-over requests:   {} posted ({} busy): {} handed over, {} no candidate, {} released or failed, {} withdrawn, {} accepted then read from the lease, {} other; {} accepts and {} markers applied ({} by preemption, nobody asked)",
        requests.posted,
        requests.busy,
        requests.handed_over,
        requests.no_candidate,
        requests.released_or_failed,
        requests.withdrawn,
        requests.learned,
        requests.other,
        requests.accepts,
        requests.markers,
        requests.preemptions
    );
    println!(
        "priority seeds:       {priority_runs} (priorities 0..=2; bare elections with flappers: {} preemptions, {} steady stands held to the liveness bound; VVMs: see the markers by preemption)",
        preemption.preemptions, preemption.liveness_checked
    );
    println!(
        "preemption checks:    {} within a minimum tenure, {} without the hold-down (or to a flapper), {} to a priority not above the leader's, {} slower than the hold-down (or the lower leader's tenure) + a lease",
        preemption.within_tenure.len(),
        preemption.without_hold_down.len(),
        preemption.not_higher.len(),
        preemption.too_slow.len()
    );
    println!("overlaps found:       {overlaps}");
    println!("cluster-size overlaps: {size_overlaps}");
    println!("untruthful answers:   {untruthful}");
    println!("fencing violations:   {fencing}");
    println!(
        "worst takeover:       {:.3}s (any gap between leaders, faults included)",
        worst_takeover.as_secs_f64()
    );
    println!(
        "worst recovery:       {:.3}s after faults stopped (bound: d + d/20 = {:.3}s)",
        worst_recovery.as_secs_f64(),
        (config.lease + config.lease / 20).as_secs_f64()
    );
    println!(
        "wall time:            {:.1}s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "sim: {} passed, {} failed",
        runs - failed.len() as u64,
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        let shown: Vec<_> = failed.iter().take(20).collect();
        let more = failed.len().saturating_sub(shown.len());
        println!("failing seeds: {shown:?} and {more} more (replay one with --seed N --log)");
        ExitCode::FAILURE
    }
}

/// Runs the seeds on every core; each seed has its own runtime, so the
/// results do not depend on how seeds are spread over threads.
fn run_all(
    seeds: std::ops::Range<u64>,
    config: &SimConfig,
    keep_log: bool,
) -> std::io::Result<Vec<RunReport>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let all: Vec<u64> = seeds.collect();
    let chunk = (all.len() as u64).div_ceil(threads).max(1) as usize;
    let mut reports = std::thread::scope(|scope| {
        let handles: Vec<_> = all
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|&seed| run_seed(seed, config, keep_log))
                        .collect::<std::io::Result<Vec<_>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a worker panicked")))
            })
            .collect::<std::io::Result<Vec<Vec<_>>>>()
    })?
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    reports.sort_by_key(|r| r.seed);
    Ok(reports)
}

fn print_failure(report: &RunReport) {
    println!(
        "seed {} FAILED (expiry anchor: {})",
        report.seed,
        report.anchor.name()
    );
    for (a, b) in report.verdict.overlaps.iter().take(3) {
        println!("  overlap:\n    {a}\n    {b}");
    }
    for (a, b) in report.verdict.fencing_violations.iter().take(3) {
        println!("  fencing order:\n    {a}\n    {b}");
    }
    for (a, b) in report.size_overlaps.iter().take(3) {
        println!("  two cluster sizes at once:\n    {a}\n    {b}");
    }
    let p = &report.preemption;
    for finding in [
        &p.within_tenure,
        &p.without_hold_down,
        &p.not_higher,
        &p.too_slow,
    ]
    .into_iter()
    .flatten()
    .take(3)
    {
        println!("  preemption: {finding}");
    }
    for violation in report.request_violations.iter().take(3) {
        println!("  request: {violation}");
    }
    if report.ops.observe_stale + report.ops.observe_missed + report.ops.observer_writes > 0 {
        println!(
            "  observer: {} keys stale at the end, {} leaderships missed, {} writes",
            report.ops.observe_stale, report.ops.observe_missed, report.ops.observer_writes
        );
    }
    for key in report.liveness_failures() {
        println!(
            "  no leader for key {key} within {:?} after faults stopped: {:?}",
            report.recovery_bound, report.verdict.recovery[&key]
        );
    }
}
