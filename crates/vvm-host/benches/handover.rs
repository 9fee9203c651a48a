//! `cargo bench -p vvm-host --bench handover [-- N]`: how long a hand-over
//! through the program takes, from spawning `vvm-host handover` to the
//! successor's command printing its start line.
//!
//! Real processes: two `vvm-host run` nodes on one lock name (a leader and
//! a standby, each running `sh -c 'echo leading …; exec sleep 1000'`), then
//! N times (`N` from the first numeric argument or `HANDOVER_BENCH_N`,
//! default 50): spawn `vvm-host handover NAME`, wait for the standby's start
//! line, wait for the CLI (exit 0) and for the old leader (it exits 0 after
//! handing over), start it again as the standby, wait until it is listed as
//! a candidate; so the direction alternates. Printed per engine: p50, p99
//! and max of the whole, and the medians of its parts as the nodes' logs
//! show them (when the leader logged "hand-over requested", when it logged
//! "leadership handed over"), and the CLI's own start-up (`vvm-host
//! handover` of a name nobody leads: start, open the store, one read).
//!
//! `HANDOVER_BENCH_CONTAINMENT=MODE` runs the nodes with `--containment
//! MODE` (the default is `auto`), `HANDOVER_BENCH_VERBOSE=1` prints every
//! round.
//!
//! Engines: a shared redb file always; Valkey, PostgreSQL, etcd and
//! Kubernetes Leases when `VALKEY_URL`, `POSTGRES_URL`, `ETCD_URL` and
//! `KUBE_URL` are set (as `cargo xtask test-drivers --engine …` sets them)
//! and the binary was built with their features (`--features
//! valkey,postgres,etcd,kube`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{
    io::{BufRead, BufReader, Read},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

const BIN: &str = env!("CARGO_BIN_EXE_vvm-host");

/// Nothing here waits this long when it works.
const LIMIT: Duration = Duration::from_secs(30);

/// What each node runs while leading.
const SCRIPT: &str = r#"echo "leading $BENCH_ADDRESS $VVM_HOST_FENCING_TOKEN"; exec sleep 1000"#;

/// A line of a child's output and when this process read it.
type Line = (Instant, String);

struct Node {
    address: &'static str,
    child: Child,
    out: mpsc::Receiver<Line>,
    log: mpsc::Receiver<Line>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(reader: impl Read + Send + 'static) -> mpsc::Receiver<Line> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { return };
            let _ = tx.send((Instant::now(), line));
        }
    });
    rx
}

/// The first line containing `needle` (lines before it are dropped).
fn wait_for(rx: &mpsc::Receiver<Line>, needle: &str, what: &str) -> Result<Line, String> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.1.contains(needle) => return Ok(line),
            Ok(_) => {}
            Err(_) => return Err(format!("{what}: no line with {needle:?}")),
        }
    }
}

fn node(url: &str, name: &str, address: &'static str) -> Node {
    let mut child = Command::new(BIN)
        .args(["run", "--address", address, "--log", "info"])
        .args(["--storage", url, "--leadership-duration", "6s"])
        .args(
            std::env::var("HANDOVER_BENCH_CONTAINMENT")
                .map(|mode| vec!["--containment".to_owned(), mode])
                .unwrap_or_default(),
        )
        .args([name, "--", "sh", "-c", SCRIPT])
        .env("BENCH_ADDRESS", address)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vvm-host run");
    let out = lines(child.stdout.take().unwrap());
    let log = lines(child.stderr.take().unwrap());
    Node {
        address,
        child,
        out,
        log,
    }
}

/// The candidates `vvm-host status --json` lists for `name`.
fn candidates(url: &str, name: &str) -> usize {
    let out = Command::new(BIN)
        .args(["status", "--json", "--storage", url, name])
        .stderr(Stdio::null())
        .output()
        .expect("spawn vvm-host status");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    json.pointer("/keys/0/candidates")
        .and_then(|c| c.as_array().map(Vec::len))
        .unwrap_or(0)
}

fn wait_for_candidate(url: &str, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + LIMIT;
    while candidates(url, name) < 1 {
        if Instant::now() > deadline {
            return Err("the standby was never listed as a candidate".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// One engine's samples (milliseconds).
#[derive(Default)]
struct Samples {
    total: Vec<f64>,
    seen: Vec<f64>,
    handed: Vec<f64>,
    acquired: Vec<f64>,
    command: Vec<f64>,
    cli_start: Vec<f64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    // nearest rank
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn run_engine(url: &str, n: usize) -> Result<Samples, String> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = format!("bench{}x{stamp}", std::process::id());
    let mut leader = node(url, &name, "alpha");
    wait_for(&leader.out, "leading alpha", "alpha's start")?;
    let mut standby = node(url, &name, "bravo");
    wait_for_candidate(url, &name)?;
    let mut samples = Samples::default();
    for round in 0..n {
        // drop what the nodes logged before this round
        while leader.log.try_recv().is_ok() {}
        while standby.log.try_recv().is_ok() {}
        let asked = Instant::now();
        let cli = Command::new(BIN)
            .args(["handover", "--storage", url, "--timeout", "20s", &name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn vvm-host handover");
        let needle = format!("leading {}", standby.address);
        let started = wait_for(&standby.out, &needle, "the successor's start");
        let out = cli.wait_with_output().expect("vvm-host handover");
        let (started, _) = started?;
        samples.total.push(ms(started - asked));
        if !out.status.success() {
            return Err(format!(
                "round {round}: vvm-host handover: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if let Ok((seen, _)) = wait_for(&leader.log, "hand-over requested", "the leader's log") {
            samples.seen.push(ms(seen - asked));
        }
        if let Ok((handed, _)) = wait_for(&leader.log, "leadership handed over", "the leader's log")
        {
            samples.handed.push(ms(handed - asked));
        }
        if let Ok((at, _)) = wait_for(&standby.log, "leadership acquired", "the successor's log") {
            samples.acquired.push(ms(at - asked));
        }
        if let Ok((at, _)) = wait_for(&standby.log, "command started", "the successor's log") {
            samples.command.push(ms(at - asked));
        }
        if std::env::var_os("HANDOVER_BENCH_VERBOSE").is_some() {
            let last = |v: &Vec<f64>| v.last().copied().unwrap_or(f64::NAN);
            println!(
                "  round {round}: total {:.1} seen {:.1} handed {:.1} acquired {:.1} command {:.1}",
                last(&samples.total),
                last(&samples.seen),
                last(&samples.handed),
                last(&samples.acquired),
                last(&samples.command)
            );
        }
        let status = leader.child.wait().expect("wait for the old leader");
        if !status.success() {
            return Err(format!("round {round}: the old leader exited {status}"));
        }
        let address = leader.address;
        leader = std::mem::replace(&mut standby, node(url, &name, address));
        wait_for_candidate(url, &name)?;
        // The CLI's own start-up: a name nobody leads (start, open, one read).
        let asked = Instant::now();
        let _ = Command::new(BIN)
            .args(["handover", "--storage", url, &format!("{name}-nobody")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        samples.cli_start.push(ms(asked.elapsed()));
    }
    Ok(samples)
}

fn main() {
    let n = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .or_else(|| std::env::var("HANDOVER_BENCH_N").ok()?.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut engines = vec![(
        "redb (shared file)".to_owned(),
        format!("redb://{}", dir.path().join("locks.redb").display()),
    )];
    for (engine, var) in [
        ("valkey", "VALKEY_URL"),
        ("postgres", "POSTGRES_URL"),
        ("etcd", "ETCD_URL"),
        ("kube", "KUBE_URL"),
    ] {
        if let Ok(url) = std::env::var(var) {
            engines.push((engine.to_owned(), url));
        }
    }
    println!(
        "vvm-host handover -> the successor's command start, {n} hand-overs per engine (ms); load average {}",
        load_average()
    );
    for (engine, url) in engines {
        match run_engine(&url, n) {
            Ok(s) => {
                println!(
                    "{engine:<20} p50 {:6.1}  p99 {:6.1}  max {:6.1}  | medians: leader sees the request {:5.1}, leader handed over {:5.1}, successor acquired {:5.1}, logged its command started {:5.1}; CLI start-up alone {:5.1}",
                    quantile(&s.total, 0.5),
                    quantile(&s.total, 0.99),
                    quantile(&s.total, 1.0),
                    quantile(&s.seen, 0.5),
                    quantile(&s.handed, 0.5),
                    quantile(&s.acquired, 0.5),
                    quantile(&s.command, 0.5),
                    quantile(&s.cli_start, 0.5),
                );
            }
            Err(err) => println!("{engine:<20} failed: {err}"),
        }
    }
    println!("load average after: {}", load_average());
}

/// The machine's load (other work skews the figures): `/proc/loadavg`'s
/// first three fields.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|all| all.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
