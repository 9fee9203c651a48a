//! The harness: starts contender processes, each behind its own
//! [`FaultProxy`], runs fault scenarios on whoever leads, then checks the
//! history (see [`crate::check`]).

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context;
use storage_url::StorageUrl;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

mod leader;

use leader::current_leader;

use crate::{
    check::{self, Bounds, Report},
    clock::{self, FakeClock},
    event::{Event, Record, WriteOutcome, format_line, now_ms, parse_line},
    guarded,
    process::signal,
    proxy::FaultProxy,
    server_clock::{self, ServerClock},
};

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    /// The engine's URL (direct, not proxied), e.g.
    /// `scylla://127.0.0.1:9042/ks?replication=simple:1&create_schema=true`.
    pub url: String,
    /// The contender executable.
    pub contender: PathBuf,
    /// Contender processes kept running.
    pub contenders: usize,
    /// The lease `d`.
    pub lease: Duration,
    /// How long faults are injected.
    pub duration: Duration,
    /// Where contender logs (stderr) and the event log go.
    pub work_dir: PathBuf,
    /// Make the last slot's contenders zombies (see
    /// [`crate::contender::ContenderConfig::zombie`]); needs 2 slots or more.
    pub zombie: bool,
    /// Negative control: contenders write without fencing, so a run with
    /// zombies must report stale writes accepted.
    pub unfenced: bool,
    /// Contenders connect straight to the engine, without a fault proxy:
    /// for a cluster (a `scylla://` URL naming several nodes), whose driver
    /// talks to every node it discovers, so a proxy on one address could not
    /// cut a contender off. The partition scenario is then skipped; faults
    /// of the engine's own nodes are the caller's (`cargo xtask chaos
    /// --engine cassandra-3` kills, pauses and partitions them meanwhile).
    pub direct: bool,
    /// Clock-rate fault: the first slot's contenders run under libfaketime
    /// with their clocks at this rate of real time (`1.15`: 15 % fast,
    /// `0.77`: 1.3 times slower); their event times are mapped back to real
    /// time (see [`crate::clock`]). The faults then aim at that slot: while
    /// it leads, its path to the store is cut (unless `direct`) and its
    /// writes go on, because every contender reaches the guarded resource
    /// directly (`--resource-url`), so a killer that fires late shows as
    /// writes past the lease; another leader is killed, to move the
    /// leadership on.
    pub clock_rate: Option<f64>,
    /// Added to the takeover bound: for an engine that refuses writes for
    /// a known while after a failover (Valkey with `wait_replicas=1` and
    /// one replica, until the old primary is back as a replica).
    pub takeover_slack: Duration,
    /// A server clock fault: the engine runs with a preload library that
    /// reads its wall-clock offset from the fault's file, and the harness
    /// steps or strobes it from the first leader on (see
    /// [`crate::server_clock`]). Its [`server_clock::takeover_slack`] is
    /// added to the takeover bound; leaders that act after a successor's
    /// acquisition soon after a forward change, for no longer than
    /// [`server_clock::overlap_bound`], are counted as the stated limit,
    /// not as violations.
    pub server_clock: Option<ServerClock>,
}

type Shared = Arc<Mutex<Vec<Record>>>;

fn push(records: &Shared, proc: &str, event: Event) {
    let t_ms = now_ms();
    println!("[{proc}] {}", format_line(t_ms, &event));
    records
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Record::new(t_ms, proc, event));
}

/// One contender slot: its proxy (none in direct mode) and its current process.
struct Slot {
    index: usize,
    generation: u32,
    proxy: Option<FaultProxy>,
    url: String,
    child: Option<(String, Child)>,
}

/// The URL with its database address replaced by `addr`: the contact
/// point of a `scylla://` URL, the `endpoint` of a `dynamodb://` URL, the
/// host and port of a `redis://`, `postgres://` or `etcd://` URL.
fn proxied_url(url: &str, addr: SocketAddr) -> anyhow::Result<String> {
    let url: StorageUrl = url.parse()?;
    // The password stays in: the contender connects with it.
    Ok(url.with_endpoint(&addr.to_string())?.as_str().to_owned())
}

/// The database's address, from the URL.
async fn upstream(url: &str) -> anyhow::Result<SocketAddr> {
    let url: StorageUrl = url.parse()?;
    let host = url.endpoint().with_context(|| {
        format!("{url} must name one network address: each contender reaches it through its own proxy (and a dynamodb:// URL needs endpoint=http://host:port)")
    })?;
    tokio::net::lookup_host(&host)
        .await?
        .next()
        .with_context(|| format!("cannot resolve {host}"))
}

/// Reads the guarded log back, retrying while the store cannot be reached
/// (on a replicated engine the run may end during a failover: a read then
/// fails until the replica is promoted), for up to [`READ_LOG_PATIENCE`].
async fn read_log_patiently(
    url: &str,
    resource: &str,
    lease: Duration,
) -> anyhow::Result<Vec<guarded::LogEntry>> {
    let until = tokio::time::Instant::now() + READ_LOG_PATIENCE;
    loop {
        match guarded::read_log(url, resource).await {
            Ok(log) => return Ok(log),
            Err(err @ (guarded::GuardedError::Open(_) | guarded::GuardedError::Storage(_)))
                if tokio::time::Instant::now() < until =>
            {
                tracing::warn!(%err, "reading the guarded log failed; retrying");
                tokio::time::sleep(lease / 4).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// How long [`read_log_patiently`] keeps trying: longer than a failover
/// of any engine here (a Sentinel embargo after an aborted attempt is
/// 10 s).
const READ_LOG_PATIENCE: Duration = Duration::from_secs(60);

/// Creates the elections table (and keyspace) by connecting once.
async fn create_store(url: &str) -> anyhow::Result<()> {
    storage_url::open(url).await?;
    Ok(())
}

/// Runs the whole thing and returns the checked report.
///
/// # Errors
///
/// Setup failures (engine unreachable, contender not found). Violations
/// are in the report, not errors.
pub async fn run(config: HarnessConfig) -> anyhow::Result<Report> {
    let upstream = match config.direct {
        true => None,
        false => Some(upstream(&config.url).await?),
    };
    std::fs::create_dir_all(&config.work_dir)?;
    create_store(&config.url).await?;
    let run_id = now_ms();
    let resource = format!("chaos-{run_id}");
    let key = format!("chaos/{run_id}");
    guarded::setup(&config.url, &resource).await?;

    let records: Shared = Arc::default();
    let mut slots = Vec::new();
    for index in 0..config.contenders {
        let (proxy, url) = match upstream {
            Some(upstream) => {
                let proxy = FaultProxy::start(upstream).await?;
                let url = proxied_url(&config.url, proxy.local_addr())?;
                (Some(proxy), url)
            }
            None => (None, config.url.clone()),
        };
        slots.push(Slot {
            index,
            generation: 0,
            proxy,
            url,
            child: None,
        });
    }
    let ctx = Ctx {
        config: &config,
        key,
        resource: resource.clone(),
        records: records.clone(),
    };
    // Beside the contenders, on the store itself: not when the engine is
    // faulted (its feed is then interrupted, and may rightly miss some).
    let observer = match config.direct {
        true => None,
        false => crate::observer::start(&config.url, &ctx.key).await?,
    };
    for slot in &mut slots {
        ctx.spawn(slot)?;
    }
    let outcome = ctx.scenarios(&mut slots).await;
    let end_ms = now_ms();
    for slot in &mut slots {
        if let Some((_, mut child)) = slot.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
    outcome?;
    let mut history: Vec<Record> = records
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|r| r.t_ms <= end_ms)
        .cloned()
        .collect();
    history.sort_by_key(|r| r.t_ms);
    let lines: Vec<String> = history
        .iter()
        .map(|r| format!("{} {}", r.proc, format_line(r.t_ms, &r.event)))
        .collect();
    std::fs::write(config.work_dir.join("events.log"), lines.join("\n"))?;
    let log = read_log_patiently(&config.url, &resource, config.lease).await?;
    let d = config.lease;
    let bounds = Bounds {
        // The killer fires at 0.8 d; the lease ends at d.
        stop_slack: d / 5,
        // The record lives d (+1 s: storage-cassandra writes TTL t + 1 and
        // Cassandra expires in whole seconds), then one retry interval, and
        // 1 s for the four LWTs of an acquisition on a loaded machine.
        // Direct (a cluster whose nodes the caller faults meanwhile): plus
        // one failed acquisition attempt, `d/4` for the call and `d/4` for
        // its read-back, since while a node is cut off or frozen but not
        // yet convicted by gossip (~10-19 s) a lightweight transaction that
        // waits on it fails only at the election's call budget (measured:
        // 11.1 s against 10.4 s with d = 8 s during a storage-port cut).
        takeover_bound: d
            + Duration::from_secs(1)
            + d / 20
            + Duration::from_secs(1)
            + if config.direct { d / 2 } else { Duration::ZERO }
            + config.takeover_slack(),
    };
    let mut report = check::check(&history, &log, bounds, end_ms);
    let past_lease = clock::acting_past_lease(&history, d);
    report.writes_past_lease = past_lease.len() as u64;
    report.violations.extend(past_lease);
    server_clock::count_overlaps(&history, d, &mut report);
    if let Some(observer) = observer {
        observer.check(
            &history,
            end_ms.saturating_sub(crate::observer::SETTLE_MS),
            &mut report,
        );
    }
    Ok(report)
}

impl HarnessConfig {
    /// Everything added to the takeover bound: [`Self::takeover_slack`] and
    /// what the server clock fault can add.
    fn takeover_slack(&self) -> Duration {
        self.takeover_slack
            + self
                .server_clock
                .as_ref()
                .map_or(Duration::ZERO, |c| server_clock::takeover_slack(c.fault))
    }
}

struct Ctx<'a> {
    config: &'a HarnessConfig,
    key: String,
    resource: String,
    records: Shared,
}

#[derive(Clone, Copy, Debug)]
enum Scenario {
    Kill,
    Pause,
    Partition,
}

impl Ctx<'_> {
    fn spawn(&self, slot: &mut Slot) -> anyhow::Result<()> {
        slot.generation += 1;
        let zombie = self.config.zombie
            && self.config.contenders > 1
            && slot.index + 1 == self.config.contenders;
        let prefix = if zombie { "z" } else { "c" };
        let name = format!("{prefix}{}.{}", slot.index, slot.generation);
        let stderr = std::fs::File::create(self.config.work_dir.join(format!("{name}.log")))?;
        let fake = match self.config.clock_rate {
            Some(rate) if slot.index == 0 => Some(FakeClock {
                start_ms: now_ms(),
                rate,
            }),
            _ => None,
        };
        let fake_env = match fake {
            Some(clock) => FakeClock::env(clock.rate).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        let mut child = Command::new(&self.config.contender)
            .envs(fake_env)
            .args(["--url", &slot.url, "--key", &self.key])
            .args(["--resource", &self.resource, "--name", &name])
            .args(
                self.config
                    .clock_rate
                    .map(|_| ["--resource-url", self.config.url.as_str()])
                    .into_iter()
                    .flatten(),
            )
            .args(["--lease-secs", &self.config.lease.as_secs().to_string()])
            .args(zombie.then_some("--zombie"))
            .args(self.config.unfenced.then_some("--unfenced"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.config.contender.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let records = self.records.clone();
        let proc = name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match parse_line(&line) {
                    Ok((t_ms, event)) => {
                        if !matches!(
                            event,
                            Event::Write {
                                outcome: WriteOutcome::Accepted { .. },
                                ..
                            } | Event::Armed { .. }
                        ) {
                            println!("[{proc}] {line}");
                        }
                        let record = Record::new(t_ms, proc.clone(), event);
                        let record = match fake {
                            Some(clock) => clock.record_to_real(record),
                            None => record,
                        };
                        records
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(record);
                    }
                    Err(err) => tracing::warn!(%err, "ignoring a contender line"),
                }
            }
        });
        slot.child = Some((name, child));
        Ok(())
    }

    /// Restarts every contender that has exited.
    fn reap(&self, slots: &mut [Slot]) -> anyhow::Result<()> {
        for slot in slots.iter_mut() {
            let exited = match slot.child.as_mut() {
                Some((name, child)) => child
                    .try_wait()?
                    .map(|status| (name.clone(), status.code())),
                None => None,
            };
            if let Some((name, code)) = exited {
                push(&self.records, &name, Event::Exited { code });
                slot.child = None;
                self.spawn(slot)?;
            }
        }
        Ok(())
    }

    /// The process leading now (see [`current_leader`]).
    fn leader(&self) -> Option<String> {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        current_leader(&records)
    }

    /// Waits (restarting exited contenders) until someone leads, up to `limit`.
    async fn wait_leader(
        &self,
        slots: &mut [Slot],
        limit: Duration,
    ) -> anyhow::Result<Option<String>> {
        let until = tokio::time::Instant::now() + limit;
        loop {
            self.reap(slots)?;
            if let Some(leader) = self.leader() {
                return Ok(Some(leader));
            }
            if tokio::time::Instant::now() > until {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sleeps `time`, restarting exited contenders meanwhile.
    async fn pass(&self, slots: &mut [Slot], time: Duration) -> anyhow::Result<()> {
        let until = tokio::time::Instant::now() + time;
        while tokio::time::Instant::now() < until {
            self.reap(slots)?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn scenarios(&self, slots: &mut [Slot]) -> anyhow::Result<()> {
        let d = self.config.lease;
        let end = tokio::time::Instant::now() + self.config.duration;
        let plan: &[Scenario] = match self.config.direct {
            // No proxy to cut: the engine's nodes are partitioned instead.
            true => &[Scenario::Kill, Scenario::Pause],
            false => &[Scenario::Kill, Scenario::Pause, Scenario::Partition],
        };
        let mut round = 0usize;
        // The first leader may need a while: every contender connects first.
        let mut patience = d * 10;
        let mut clock = None;
        while tokio::time::Instant::now() < end {
            let Some(leader) = self.wait_leader(slots, patience).await? else {
                anyhow::bail!("no leader within {patience:?}: liveness lost");
            };
            patience = d * 3 + self.config.takeover_slack();
            if clock.is_none() {
                clock = self.config.server_clock.clone().map(|server| {
                    let records = self.records.clone();
                    let (lease, duration) = (d, self.config.duration);
                    AbortOnDrop(tokio::spawn(async move {
                        let renewed = |since_ms| {
                            let records = records.lock().unwrap_or_else(PoisonError::into_inner);
                            leader::renewed_since(&records, since_ms)
                        };
                        let record = |offset_ms| {
                            push(&records, "server", Event::ServerClock { offset_ms });
                        };
                        server.drive(lease, duration, renewed, record).await;
                    }))
                });
            }
            // Let it work a little first.
            self.pass(slots, d / 2).await?;
            let Some(idx) = slots
                .iter()
                .position(|s| s.child.as_ref().is_some_and(|(n, _)| *n == leader))
            else {
                continue;
            };
            let Some(pid) = slots[idx].child.as_ref().and_then(|(_, c)| c.id()) else {
                continue;
            };
            let scenario = match self.config.clock_rate {
                // Aim at the slow (or fast) clock: cut it off the store
                // while it leads, move the leadership on otherwise.
                Some(_) if slots[idx].index == 0 && slots[idx].proxy.is_some() => {
                    Scenario::Partition
                }
                Some(_) => Scenario::Kill,
                None => {
                    round += 1;
                    plan[(round - 1) % plan.len()]
                }
            };
            match scenario {
                Scenario::Kill => {
                    push(&self.records, &leader, Event::SigKill);
                    if let Some((_, child)) = slots[idx].child.as_mut() {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                }
                Scenario::Pause => {
                    push(&self.records, &leader, Event::SigStop);
                    signal(pid, "STOP").await?;
                    self.pass(slots, d * 3 / 2).await?;
                    push(&self.records, &leader, Event::SigCont);
                    signal(pid, "CONT").await?;
                }
                Scenario::Partition => {
                    let Some(proxy) = slots[idx].proxy.as_ref() else {
                        continue;
                    };
                    push(&self.records, &leader, Event::Cut);
                    proxy.cut().await;
                    self.pass(slots, d * 3 / 2).await?;
                    // The slot may hold a fresh process by now (the killer
                    // ended the old one): the path is restored either way.
                    if let Some(proxy) = slots[idx].proxy.as_ref() {
                        proxy.restore();
                    }
                    push(&self.records, &leader, Event::Restored);
                }
            }
            self.pass(slots, d / 2).await?;
        }
        // Let the last takeover happen before the run ends.
        let _ = self.wait_leader(slots, patience).await?;
        self.pass(slots, d / 2).await?;
        Ok(())
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxied_url_keeps_keyspace_and_options() {
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        assert_eq!(
            proxied_url(
                "scylla://10.0.0.1:9042/ks?replication=simple:1&create_schema=true",
                addr
            )
            .unwrap(),
            "scylla://127.0.0.1:7000/ks?replication=simple:1&create_schema=true"
        );
        for original in [
            "dynamodb://tbl?region=r&endpoint=http://127.0.0.1:8000&create_table=true",
            "dynamodb://tbl?region=r&endpoint=http://localhost:8000",
        ] {
            let proxied: StorageUrl = proxied_url(original, addr).unwrap().parse().unwrap();
            assert_eq!(proxied.endpoint().as_deref(), Some("127.0.0.1:7000"));
            let keeps =
                original.contains("create_table") == proxied.as_str().contains("create_table=true");
            assert!(keeps, "{proxied}");
        }
        for (original, proxied) in [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:7000"),
            (
                "postgresql://postgres:s3cret%3A%40@127.0.0.1:5432/postgres",
                "postgresql://postgres:s3cret%3A%40@127.0.0.1:7000/postgres",
            ),
            ("etcd://127.0.0.1:2379", "etcd://127.0.0.1:7000"),
        ] {
            let got: StorageUrl = proxied_url(original, addr).unwrap().parse().unwrap();
            assert_eq!(got.endpoint().as_deref(), Some("127.0.0.1:7000"), "{got}");
            let want: StorageUrl = proxied.parse().unwrap();
            assert_eq!(got.driver().name, want.driver().name);
            // The password stays (the contender connects with it).
            assert_eq!(
                proxied_url(original, addr).unwrap().contains("s3cret"),
                original.contains("s3cret")
            );
        }
        assert!(proxied_url("dynamodb://tbl?region=r", addr).is_err());
        assert!(proxied_url("mysql://x", addr).is_err());
        assert!(proxied_url("redb:///tmp/x.redb", addr).is_err());
        assert!(proxied_url("scylla://host", addr).is_err());
    }
}
