//! Valkey as users run it highly available: a primary, one replica and
//! three Sentinels watching them (service `mymaster`, quorum 2, the
//! primary deemed down after 2 s, failover timeout 5 s), all local processes of the same
//! `valkey-server` (or `redis-server`) binary as [`super::valkey`],
//! persistence off, each with its own free ports.
//!
//! [`start`] waits until the replica's link is up and `SENTINEL ckquorum`
//! passes on every Sentinel, and returns `VALKEY_URL` naming the
//! Sentinels (`redis-sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>/mymaster`),
//! `VALKEY_PRIMARY_URL` (the primary itself, for the suite's cases that
//! need one server's address), `VALKEY_TLS_URL` (the primary's TLS port)
//! and `VALKEY_REPLICAS=1`.
//!
//! [`fail_over`] SIGKILLs the primary and waits until the Sentinels name
//! the replica and it reports `role:master`; the variables then name the
//! promoted server and `VALKEY_REPLICAS=0`. Every process is killed and
//! the directory removed when the [`Started`] is dropped.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{
    LogTo, Started,
    failover::{FailoverReport, fault_line, hold_for},
    free_port, kill_tree,
};

/// The service the Sentinels monitor.
const SERVICE: &str = "mymaster";
/// How long the set may take to be ready, and a failover to complete.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// `sentinel down-after-milliseconds`: a primary that has not answered for
/// this long is subjectively down. Twice Sentinel's ping period: a
/// Sentinel reconnects to an instance at most once a ping period (1 s) and
/// restarts the count at a `+switch-master`, so with 1 s it judged the
/// just-promoted primary down a second after the switch, tried a failover
/// with no replica to promote (`-failover-abort-no-good-slave`), and the
/// next real failover then waited out the embargo below (measured: 6.4 s
/// instead of 2.3 s).
const DOWN_AFTER: Duration = Duration::from_millis(2_000);
/// `sentinel failover-timeout`: also the embargo on a Sentinel's next
/// failover attempt after one (twice this), and the wait for a promotion.
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(5_000);
/// Sentinel's own periods (`sentinel.c`, not configurable):
/// `SENTINEL_ASK_PERIOD`, how often a Sentinel asks the others whether
/// they see the primary down (objectively down needs the quorum's word);
/// the `INFO` period while a failover runs, after which the leading
/// Sentinel sees the replica promoted; and the timer, which runs 10 to 19
/// times a second and takes one step of the failover per run.
const ASK_PERIOD: Duration = Duration::from_millis(1_000);
const FAILOVER_INFO_PERIOD: Duration = Duration::from_millis(1_000);
const TIMER_TICK: Duration = Duration::from_millis(100);
/// Timer steps of a failover besides the two waits above: subjectively
/// down, objectively down, leader elected, replica selected and sent
/// `REPLICAOF NO ONE`, new primary announced (`+switch-master`).
const TIMER_STEPS: u32 = 5;
/// storage-valkey's longest reconnection delay (`RECONNECT_MAX_MS`) plus
/// fred's reconnection jitter (`DEFAULT_JITTER_MS`): after a Sentinel
/// names the new primary, a client connected to the old one is on it
/// within this.
const DRIVER_REDISCOVERY: Duration = Duration::from_millis(500 + 100);

/// What one primary kill can add to a takeover (see `docs/guarantees.md`,
/// "Takeovers across a failover"): with the kill just before a dead
/// holder's record runs out, nobody can write until the replica is
/// promoted (down-after, one ask period for the quorum, one `INFO`
/// period, the timer's steps) and the clients have reconnected to it.
///
/// Not in it: `SENTINEL_MAX_DESYNC` (up to 1 s) delays only a Sentinel
/// that voted for another, or a second attempt; the other Sentinels have
/// the new primary from the leader's hello within milliseconds (measured
/// 1-6 ms); an election that fails (all three Sentinels candidates at once)
/// is retried after twice `failover-timeout`, 10 s here, which the bound
/// does not cover (the run then reports it, and the Sentinels' failover
/// steps are printed).
pub(crate) fn failover_takeover_slack() -> Duration {
    DOWN_AFTER + ASK_PERIOD + FAILOVER_INFO_PERIOD + TIMER_TICK * TIMER_STEPS + DRIVER_REDISCOVERY
}

/// The processes; dropping this kills them and removes their directory.
pub(crate) struct Set {
    /// Primary (0) and replica (1), then the three Sentinels.
    children: Vec<Option<Child>>,
    /// Plain ports of the primary and the replica.
    ports: [u16; 2],
    /// TLS ports of the primary and the replica.
    tls_ports: [u16; 2],
    sentinel_ports: [u16; 3],
    dir: PathBuf,
    ca: PathBuf,
    /// Which of the two servers is the primary now.
    primary: usize,
    /// Whether the other server runs (as a replica).
    replica_up: bool,
    /// The binary and the arguments of the two servers, without `--replicaof`.
    commands: Vec<(PathBuf, Vec<String>)>,
    /// How much of each Sentinel's log [`Set::print_failover_events`] has read.
    log_read: [usize; 3],
}

impl Drop for Set {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            kill_tree(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Set {
    /// Starts server `i` (again), a replica of `replicaof` if given.
    fn spawn_server(&mut self, i: usize, replicaof: Option<u16>) -> Result<()> {
        let (binary, args) = &self.commands[i];
        let mut args = args.clone();
        if let Some(port) = replicaof {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
        }
        let child = spawn_logged(&self.dir, ["primary", "replica"][i], binary, args)?;
        self.children[i] = Some(child);
        Ok(())
    }

    fn env(&self) -> Vec<(String, String)> {
        let live = self.primary;
        let sentinels: Vec<String> = self
            .sentinel_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        vec![
            (
                "VALKEY_URL".to_string(),
                format!("redis-sentinel://{}/{SERVICE}", sentinels.join(",")),
            ),
            (
                "VALKEY_PRIMARY_URL".to_string(),
                format!("redis://127.0.0.1:{}", self.ports[live]),
            ),
            (
                "VALKEY_TLS_URL".to_string(),
                format!(
                    "rediss://127.0.0.1:{}?tls_ca_file={}",
                    self.tls_ports[live],
                    self.ca.display()
                ),
            ),
            (
                "VALKEY_REPLICAS".to_string(),
                if self.replica_up { "1" } else { "0" }.to_string(),
            ),
        ]
    }

    /// Polls `done` every 200 ms until it holds; fails after
    /// [`READY_TIMEOUT`] or when a process that should run has exited.
    fn wait(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) -> Result<Duration> {
        let started = Instant::now();
        loop {
            for (i, child) in self.children.iter_mut().enumerate() {
                if let Some(child) = child
                    && let Some(status) = child.try_wait()?
                {
                    bail!("valkey-sentinel: process {i} exited ({status})");
                }
            }
            if done(self) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!("valkey-sentinel: {what} not after {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The port the Sentinel at `port` names as the primary.
    fn primary_port(sentinel: u16) -> Option<u16> {
        let reply = command(sentinel, &["SENTINEL", "get-master-addr-by-name", SERVICE])?;
        // *2 $9 127.0.0.1 $5 <port>
        reply
            .lines()
            .filter(|l| !l.starts_with(['*', '$']))
            .nth(1)?
            .trim()
            .parse()
            .ok()
    }
}

/// Starts the five processes; see the module docs.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    let binary = super::valkey::find_binary()?;
    let ports = [free_port()?, free_port()?];
    let tls_ports = [free_port()?, free_port()?];
    let sentinel_ports = [free_port()?, free_port()?, free_port()?];
    let dir = work_dir.join(format!("sentinel-{}", ports[0]));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let certs = super::tls::generate(&dir.join("tls"))?;
    let mut set = Set {
        children: Vec::new(),
        ports,
        tls_ports,
        sentinel_ports,
        dir: dir.clone(),
        ca: certs.ca.clone(),
        primary: 0,
        replica_up: true,
        commands: Vec::new(),
        log_read: [0; 3],
    };
    for (i, name) in ["primary", "replica"].into_iter().enumerate() {
        let data = dir.join(name);
        std::fs::create_dir_all(&data)?;
        let mut args: Vec<String> = [
            "--port",
            &ports[i].to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--tls-port",
            &tls_ports[i].to_string(),
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (flag, path) in [
            ("--tls-cert-file", &certs.cert),
            ("--tls-key-file", &certs.key),
            ("--tls-ca-cert-file", &certs.ca),
            ("--dir", &data),
        ] {
            args.push(flag.to_string());
            args.push(path.display().to_string());
        }
        set.commands.push((binary.clone(), args));
        set.children.push(None);
        set.spawn_server(i, (i == 1).then_some(ports[0]))?;
    }
    for (i, port) in sentinel_ports.iter().enumerate() {
        let conf = dir.join(format!("sentinel{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {} 2\n\
                 sentinel down-after-milliseconds {SERVICE} {}\n\
                 sentinel failover-timeout {SERVICE} {}\n\
                 sentinel parallel-syncs {SERVICE} 1\n",
                dir.display(),
                ports[0],
                DOWN_AFTER.as_millis(),
                FAILOVER_TIMEOUT.as_millis()
            ),
        )?;
        let args = vec![conf.display().to_string(), "--sentinel".to_string()];
        let child = spawn_logged(&dir, &format!("sentinel{i}"), &binary, args)?;
        set.children.push(Some(child));
    }
    // Sentinels learn of replicas from the primary's INFO (every 10 s): a
    // failover before they know the replica would find none to promote.
    let took = set
        .wait(
            "the replica in sync, known to every Sentinel, and the quorum",
            |s| {
                let linked = command(s.ports[1], &["INFO", "replication"])
                    .is_some_and(|info| info.contains("master_link_status:up"));
                linked
                    && s.sentinel_ports.iter().all(|&p| {
                        command(p, &["SENTINEL", "ckquorum", SERVICE])
                            .is_some_and(|r| r.starts_with("+OK"))
                            && command(p, &["SENTINEL", "replicas", SERVICE])
                                .is_some_and(|r| r.starts_with("*1\r\n"))
                    })
            },
        )
        .with_context(|| format!("see the logs in {}", dir.display()))?;
    println!(
        "valkey-sentinel: primary :{}, replica :{}, Sentinels {sentinel_ports:?} ready in {:.1}s",
        ports[0],
        ports[1],
        took.as_secs_f64()
    );
    let env = set.env();
    Ok(Started::external(env).with_guard(set))
}

/// SIGKILLs the primary and waits until the replica is promoted.
pub(crate) fn fail_over(started: &mut Started) -> Result<()> {
    let set = started
        .guard_mut::<Set>()
        .context("not a valkey-sentinel set")?;
    set.kill_primary()?;
    let env = set.env();
    started.env = env;
    Ok(())
}

/// Chaos: SIGKILLs the primary, waits until the Sentinels promote the
/// replica, holds the old primary down for `hold`, restarts it as a
/// replica of the new one, waits until it is in sync, waits `gap`, and
/// again, until `stop`.
pub(crate) fn primary_faults(
    started: &mut Started,
    hold: Duration,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> Result<FailoverReport> {
    let set = started
        .guard_mut::<Set>()
        .context("not a valkey-sentinel set")?;
    let mut report = FailoverReport::default();
    if hold_for(gap, stop) {
        return Ok(report);
    }
    loop {
        let victim = set.primary;
        let took = set.kill_primary()?;
        report.kills += 1;
        report.slowest_failover = report.slowest_failover.max(took);
        let stopped = hold_for(hold.saturating_sub(took), stop);
        let primary_port = set.ports[set.primary];
        set.spawn_server(victim, Some(primary_port))?;
        let victim_port = set.ports[victim];
        set.wait(
            "the old primary in sync as a replica, seen up by every Sentinel",
            |s| {
                command(victim_port, &["INFO", "replication"])
                    .is_some_and(|info| info.contains("master_link_status:up"))
                    && s.sentinel_ports.iter().all(|&p| {
                        command(p, &["SENTINEL", "replicas", SERVICE]).is_some_and(|r| {
                            r.contains(&victim_port.to_string())
                                && !r.contains("s_down")
                                && !r.contains("disconnected")
                        })
                    })
            },
        )?;
        set.replica_up = true;
        report.rejoined += 1;
        fault_line(
            "valkey-sentinel",
            &format!(":{victim_port} restarted, a replica of :{primary_port} in sync"),
        );
        if stopped || hold_for(gap, stop) {
            return Ok(report);
        }
    }
}

impl Set {
    /// SIGKILLs the primary and waits until every Sentinel names the other
    /// server and it reports `role:master`; returns how long that took.
    fn kill_primary(&mut self) -> Result<Duration> {
        let victim = self.primary;
        let Some(mut child) = self.children.get_mut(victim).and_then(Option::take) else {
            bail!("the primary is already gone");
        };
        fault_line(
            "valkey-sentinel",
            &format!(
                "SIGKILL the primary :{} (pid {})",
                self.ports[victim],
                child.id()
            ),
        );
        kill_tree(&mut child);
        let killed = Instant::now();
        let next = 1 - victim;
        let port = self.ports[next];
        self.wait("the Sentinels promoting the replica", |s| {
            s.sentinel_ports
                .iter()
                .all(|&p| Set::primary_port(p) == Some(port))
                && command(port, &["INFO", "replication"])
                    .is_some_and(|info| info.contains("role:master"))
        })?;
        let took = killed.elapsed();
        fault_line(
            "valkey-sentinel",
            &format!(
                "replica :{port} promoted {:.1}s after the kill",
                took.as_secs_f64()
            ),
        );
        self.primary = next;
        self.replica_up = false;
        self.print_failover_events();
        Ok(took)
    }

    /// Prints the failover steps each Sentinel logged since the last call
    /// (with the Sentinel's own timestamps), to see where a slow failover
    /// spent its time.
    fn print_failover_events(&mut self) {
        // The step names of Valkey 8 / Redis 7 (`+promoted-slave`, ...).
        const STEPS: &[&str] = &[
            "+sdown master",
            "+odown",
            "+try-failover",
            "+vote-for-leader",
            "+elected-leader",
            "+selected-slave",
            "+promoted-slave",
            "+switch-master",
            "-failover-abort",
            "+failover-end",
        ];
        for (i, read) in self.log_read.iter_mut().enumerate() {
            let Ok(log) = std::fs::read_to_string(self.dir.join(format!("sentinel{i}.log"))) else {
                continue;
            };
            let new = log.get(*read..).unwrap_or_default();
            for line in new.lines().filter(|l| STEPS.iter().any(|s| l.contains(s))) {
                println!("[valkey-sentinel] sentinel{i}: {}", line.trim());
            }
            *read = log.len();
        }
    }
}

/// Starts `binary` with `args`, its output in `<dir>/<name>.log` (appended).
fn spawn_logged(dir: &Path, name: &str, binary: &Path, args: Vec<String>) -> Result<Child> {
    let log_path = dir.join(format!("{name}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    Command::new(binary)
        .args(args)
        .log_to(log)?
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))
}

/// Sends one command (RESP) to the server or Sentinel on `port` and
/// returns the raw reply, if it answers within a second.
pub(crate) fn command(port: u16, args: &[&str]) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .ok()?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 4096];
    // Read until the server pauses (a reply is sent at once, whole): a
    // short wait once it has begun, so polls time a failover closely.
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                stream
                    .set_read_timeout(Some(Duration::from_millis(20)))
                    .ok()?;
            }
            Err(_) if !reply.is_empty() => break,
            Err(_) => {}
        }
    }
    (!reply.is_empty()).then(|| String::from_utf8_lossy(&reply).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_can_add_down_after_two_sentinel_periods_the_timer_steps_and_a_reconnection() {
        assert_eq!(failover_takeover_slack(), Duration::from_millis(5_100));
    }
}
