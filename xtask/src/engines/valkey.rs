//! A throwaway local Valkey (or Redis) server for the coordinator's tests
//! and benchmark.
//!
//! [`start`] runs `valkey-server` (or `redis-server`, whichever is on `PATH`
//! first; `VALKEY_SERVER=/path/to/redis-server` picks one) and prints its
//! version, on a free loopback port with persistence off, waits until it answers
//! `PING`, and returns the child process and its `redis://` URL (and, when
//! asked, a `rediss://` URL of a TLS port with a throwaway CA, for
//! storage-valkey's TLS case). The caller kills the child when done (its
//! working files live in `work_dir`).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::LogTo;

/// Server binaries tried in order.
const BINARIES: [&str; 2] = ["valkey-server", "redis-server"];
/// Names the server binary to run instead of the first of [`BINARIES`].
const SERVER_VAR: &str = "VALKEY_SERVER";
/// How long the server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Port picks tried (a free port can be taken before the server binds it).
const ATTEMPTS: usize = 3;

/// Starts a server in `work_dir`; returns it and its URL
/// (`redis://127.0.0.1:<port>`), and with `tls` also a TLS port's URL
/// (`rediss://127.0.0.1:<port>?tls_ca_file=<ca.pem>`, a fresh CA made with
/// `openssl`).
pub(crate) fn start(work_dir: &Path, tls: bool) -> Result<(Child, String, Option<String>)> {
    start_with_env(work_dir, tls, &[])
}

/// [`start`] with `env` added to the server's environment (a preload
/// library, for `--server-clock`).
pub(crate) fn start_with_env(
    work_dir: &Path,
    tls: bool,
    env: &[(String, String)],
) -> Result<(Child, String, Option<String>)> {
    let binary = find_binary()?;
    println!("== valkey: {} ==", version(&binary)?);
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let certs = match tls {
        true => Some(super::tls::generate(&work_dir.join("tls"))?),
        false => None,
    };
    let mut last_error = None;
    for _ in 0..ATTEMPTS {
        let port = super::free_port()?;
        let tls_port = super::free_port()?;
        let mut tls_args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(certs) = &certs {
            tls_args.extend(["--tls-port".into(), tls_port.to_string().into()]);
            tls_args.extend(["--tls-cert-file".into(), certs.cert.clone().into()]);
            tls_args.extend(["--tls-key-file".into(), certs.key.clone().into()]);
            tls_args.extend(["--tls-ca-cert-file".into(), certs.ca.clone().into()]);
            tls_args.extend(["--tls-auth-clients".into(), "no".into()]);
        }
        let log_path = work_dir.join(format!("valkey-{port}.log"));
        let log = File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut child = Command::new(&binary)
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--logfile", ""])
            .arg("--dir")
            .arg(work_dir)
            .args(&tls_args)
            .envs(env.iter().cloned())
            .log_to(log)?
            .spawn()
            .with_context(|| format!("cannot run {}", binary.display()))?;
        match wait_ready(&mut child, port) {
            Ok(()) => {
                let tls_url = certs.as_ref().map(|c| {
                    format!(
                        "rediss://127.0.0.1:{tls_port}?tls_ca_file={}",
                        c.ca.display()
                    )
                });
                return Ok((child, format!("redis://127.0.0.1:{port}"), tls_url));
            }
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                last_error = Some(err.context(format!("see {}", log_path.display())));
            }
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("server did not start")))
}

/// `binary --version`, e.g. `Valkey server v=8.0.1 ...`.
fn version(binary: &Path) -> Result<String> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {} --version", binary.display()))?;
    if !out.status.success() {
        bail!("{} --version failed: {}", binary.display(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// [`SERVER_VAR`] if set, else the first of [`BINARIES`] found on `PATH`.
pub(crate) fn find_binary() -> Result<PathBuf> {
    if let Some(binary) = std::env::var_os(SERVER_VAR).filter(|v| !v.is_empty()) {
        let binary = PathBuf::from(binary);
        if !binary.is_file() {
            bail!("{SERVER_VAR}={} is not a file", binary.display());
        }
        return Ok(binary);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in BINARIES {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "neither valkey-server nor redis-server is on PATH \
         (Debian: `apt-get install redis-server`, or valkey-server from \
         bookworm-backports), or set VALKEY_URL"
    )
}

/// A loopback port that was free a moment ago.
/// Waits until the server answers `PING` with `+PONG`, failing early if it
/// exits and after [`READY_TIMEOUT`].
fn wait_ready(child: &mut Child, port: u16) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("server on port {port} exited early: {status}");
        }
        if ping(addr).unwrap_or(false) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("server on port {port} did not answer PING within {READY_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One `PING` over RESP; `true` on `+PONG` (a loading server answers an error).
pub(crate) fn ping(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.set_write_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    Ok(buf[..n].starts_with(b"+PONG"))
}
