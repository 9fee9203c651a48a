//! A throwaway single-member etcd from the system's packages (Debian's
//! `etcd-server`), for storage-etcd's suite.
//!
//! [`start`] runs `etcd` on two free loopback ports (client and peer) with
//! its data in a fresh directory under `work_dir`, a 50 ms heartbeat and a
//! 500 ms election timeout (so the minimum lease TTL is 1 s, as the suite's
//! short TTLs need), also serving clients with TLS on a third port (a
//! throwaway CA made with `openssl`), waits until `/health` answers `true`,
//! and returns `ETCD_URL=etcd://127.0.0.1:<port>` and
//! `ETCD_TLS_URL=etcds://127.0.0.1:<port>?tls_ca_file=<ca.pem>`. A second,
//! separate member has authentication on (a `root` user, through the JSON
//! gateway): `ETCD_AUTH_URL=etcd://root:<password>@127.0.0.1:<port>`, for the
//! wrong-password case.
//!
//! [`start_plain`] starts one plaintext member of its own, with default
//! timings: the store of the `kube` engine's kube-apiserver.

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
    let auth = match start_with_auth(&binary, work_dir) {
        Ok(auth) => auth,
        Err(err) => {
            super::kill_tree(&mut child);
            return Err(err);
        }
    };
    let env = vec![
        (
            "ETCD_URL".to_string(),
            format!("etcd://127.0.0.1:{client_port}"),
        ),
        (
            "ETCD_AUTH_URL".to_string(),
            format!("etcd://root:{ROOT_PASSWORD}@127.0.0.1:{}", auth.port),
        ),
        (
            "ETCD_TLS_URL".to_string(),
            format!(
                "etcds://127.0.0.1:{tls_port}?tls_ca_file={}",
                certs.ca.display()
            ),
        ),
    ];
    Ok(Started::local_many(vec![child, auth.child], env)
        .with_guard(DataDir(data))
        .with_guard(DataDir(auth.data)))
}

/// The password of the `root` user of the member with authentication on.
const ROOT_PASSWORD: &str = "xtask-root";

/// A member of its own: plaintext, on a free loopback port, with the
/// default timings, its data in a fresh directory under `work_dir`
/// (removed by [`DataDir`] when the caller wraps it in one).
pub(super) struct PlainMember {
    pub(super) child: std::process::Child,
    pub(super) port: u16,
    pub(super) data: PathBuf,
    /// Its log (both outputs).
    pub(super) log: PathBuf,
}

/// Starts a [`PlainMember`] named `name` and waits until it is healthy.
pub(super) fn start_plain(binary: &Path, work_dir: &Path, name: &str) -> Result<PlainMember> {
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let port = free_port()?;
    let peer_url = format!("http://127.0.0.1:{}", free_port()?);
    let client_url = format!("http://127.0.0.1:{port}");
    let data = work_dir.join(format!("etcd-data-{port}"));
    let log_path = work_dir.join(format!("etcd-{port}.log"));
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = Command::new(binary)
        .args(["--name", name])
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("{name}={peer_url}")])
        .log_to(log)?
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let label = format!("etcd ({name})");
    if let Err(err) = wait_ready(&label, &mut child, READY_TIMEOUT, || healthy(addr)) {
        super::kill_tree(&mut child);
        let _ = std::fs::remove_dir_all(&data);
        return Err(err.context(format!("see {}", log_path.display())));
    }
    Ok(PlainMember {
        child,
        port,
        data,
        log: log_path,
    })
}

/// Starts a [`PlainMember`] and turns authentication on: `root` with
/// [`ROOT_PASSWORD`] and the `root` role, then `auth enable`, through
/// etcd's JSON gateway (no `etcdctl` needed).
fn start_with_auth(binary: &Path, work_dir: &Path) -> Result<PlainMember> {
    let mut member = start_plain(binary, work_dir, "xtask-auth")?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, member.port));
    let enabled = post(
        addr,
        "/v3/auth/user/add",
        &format!(r#"{{"name":"root","password":"{ROOT_PASSWORD}"}}"#),
    )
    .and_then(|()| {
        post(
            addr,
            "/v3/auth/user/grant",
            r#"{"user":"root","role":"root"}"#,
        )
    })
    .and_then(|()| post(addr, "/v3/auth/enable", "{}"));
    if let Err(err) = enabled {
        super::kill_tree(&mut member.child);
        return Err(err.context(format!("see {}", member.log.display())));
    }
    Ok(member)
}

/// One JSON request to etcd's gateway; an error unless it answers 200.
fn post(addr: SocketAddr, path: &str, body: &str) -> Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if !answer.starts_with("HTTP/1.0 200") && !answer.starts_with("HTTP/1.1 200") {
        bail!("etcd answered POST {path} with: {answer}");
    }
    Ok(())
}

/// Removes the member's data directory when the engine stops.
pub(super) struct DataDir(pub(super) PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `etcd` on the `PATH`.
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
