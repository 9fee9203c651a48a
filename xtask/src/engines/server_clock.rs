//! Engines started with a movable wall clock, for `cargo xtask chaos
//! --server-clock` (the harness steps and strobes it: `chaos::server_clock`).
//!
//! The server reads its wall clock through a preload library that adds
//! the offset held in one file ([`ClockDir`]), re-read on every read:
//!
//! - **PostgreSQL**: libfaketime (`FAKETIME_TIMESTAMP_FILE`,
//!   `FAKETIME_NO_CACHE=1`, `FAKETIME_DONT_FAKE_MONOTONIC=1`): `now()` and
//!   `clock_timestamp()` follow the file.
//! - **Valkey**: libfaketime cannot start it (Debian's build links
//!   jemalloc, whose initialisation reads the clock while libfaketime's own
//!   is not done: "Unexpected recursive calls to clock_gettime()",
//!   libfaketime issue #130), so a small shim (`clock_shift.c`, built here
//!   with `cc`) reads the same file: `TIME` and key expiry follow it.
//! - **etcd**: libfaketime loads, but Go reads its clocks through the vDSO,
//!   never through libc, so nothing moves: [`probe`] measures it and says
//!   so. etcd's leases run on the leader's monotonic clock anyway.
//!
//! [`probe`] checks before each run what the file actually moves: it sets
//! `+3600 s`, reads the server's own time (Valkey `TIME`, PostgreSQL
//! `clock_timestamp()`, etcd's HTTP `Date`), and sets it back.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result, bail};

use super::Started;

/// Debian's libfaketime (package `libfaketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// The shim's source, built for engines libfaketime cannot run.
const SHIM_SOURCE: &str = include_str!("clock_shift.c");
/// The offset [`probe`] sets, in seconds.
const PROBE_OFFSET_S: f64 = 3600.0;

/// The engines `--server-clock` supports.
pub(crate) const ENGINES: &[&str] = &["valkey", "postgres", "etcd"];

/// A directory every user can read (PostgreSQL runs as `postgres` under
/// root) holding the offset file; removed on drop.
pub(crate) struct ClockDir {
    dir: PathBuf,
}

impl ClockDir {
    /// A fresh directory with the file at `+0.000`.
    pub(crate) fn create() -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let unique = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("ttl-server-clock-{}-{unique}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let clock = ClockDir { dir };
        clock.set(0.0)?;
        Ok(clock)
    }

    /// The offset file (what the harness gets as `--server-clock-file`).
    pub(crate) fn file(&self) -> PathBuf {
        self.dir.join("offset")
    }

    /// Sets the offset to `secs` (written beside the file, then renamed).
    fn set(&self, secs: f64) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let tmp = self.dir.join("offset.new");
        std::fs::write(&tmp, format!("{secs:+.3}\n"))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, self.file())?;
        Ok(())
    }
}

impl Drop for ClockDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The environment that gives `engine`'s server the clock of `clock`.
fn preload_env(engine: &str, work_dir: &Path, clock: &ClockDir) -> Result<Vec<(String, String)>> {
    let file = clock.file().display().to_string();
    match engine {
        "valkey" => {
            let shim = build_shim(work_dir)?;
            Ok(vec![
                ("LD_PRELOAD".into(), shim.display().to_string()),
                ("CLOCK_SHIFT_FILE".into(), file),
            ])
        }
        "postgres" | "etcd" => {
            if !Path::new(LIBFAKETIME).is_file() {
                bail!("{LIBFAKETIME} is missing (Debian: apt-get install libfaketime)");
            }
            Ok(vec![
                ("LD_PRELOAD".into(), LIBFAKETIME.into()),
                ("FAKETIME_TIMESTAMP_FILE".into(), file),
                ("FAKETIME_NO_CACHE".into(), "1".into()),
                ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
            ])
        }
        other => bail!(
            "--server-clock supports {}, not {other}",
            ENGINES.join(", ")
        ),
    }
}

/// Builds the shim into `work_dir` with `cc`.
fn build_shim(work_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(work_dir)?;
    let source = work_dir.join("clock_shift.c");
    let library = work_dir.join("clock_shift.so");
    std::fs::write(&source, SHIM_SOURCE)?;
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .context("running cc (Debian: apt-get install gcc)")?;
    if !out.status.success() {
        bail!(
            "cc failed to build the clock shim: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(library)
}

/// Starts `engine` (one of [`ENGINES`]) as `cargo xtask test-drivers`
/// would, with its wall clock read through `clock`.
pub(crate) fn start(engine: &str, work_dir: &Path, clock: &ClockDir) -> Result<Started> {
    let env = preload_env(engine, work_dir, clock)?;
    match engine {
        "valkey" => {
            let (child, url, _) = super::valkey::start_with_env(work_dir, false, &env)?;
            Ok(Started::local(child, vec![("VALKEY_URL".to_string(), url)]))
        }
        "postgres" => super::postgres::start_with_password_and_env(work_dir, &env),
        "etcd" => super::etcd::start_with_env(work_dir, &env),
        other => bail!("--server-clock does not support {other}"),
    }
}

/// What [`probe`] measured: the server's clock against real time with the
/// file at `+3600 s`, then back at 0.
pub(crate) struct Probe {
    /// Server time minus real time with the probe offset set (s).
    pub(crate) shifted: f64,
    /// The same with the offset back at 0 (s).
    pub(crate) restored: f64,
    /// How precisely the engine reports its time (s).
    resolution: f64,
}

impl Probe {
    /// Whether the server's clock followed the file.
    pub(crate) fn moved(&self) -> bool {
        (self.shifted - PROBE_OFFSET_S).abs() <= self.resolution + 2.0
            && self.restored.abs() <= self.resolution + 2.0
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.moved() {
            true => write!(
                f,
                "server clock follows the offset file (measured {:+.1} s with {PROBE_OFFSET_S:+.0} s set, {:+.1} s at 0)",
                self.shifted, self.restored
            ),
            false => write!(
                f,
                "server clock did NOT move (measured {:+.1} s with {PROBE_OFFSET_S:+.0} s set): the fault does not reach this server",
                self.shifted
            ),
        }
    }
}

/// Sets `+3600 s`, reads `engine`'s own time, sets 0 and reads again.
pub(crate) fn probe(engine: &str, started: &Started, clock: &ClockDir) -> Result<Probe> {
    let var = match engine {
        "valkey" => "VALKEY_URL",
        "postgres" => "POSTGRES_URL",
        "etcd" => "ETCD_URL",
        other => bail!("no clock probe for {other}"),
    };
    let url = started
        .env
        .iter()
        .find(|(k, _)| k == var)
        .map(|(_, v)| v.clone())
        .with_context(|| format!("the engine did not set {var}"))?;
    let read = |url: &str| -> Result<f64> {
        match engine {
            "valkey" => valkey_time(url),
            "postgres" => postgres_time(url),
            _ => etcd_time(url),
        }
    };
    clock.set(PROBE_OFFSET_S)?;
    let shifted = read(&url).map(|t| t - now());
    clock.set(0.0)?;
    let restored = read(&url)? - now();
    Ok(Probe {
        shifted: shifted?,
        restored,
        resolution: if engine == "etcd" { 1.0 } else { 0.01 },
    })
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `host:port` of a `scheme://host:port[/...]` URL.
fn host_port(url: &str) -> Result<&str> {
    let rest = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .rsplit('@')
        .next()
        .unwrap_or_default();
    rest.split(['/', '?'])
        .next()
        .filter(|h| !h.is_empty())
        .with_context(|| format!("no host in {url}"))
}

/// Valkey's `TIME` (seconds and microseconds), over RESP.
fn valkey_time(url: &str) -> Result<f64> {
    let mut stream = TcpStream::connect(host_port(url)?)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"*1\r\n$4\r\nTIME\r\n")?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 128];
    // *2 $10 <secs> $6 <micros>: five lines
    while answer.iter().filter(|b| **b == b'\n').count() < 5 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            bail!("Valkey closed the connection during TIME");
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    let numbers: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with(['*', '$']))
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    match numbers.as_slice() {
        [secs, micros] => Ok(secs + micros / 1e6),
        _ => bail!("unexpected TIME answer {text:?}"),
    }
}

/// PostgreSQL's `clock_timestamp()`, through `psql`.
fn postgres_time(url: &str) -> Result<f64> {
    let psql = super::postgres::find_bin_dir()?.join("psql");
    let out = Command::new(psql)
        .arg(url)
        .args(["-tAc", "SELECT extract(epoch FROM clock_timestamp())"])
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null())
        .output()
        .context("running psql")?;
    if !out.status.success() {
        bail!("psql failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .with_context(|| format!("unexpected clock_timestamp() {text:?}"))
}

/// The `Date` header of etcd's `GET /version` (whole seconds).
fn etcd_time(url: &str) -> Result<f64> {
    let mut stream = TcpStream::connect(host_port(url)?)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"GET /version HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let date = answer
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("date"))
                .map(|(_, v)| v.trim().to_string())
        })
        .with_context(|| format!("no Date header from etcd: {answer:?}"))?;
    let at = httpdate::parse_http_date(&date).with_context(|| format!("bad Date {date:?}"))?;
    Ok(at.duration_since(UNIX_EPOCH)?.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_of_each_url() {
        assert_eq!(
            host_port("redis://127.0.0.1:6379").unwrap(),
            "127.0.0.1:6379"
        );
        assert_eq!(
            host_port("postgresql://postgres:s3cret%3A%40@127.0.0.1:5432/postgres").unwrap(),
            "127.0.0.1:5432"
        );
        assert_eq!(
            host_port("etcd://127.0.0.1:2379?x=1").unwrap(),
            "127.0.0.1:2379"
        );
    }

    #[test]
    fn a_probe_moved_only_when_both_readings_match() {
        let probe = |shifted, restored, resolution| Probe {
            shifted,
            restored,
            resolution,
        };
        assert!(probe(3600.2, 0.1, 0.01).moved());
        assert!(!probe(0.3, 0.2, 1.0).moved());
        assert!(!probe(3600.0, 3600.0, 0.01).moved());
        assert!(probe(3600.0, 0.0, 0.01).to_string().contains("follows"));
        assert!(probe(0.0, 0.0, 1.0).to_string().contains("did NOT move"));
    }

    /// The shim builds and shifts the wall clock of a real program
    /// (`date`), and only by what the file says.
    #[test]
    fn the_shim_shifts_a_programs_wall_clock_by_the_file() {
        let work = std::env::temp_dir().join(format!("xtask-shim-{}", std::process::id()));
        let shim = build_shim(&work).unwrap();
        let clock = ClockDir::create().unwrap();
        let date = |offset: f64| {
            clock.set(offset).unwrap();
            let out = Command::new("date")
                .arg("+%s")
                .env("LD_PRELOAD", &shim)
                .env("CLOCK_SHIFT_FILE", clock.file())
                .output()
                .unwrap();
            let shown: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            shown - now()
        };
        assert!((date(3600.0) - 3600.0).abs() < 2.0);
        assert!((date(-30.0) + 30.0).abs() < 2.0);
        assert!(date(0.0).abs() < 2.0);
        std::fs::remove_dir_all(&work).unwrap();
    }
}
