//! A throwaway single-member etcd from the system's packages (Debian's
//! `etcd-server`), for storage-etcd's suite.
//!
//! [`start`] runs `etcd` on two free loopback ports (client and peer) with
//! its data in a fresh directory under `work_dir`, a 50 ms heartbeat and a
//! 500 ms election timeout (so the minimum lease TTL is 1 s, as the suite's
//! short TTLs need), also serving clients with TLS on a third port (a
//! throwaway CA made with `openssl`), waits until `/health` answers `true`,
//! and returns `ETCD_URL=etcd://127.0.0.1:<port>` and
//! `ETCD_TLS_URL=etcds://127.0.0.1:<port>?tls_ca_file=<ca.pem>`.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{LogTo, Started, free_port, wait_ready};

/// How long etcd may take to elect itself and answer.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts the member (logs and data go to `work_dir`); see the module docs.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    start_with_env(work_dir, &[])
}

/// [`start`] with `env` added to the member's environment (a preload
/// library, for `--server-clock`).
pub(crate) fn start_with_env(work_dir: &Path, env: &[(String, String)]) -> Result<Started> {
    let binary = find_binary()?;
    let client_port = free_port()?;
    let tls_port = free_port()?;
    let peer_port = free_port()?;
    let certs = super::tls::generate(&work_dir.join("tls"))?;
    let data = work_dir.join(format!("etcd-data-{client_port}"));
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let log_path = work_dir.join(format!("etcd-{client_port}.log"));
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let client_url = format!("http://127.0.0.1:{client_port}");
    let client_urls = format!("{client_url},https://127.0.0.1:{tls_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut child = Command::new(&binary)
        .args(["--name", "xtask"])
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen-client-urls", &client_urls])
        .args(["--advertise-client-urls", &client_urls])
        .arg("--cert-file")
        .arg(&certs.cert)
        .arg("--key-file")
        .arg(&certs.key)
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("xtask={peer_url}")])
        .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
        .envs(env.iter().cloned())
        .log_to(log)?
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, client_port));
    if let Err(err) = wait_ready("etcd", &mut child, READY_TIMEOUT, || healthy(addr)) {
        super::kill_tree(&mut child);
        return Err(err.context(format!("see {}", log_path.display())));
    }
    let env = vec![
        (
            "ETCD_URL".to_string(),
            format!("etcd://127.0.0.1:{client_port}"),
        ),
        (
            "ETCD_TLS_URL".to_string(),
            format!(
                "etcds://127.0.0.1:{tls_port}?tls_ca_file={}",
                certs.ca.display()
            ),
        ),
    ];
    Ok(Started::local(child, env).with_guard(DataDir(data)))
}

/// Removes the member's data directory when the engine stops.
struct DataDir(PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn find_binary() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("etcd");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!("etcd is not on PATH (Debian: `apt-get install etcd-server`), or set ETCD_URL")
}

/// `GET /health` answers `{"health":"true"}` once the member leads.
pub(crate) fn healthy(addr: SocketAddr) -> bool {
    let check = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.contains("\"health\":\"true\""))
    };
    check().unwrap_or(false)
}
