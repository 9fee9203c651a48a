//! A throwaway certificate authority and server certificate for engines
//! that also listen with TLS, made with the `openssl` command.
//!
//! The server certificate names `127.0.0.1` and `localhost`; clients trust
//! the CA file. Keys never leave the engine's work directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The files [`generate`] writes.
pub(crate) struct Certs {
    /// The CA certificate clients trust (PEM).
    pub(crate) ca: PathBuf,
    /// The server's certificate (PEM), signed by the CA.
    pub(crate) cert: PathBuf,
    /// The server's private key (PEM).
    pub(crate) key: PathBuf,
}

/// Writes a CA and a server certificate for `127.0.0.1` / `localhost`
/// into `dir`, valid for two days.
pub(crate) fn generate(dir: &Path) -> Result<Certs> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let ca_key = dir.join("ca.key");
    let ca = dir.join("ca.pem");
    let key = dir.join("server.key");
    let csr = dir.join("server.csr");
    let cert = dir.join("server.pem");
    let ext = dir.join("server.ext");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        Command::new("openssl")
            .args(["req", "-x509"])
            .args(ec)
            .arg("-keyout")
            .arg(&ca_key)
            .arg("-out")
            .arg(&ca)
            .args(["-days", "2", "-subj", "/CN=ttl-cluster xtask test CA"]),
    )?;
    openssl(
        Command::new("openssl")
            .arg("req")
            .args(ec)
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&csr)
            .args(["-subj", "/CN=localhost"]),
    )?;
    openssl(
        Command::new("openssl")
            .args(["x509", "-req", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(&ca)
            .arg("-CAkey")
            .arg(&ca_key)
            .args(["-CAcreateserial", "-days", "2", "-out"])
            .arg(&cert)
            .arg("-extfile")
            .arg(&ext),
    )?;
    Ok(Certs { ca, cert, key })
}

/// Runs an `openssl` command; its standard error in the error if it fails.
pub(super) fn openssl(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context("cannot run openssl (Debian: `apt-get install openssl`)")?;
    if !out.status.success() {
        bail!(
            "openssl failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
