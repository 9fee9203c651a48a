//! `events-probe`: a pod that joins a fleet (a coordinator `Member` with a
//! heartbeat) and speaks cluster events on its standard streams, for
//! watching a destination from a shell and for the crate's process tests.
//!
//! Commands, one per line on stdin:
//!
//! - `sub <dest>`: a new local subscriber of `<dest>`; its notices are
//!   printed as they arrive;
//! - `unsub <dest>`: drops every local subscriber of `<dest>`;
//! - `pub <dest> <payload...>`: publishes the rest of the line.
//!
//! Every output line is one JSON object with a `kind`: `ready`,
//! `subscribed`, `subscribe_error`, `published`, `publish_error`, and per
//! notice `event` (`dest`, `seq`, `generation`, `publisher`, `payload`),
//! `gap` (`first`, `last`), `restarted` (`generation`), `interrupted`,
//! `resumed`. Without `--valkey` it runs standalone.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use coordinator::{DestinationId, Member, MemberAddress, MemberConfig, MemberId};
use coordinator_events::{Events, EventsConfig, Gap, Notice};
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::task::JoinHandle;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "events-probe", version, about)]
struct Args {
    /// Valkey URL; without it, standalone.
    #[arg(long, env = "VALKEY_URL")]
    valkey: Option<String>,
    /// Key prefix of the fleet.
    #[arg(long, default_value = "coordinator")]
    prefix: String,
    /// This pod's member id.
    #[arg(long)]
    id: String,
    /// Member TTL, milliseconds.
    #[arg(long, default_value_t = 2_000)]
    ttl_ms: u64,
    /// Heartbeat period, milliseconds (default: a third of the TTL).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Probe period of the broadcast connection, milliseconds.
    #[arg(long, default_value_t = 200)]
    probe_ms: u64,
    /// How long a probe may take, milliseconds.
    #[arg(long, default_value_t = 1_000)]
    probe_timeout_ms: u64,
    /// Valkey command timeout, milliseconds.
    #[arg(long, default_value_t = 500)]
    command_timeout_ms: u64,
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

fn notice_json(dest: &DestinationId, notice: &Notice) -> serde_json::Value {
    match notice {
        Notice::Event(e) => json!({
            "kind": "event",
            "dest": dest.as_str(),
            "seq": e.position.seq,
            "generation": e.position.generation,
            "publisher": e.publisher.as_str(),
            "payload": String::from_utf8_lossy(&e.payload),
        }),
        Notice::Gap(Gap::Missed { first, last }) => {
            json!({"kind": "gap", "dest": dest.as_str(), "first": first, "last": last})
        }
        Notice::Gap(Gap::Restarted { generation }) => {
            json!({"kind": "restarted", "dest": dest.as_str(), "generation": generation})
        }
        Notice::Interrupted => json!({"kind": "interrupted", "dest": dest.as_str()}),
        Notice::Resumed => json!({"kind": "resumed", "dest": dest.as_str()}),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let id = MemberId::new(args.id.as_str())?;
    let config = EventsConfig {
        probe_interval: Duration::from_millis(args.probe_ms),
        probe_timeout: Duration::from_millis(args.probe_timeout_ms),
        ..EventsConfig::default()
    };
    let mut heartbeat = None;
    let events = match &args.valkey {
        None => Events::standalone(id, config)?,
        Some(url) => {
            let valkey = coordinator::connect(url, Duration::from_millis(args.command_timeout_ms))
                .await
                .context("cannot connect to Valkey")?;
            // the probe serves no calls: its address is never dialled
            let mut mc = MemberConfig::new(id, MemberAddress::parse("http://127.0.0.1:9")?);
            mc.prefix = args.prefix.clone();
            mc.ttl = Duration::from_millis(args.ttl_ms);
            mc.heartbeat_interval =
                Duration::from_millis(args.heartbeat_ms.unwrap_or(args.ttl_ms / 3));
            let member = Member::new(valkey.clone(), mc)?;
            member.register().await?;
            heartbeat = Some(member.start_heartbeat());
            Events::clustered(&member, valkey, config).await?
        }
    };
    emit(json!({"kind": "ready", "id": events.id().as_str(), "clustered": events.is_clustered()}));

    let mut subs: HashMap<DestinationId, Vec<JoinHandle<()>>> = HashMap::new();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let mut words = line.splitn(3, ' ');
        let (cmd, dest) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let dest = match DestinationId::new(dest) {
            Ok(d) => d,
            Err(err) => {
                emit(json!({"kind": "error", "line": line, "error": err.to_string()}));
                continue;
            }
        };
        match cmd {
            "sub" => match events.subscribe(&dest).await {
                Ok(mut sub) => {
                    emit(json!({"kind": "subscribed", "dest": dest.as_str(),
                        "seq": sub.position().map(|p| p.seq)}));
                    let d = dest.clone();
                    let task = tokio::spawn(async move {
                        while let Some(n) = sub.next().await {
                            emit(notice_json(&d, &n));
                        }
                    });
                    subs.entry(dest).or_default().push(task);
                }
                Err(err) => emit(
                    json!({"kind": "subscribe_error", "dest": dest.as_str(), "error": err.to_string()}),
                ),
            },
            "unsub" => {
                for task in subs.remove(&dest).unwrap_or_default() {
                    task.abort();
                }
                emit(json!({"kind": "unsubscribed", "dest": dest.as_str()}));
            }
            "pub" => {
                let payload = words.next().unwrap_or("").to_owned();
                match events.publish(&dest, payload).await {
                    Ok(p) => emit(json!({"kind": "published", "dest": dest.as_str(),
                        "seq": p.position.map(|p| p.seq), "pods": p.pods, "reached": p.reached})),
                    Err(err) => emit(
                        json!({"kind": "publish_error", "dest": dest.as_str(), "error": err.to_string()}),
                    ),
                }
            }
            _ => emit(json!({"kind": "error", "line": line, "error": "unknown command"})),
        }
    }
    // stdin closed: leave cleanly
    for task in subs.into_values().flatten() {
        task.abort();
    }
    events.shutdown(Duration::from_secs(2)).await;
    if let Some(h) = heartbeat {
        h.stop().await;
    }
    Ok(())
}
