//! `cargo xtask chaos`: contender processes under faults against a real
//! engine (crate `chaos`): kills, pauses and partitions of the leader, with
//! fencing checked at a guarded resource. Exits non-zero on any violation.

use std::process::Command;

use anyhow::Context;

use crate::engines::{self, Started};

/// Options of `chaos`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Engines to run against (default: every one the harness supports).
    #[arg(long = "engine", value_name = "NAME")]
    engines: Vec<String>,
    /// How long faults are injected, per engine (engines run one after
    /// another), e.g. `120s` or `3m`.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    duration: u64,
    /// Lease in whole seconds.
    #[arg(long, default_value_t = 4)]
    lease: u64,
    /// Contender processes.
    #[arg(long, default_value_t = 3)]
    contenders: usize,
    /// Negative control: the guarded resource accepts any token, so the run
    /// must report stale writes accepted and fail.
    #[arg(long)]
    unfenced: bool,
}

/// `(chaos engine name, engines::all() entry, variable the engine sets)`.
const SUPPORTED: &[(&str, &str, &str)] = &[
    ("cassandra", "cassandra", "SCYLLA_URI"),
    ("dynamodb", "dynamodb", "DYNAMODB_ENDPOINT"),
    ("valkey", "valkey", "VALKEY_URL"),
    ("postgres", "postgres", "POSTGRES_URL"),
    ("etcd", "etcd", "ETCD_URL"),
];

/// The store URL for the harness from the variable the engine set.
fn store_url(engine: &str, value: &str) -> String {
    match engine {
        // DYNAMODB_ENDPOINT is an endpoint, not a URL.
        "dynamodb" => {
            format!("dynamodb://chaos_leases?region=us-east-1&endpoint={value}&create_table=true")
        }
        _ => value.to_string(),
    }
}

/// Whole seconds from `90`, `90s`, `3m` or `1m 30s` (`humantime`).
fn parse_duration(text: &str) -> Result<u64, String> {
    let seconds = match text.trim().parse::<u64>() {
        Ok(seconds) => seconds,
        Err(_) => humantime::parse_duration(text)
            .map_err(|err| format!("{text:?} is not a duration like 120s or 3m: {err}"))?
            .as_secs(),
    };
    if seconds == 0 {
        return Err(format!("{text:?}: the duration must be at least 1 s"));
    }
    Ok(seconds)
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let wanted: Vec<String> = if args.engines.is_empty() {
        SUPPORTED.iter().map(|(n, _, _)| n.to_string()).collect()
    } else {
        args.engines.clone()
    };
    for name in &wanted {
        if !SUPPORTED.iter().any(|(n, _, _)| n == name) {
            let names: Vec<&str> = SUPPORTED.iter().map(|(n, _, _)| *n).collect();
            anyhow::bail!("unknown engine {name:?}; supported: {}", names.join(", "));
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "-q", "-p", "chaos", "--bins"])
        .status()
        .context("building the chaos harness")?;
    anyhow::ensure!(status.success(), "building the chaos harness failed");

    let work_dir = engines::work_dir();
    std::fs::create_dir_all(&work_dir)?;
    let summary = work_dir.join(format!("chaos-summary-{}.txt", std::process::id()));
    let mut failed = Vec::new();
    for name in &wanted {
        let Some((_, entry, var)) = SUPPORTED.iter().find(|(n, _, _)| n == name) else {
            continue;
        };
        let all = engines::all();
        let engine = all
            .iter()
            .find(|e| e.name == *entry)
            .with_context(|| format!("no engine {entry}"))?;
        println!("== chaos {name}: starting the engine ==");
        let running: Started = match engine.external() {
            Some(external) => external,
            None => match (engine.start)(&work_dir.join(engine.name)) {
                Ok(started) => started,
                Err(err) => {
                    eprintln!("chaos {name}: the engine did not start: {err:#}");
                    failed.push(name.clone());
                    continue;
                }
            },
        };
        let url = running
            .env
            .iter()
            .find(|(k, _)| k == var)
            .map(|(_, v)| store_url(name, v))
            .with_context(|| format!("the engine did not set {var}"))?;
        let status = Command::new(&cargo)
            .args(["run", "-q", "-p", "chaos", "--bin", "chaos", "--"])
            .args(["--url", &url, "--engine", name])
            .args(["--duration-secs", &args.duration.to_string()])
            .args(["--lease-secs", &args.lease.to_string()])
            .args(["--contenders", &args.contenders.to_string()])
            .args(args.unfenced.then_some("--unfenced"))
            .arg("--work-dir")
            .arg(work_dir.join(format!("chaos-{name}")))
            .arg("--summary")
            .arg(&summary)
            .envs(local_aws_credentials(name))
            .status()
            .context("running the chaos harness")?;
        drop(running);
        println!("== chaos {name}: engine stopped ==");
        if !status.success() {
            failed.push(name.clone());
        }
    }
    println!();
    println!(
        "== chaos summary ({} s of faults per engine) ==",
        args.duration
    );
    let lines = std::fs::read_to_string(&summary).unwrap_or_default();
    let _ = std::fs::remove_file(&summary);
    for name in &wanted {
        match lines.lines().find(|l| l.starts_with(&format!("{name}: "))) {
            Some(line) => println!("{line}"),
            None => {
                println!("{name}: no report (the engine or the harness failed before checking)")
            }
        }
    }
    anyhow::ensure!(failed.is_empty(), "chaos failed on {failed:?}");
    Ok(())
}

/// DynamoDB Local accepts any credentials, but the AWS SDK wants some:
/// dummy ones unless the environment has real ones.
fn local_aws_credentials(engine: &str) -> Vec<(&'static str, &'static str)> {
    if engine != "dynamodb" || std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
        return Vec::new();
    }
    vec![
        ("AWS_ACCESS_KEY_ID", "chaos"),
        ("AWS_SECRET_ACCESS_KEY", "chaos"),
    ]
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("120s"), Ok(120));
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("3m"), Ok(180));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
