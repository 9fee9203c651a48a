//! A throwaway local Valkey (or Redis) server for the coordinator's tests
//! and benchmark.
//!
//! [`start`] runs `valkey-server` (or `redis-server`, whichever is on `PATH`)
//! on a free loopback port with persistence off, waits until it answers
//! `PING`, and returns the child process and its `redis://` URL. The caller
//! kills the child when done (its working files live in `work_dir`).
//!
//! The same server also listens with TLS on a second loopback port, with a
//! throwaway CA and server certificate made by the `openssl` CLI in
//! `work_dir/tls` (`ca.pem`, `server.pem`, `server.key`; the certificate
//! names `localhost` and `127.0.0.1`). Tests find that port and the CA file
//! by asking the server (`CONFIG GET tls-port`, `CONFIG GET tls-ca-cert-file`),
//! so the plain `VALKEY_URL` is all they are given.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Server binaries tried in order.
const BINARIES: [&str; 2] = ["valkey-server", "redis-server"];
/// How long the server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Port picks tried (a free port can be taken before the server binds it).
const ATTEMPTS: usize = 3;

/// Starts a server in `work_dir`; returns it and its URL
/// (`redis://127.0.0.1:<port>`).
pub(crate) fn start(work_dir: &Path) -> Result<(Child, String)> {
    let binary = find_binary()?;
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    // without openssl the server still starts, plaintext only: the TLS
    // tests then fail with a message that says so
    let tls = match make_test_ca(&work_dir.join("tls")) {
        Ok(tls) => Some(tls),
        Err(err) => {
            eprintln!("valkey: no TLS port: {err:#}");
            None
        }
    };
    let mut last_error = None;
    for _ in 0..ATTEMPTS {
        let port = super::free_port()?;
        let tls_port = super::free_port()?;
        let log_path = work_dir.join(format!("valkey-{port}.log"));
        let log = File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut command = Command::new(&binary);
        if let Some(tls) = &tls {
            command
                .args(["--tls-port", &tls_port.to_string()])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args(["--tls-auth-clients", "no"]);
        }
        let mut child = command
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--logfile", ""])
            .arg("--dir")
            .arg(work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("cannot run {}", binary.display()))?;
        match wait_ready(&mut child, port) {
            Ok(()) => return Ok((child, format!("redis://127.0.0.1:{port}"))),
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                last_error = Some(err.context(format!("see {}", log_path.display())));
            }
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("server did not start")))
}

/// The files of the throwaway TLS setup.
struct TestCa {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// Makes a throwaway CA and a server certificate for `localhost` /
/// `127.0.0.1` signed by it (P-256 keys, valid 7 days) with the `openssl` CLI.
fn make_test_ca(dir: &Path) -> Result<TestCa> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let files = TestCa {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    let ext = dir.join("server.ext");
    std::fs::write(
        &ext,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n",
    )?;
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let steps: [Vec<String>; 3] = [
        [
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "7",
            "-subj",
            "/CN=ttl-cluster test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([p("ca.key"), "-out".into(), p("ca.pem")])
        .collect(),
        [
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([p("server.key"), "-out".into(), p("server.csr")])
        .collect(),
        ["x509", "-req", "-days", "7", "-CAcreateserial", "-in"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                p("server.csr"),
                "-CA".into(),
                p("ca.pem"),
                "-CAkey".into(),
                p("ca.key"),
                "-extfile".into(),
                p("server.ext"),
                "-out".into(),
                p("server.pem"),
            ])
            .collect(),
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .context("cannot run openssl (Debian: `apt-get install openssl`)")?;
        if !out.status.success() {
            bail!(
                "openssl {} failed: {}",
                args.first().map_or("", String::as_str),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(files)
}

/// The first of [`BINARIES`] found on `PATH`.
fn find_binary() -> Result<PathBuf> {
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
         (Debian: `apt-get install redis-server`), or set VALKEY_URL"
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
fn ping(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.set_write_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    Ok(buf[..n].starts_with(b"+PONG"))
}
