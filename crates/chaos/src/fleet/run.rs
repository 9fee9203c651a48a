//! A fleet run: the processes, the faults, the check.

use std::{
    ffi::OsString,
    fmt,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use coordinator::{DestinationId, MemberId, Registry, RegistryConfig, strategy::RoundRobin};
use storage_url::StorageUrl;

use super::{
    delay_proxy::DelayProxy,
    faults::delay_windows,
    history::{self, HistoryReport},
    load::{self, Coordinators, LoadCounts},
    procs::Proc,
};
use crate::proxy::FaultProxy;

/// How a fleet run is set up.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Valkey's URL (`redis://host:port`), direct.
    pub url: String,
    /// The `chaos-pod` executable.
    pub pod_exe: PathBuf,
    /// The `chaos-coordinator` executable.
    pub coordinator_exe: PathBuf,
    /// Pod processes kept running (at least 3).
    pub pods: usize,
    /// Coordinator processes kept running (at least 2).
    pub coordinators: usize,
    /// Destinations bound to one pod each (by first touch), checked.
    pub destinations: usize,
    /// Concurrent callers.
    pub workers: usize,
    /// The pods' member record TTL (they heartbeat every quarter of it).
    pub ttl: Duration,
    /// How long faults are injected.
    pub duration: Duration,
    /// Where the histories and the processes' logs go.
    pub work_dir: PathBuf,
    /// Negative control: pods without the ownership fence.
    pub unfenced: bool,
    /// Pods keep a result without re-checking ownership after the work.
    pub no_commit_check: bool,
}

/// Faults injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Pods cut from Valkey.
    pub cuts: u64,
    /// Pods SIGKILLed.
    pub pod_kills: u64,
    /// Of those, pods restarted under the same member id (at the same
    /// address); the others got a new id (at the same address too).
    pub same_id_restarts: u64,
    /// Windows in which the first coordinator's Valkey replies were delayed.
    pub delay_windows: u64,
    /// Pods SIGSTOPped.
    pub pauses: u64,
    /// Coordinators SIGKILLed.
    pub coordinator_kills: u64,
    /// Destinations deregistered (`DELETE /destinations/{d}`, answered 2xx
    /// by their pod), then claimed again by the load's next call.
    pub deregistrations: u64,
    /// Processes that exited on their own and were restarted.
    pub unexpected_exits: u64,
}

/// The outcome of a run.
#[derive(Debug)]
pub struct FleetReport {
    /// What the pods' histories show.
    pub history: HistoryReport,
    /// What the callers saw.
    pub load: Arc<LoadCounts>,
    /// The faults injected.
    pub faults: FaultCounts,
    /// History lines that could not be parsed (torn by a SIGKILL).
    pub torn_lines: usize,
}

impl FleetReport {
    /// Whether the run passed: calls were served, and none by two pods at
    /// once.
    pub fn ok(&self) -> bool {
        self.history.overlapping == 0 && self.history.served > 0
    }
}

impl fmt::Display for FleetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.load;
        let h = &self.history;
        let fc = &self.faults;
        write!(
            f,
            "{} calls ({} ok, {} errors, {} transport/timeouts), {} served, {} failovers, \
             {} refused stale calls ({} 421s seen by clients); faults: {} cuts, {} pod kills \
             ({} restarted under the same id), {} pauses, {} coordinator kills, {} deregistrations, \
             {} windows of delayed Valkey replies; {} served by two pods at once",
            LoadCounts::get(&l.calls),
            LoadCounts::get(&l.ok),
            LoadCounts::get(&l.errors),
            LoadCounts::get(&l.transport),
            h.served,
            h.failovers,
            h.refused,
            LoadCounts::get(&l.stale_passed),
            fc.cuts,
            fc.pod_kills,
            fc.same_id_restarts,
            fc.pauses,
            fc.coordinator_kills,
            fc.deregistrations,
            fc.delay_windows,
            h.overlapping
        )
    }
}

/// The fanned-out destinations (bound to two pods each, not checked).
const FANNED: [&str; 2] = ["fan-0", "fan-1"];

/// Whether a destination is fanned out on purpose.
fn fanned(dest: &str) -> bool {
    dest.starts_with("fan-")
}

/// How long a child may take to announce itself.
const START_LIMIT: Duration = Duration::from_secs(15);

pub(super) struct PodSlot {
    pub(super) index: usize,
    pub(super) generation: u32,
    /// The loopback port every process of this slot listens on.
    pub(super) port: u16,

    pub(super) proxy: FaultProxy,
    pub(super) proc: Option<Proc>,
}

pub(super) struct CoordinatorSlot {
    pub(super) index: usize,
    pub(super) generation: u32,
    pub(super) proc: Option<Proc>,
}

pub(super) struct Fleet<'a> {
    pub(super) config: &'a FleetConfig,
    pub(super) prefix: String,
    pub(super) direct_url: String,
    pub(super) proxied_urls: Vec<String>,
    pub(super) pods: Vec<PodSlot>,
    pub(super) coordinators: Vec<CoordinatorSlot>,
    /// The first coordinator's path to Valkey.
    pub(super) delayed: Arc<DelayProxy>,
    pub(super) addresses: Coordinators,
    pub(super) faults: FaultCounts,
}

/// Runs the whole thing and returns the checked report.
///
/// # Errors
///
/// Setup failures (Valkey unreachable, a binary missing, a process that
/// does not start). Overlaps are in the report, not errors.
pub async fn run(config: FleetConfig) -> anyhow::Result<FleetReport> {
    anyhow::ensure!(config.pods >= 3, "at least 3 pods");
    anyhow::ensure!(config.coordinators >= 2, "at least 2 coordinators");
    std::fs::create_dir_all(&config.work_dir)?;
    let url: StorageUrl = config.url.parse()?;
    let endpoint = url
        .endpoint()
        .with_context(|| format!("{url} must name one address"))?;
    let upstream: SocketAddr = tokio::net::lookup_host(&endpoint)
        .await?
        .next()
        .with_context(|| format!("cannot resolve {endpoint}"))?;
    let run_id = history::now_us() / 1000;
    let delayed = Arc::new(DelayProxy::start(upstream).await?);
    let mut fleet = Fleet {
        config: &config,
        prefix: format!("chaos-fleet-{run_id}"),
        direct_url: config.url.clone(),
        proxied_urls: Vec::new(),
        pods: Vec::new(),
        coordinators: Vec::new(),
        delayed: delayed.clone(),
        addresses: Arc::new(RwLock::new(vec![None; config.coordinators])),
        faults: FaultCounts::default(),
    };
    for index in 0..config.pods {
        let proxy = FaultProxy::start(upstream).await?;
        let proxied = url.with_endpoint(&proxy.local_addr().to_string())?;
        fleet.proxied_urls.push(proxied.as_str().to_owned());
        fleet.pods.push(PodSlot {
            index,
            generation: 0,
            port: free_port()?,
            proxy,
            proc: None,
        });
    }
    for index in 0..config.pods {
        fleet.start_pod(index, false).await?;
    }
    for index in 0..config.coordinators {
        fleet.coordinators.push(CoordinatorSlot {
            index,
            generation: 0,
            proc: None,
        });
        fleet.start_coordinator(index).await?;
    }
    fleet.fan_out().await?;

    let mut destinations: Vec<DestinationId> = (0..config.destinations)
        .map(|i| DestinationId::new(format!("d{i}")))
        .collect::<Result<_, _>>()?;
    for name in FANNED {
        destinations.push(DestinationId::new(name)?);
    }
    let counts = Arc::new(LoadCounts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers = load::spawn(
        config.workers,
        fleet.addresses.clone(),
        destinations.into(),
        counts.clone(),
        stop.clone(),
    );
    let windows = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let delaying = tokio::spawn(delay_windows(delayed, config.ttl, windows.clone()));
    let outcome = fleet.faults_loop().await;
    delaying.abort();
    fleet.faults.delay_windows = windows.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), worker).await;
    }
    fleet.stop_all().await;
    outcome?;

    let mut entries = Vec::new();
    let mut torn_lines = 0;
    for entry in std::fs::read_dir(&config.work_dir)? {
        let path = entry?.path();
        let is_history = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("history-") && n.ends_with(".log"));
        if is_history {
            let text = std::fs::read_to_string(&path)?;
            let (mut parsed, bad) = history::parse_history(&text);
            entries.append(&mut parsed);
            torn_lines += bad;
        }
    }
    Ok(FleetReport {
        history: history::check_history(&entries, fanned),
        load: counts,
        faults: fleet.faults,
        torn_lines,
    })
}

/// A loopback port for a pod, kept across its restarts: free now, and in
/// 10 000..30 000, below the kernel's ephemeral range (from 32 768 by
/// default), so that no outgoing connection can take it while the pod is
/// down, as one from `bind(0)` could (the restarted pod would then fail
/// with "address in use"). Handed out once per process; the start of the
/// walk follows the pid, so that two runs at once rarely meet.
fn free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static WALKED: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id() % 20_000;
    for _ in 0..20_000 {
        let step = WALKED.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (offset + step) % 20_000;
        let port = u16::try_from(port).unwrap_or(10_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no free port in 10000..30000",
    ))
}

impl Fleet<'_> {
    pub(super) fn note(&self, what: &str) {
        let line = format!("{} {what}", history::now_us());
        println!("[fleet] {line}");
        let path = self.config.work_dir.join("faults.log");
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            use std::io::Write;
            let _ = writeln!(file, "{line}");
        }
    }

    /// Starts the pod of slot `index` at the slot's port: under the slot's
    /// last member id with `same_id`, else under a new one.
    pub(super) async fn start_pod(&mut self, index: usize, same_id: bool) -> anyhow::Result<()> {
        let slot = &mut self.pods[index];
        if !same_id || slot.generation == 0 {
            slot.generation += 1;
        }
        let name = format!("p{}.{}", slot.index, slot.generation);
        let port = slot.port;
        let dir = &self.config.work_dir;
        let mut args: Vec<OsString> = vec![
            "--valkey".into(),
            self.proxied_urls[index].clone().into(),
            "--prefix".into(),
            self.prefix.clone().into(),
            "--id".into(),
            name.clone().into(),
            "--history".into(),
            dir.join(format!("history-{name}.log")).into(),
            "--ttl-ms".into(),
            self.config.ttl.as_millis().to_string().into(),
            "--port".into(),
            port.to_string().into(),
        ];
        if self.config.unfenced {
            args.push("--unfenced".into());
        }
        if self.config.no_commit_check {
            args.push("--no-commit-check".into());
        }
        let log = dir.join(format!("{name}.log"));
        let proc =
            Proc::start(&self.config.pod_exe, args, name, log, "ready ", START_LIMIT).await?;
        self.note(&format!("started pod {} at {}", proc.name, proc.addr));
        self.pods[index].proc = Some(proc);
        Ok(())
    }

    pub(super) async fn start_coordinator(&mut self, index: usize) -> anyhow::Result<()> {
        let slot = &mut self.coordinators[index];
        slot.generation += 1;
        let name = format!("c{}.{}", slot.index, slot.generation);
        // the first coordinator reaches Valkey through the delay proxy; the
        // second forwards to every pod but the first slot's (another
        // address policy)
        let valkey = match index {
            0 => self.proxied(self.delayed.local_addr())?,
            _ => self.direct_url.clone(),
        };
        let mut args: Vec<OsString> = vec![
            "--valkey".into(),
            valkey.into(),
            "--prefix".into(),
            self.prefix.clone().into(),
        ];
        if index == 1 {
            for pod in self.pods.iter().skip(1) {
                args.extend(["--allow-port".into(), pod.port.to_string().into()]);
            }
        }
        let log = self.config.work_dir.join(format!("{name}.log"));
        let proc = Proc::start(
            &self.config.coordinator_exe,
            args,
            name,
            log,
            "listening ",
            START_LIMIT,
        )
        .await?;
        self.note(&format!(
            "started coordinator {} at {}",
            proc.name, proc.addr
        ));
        self.set_address(index, Some(format!("http://{}", proc.addr)));
        self.coordinators[index].proc = Some(proc);
        Ok(())
    }

    /// The Valkey URL through a proxy at `addr`.
    fn proxied(&self, addr: SocketAddr) -> anyhow::Result<String> {
        let url: StorageUrl = self.direct_url.parse()?;
        Ok(url.with_endpoint(&addr.to_string())?.as_str().to_owned())
    }

    pub(super) fn set_address(&self, index: usize, addr: Option<String>) {
        let mut addresses = self
            .addresses
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = addresses.get_mut(index) {
            *slot = addr;
        }
    }

    /// Binds each fanned-out destination to two pods.
    async fn fan_out(&self) -> anyhow::Result<()> {
        let valkey = coordinator::connect(&self.direct_url, Duration::from_secs(2)).await?;
        let config = RegistryConfig {
            prefix: self.prefix.clone(),
            ..RegistryConfig::default()
        };
        let registry = Registry::new(valkey, config, Arc::new(RoundRobin::new()))?;
        for (i, name) in FANNED.iter().enumerate() {
            let dest = DestinationId::new(*name)?;
            for slot in [i, i + 1] {
                let Some(proc) = self.pods[slot % self.pods.len()].proc.as_ref() else {
                    continue;
                };
                registry
                    .add_pod_to_destination(&dest, &MemberId::new(proc.name.clone())?)
                    .await?;
            }
        }
        Ok(())
    }

    /// Restarts every process that exited on its own (a pod only while its
    /// path to Valkey is open).
    async fn reap(&mut self) -> anyhow::Result<()> {
        for index in 0..self.pods.len() {
            let slot = &mut self.pods[index];
            let gone = slot.proc.as_mut().is_none_or(Proc::exited);
            if gone && !slot.proxy.is_cut() {
                if let Some(proc) = slot.proc.take() {
                    self.faults.unexpected_exits += 1;
                    self.note(&format!("pod {} exited; restarting", proc.name));
                }
                self.start_pod(index, false).await?;
            }
        }
        for index in 0..self.coordinators.len() {
            let slot = &mut self.coordinators[index];
            if slot.proc.as_mut().is_none_or(Proc::exited) {
                if let Some(proc) = slot.proc.take() {
                    self.faults.unexpected_exits += 1;
                    self.note(&format!("coordinator {} exited; restarting", proc.name));
                }
                self.start_coordinator(index).await?;
            }
        }
        Ok(())
    }

    /// Sleeps `time`, restarting exited processes meanwhile.
    pub(super) async fn pass(&mut self, time: Duration) -> anyhow::Result<()> {
        let until = tokio::time::Instant::now() + time;
        while tokio::time::Instant::now() < until {
            self.reap().await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn stop_all(&mut self) {
        for slot in &mut self.pods {
            if let Some(proc) = slot.proc.as_mut() {
                // a paused pod dies from SIGKILL too
                proc.kill().await;
            }
        }
        for slot in &mut self.coordinators {
            if let Some(proc) = slot.proc.as_mut() {
                proc.kill().await;
            }
        }
    }
}
