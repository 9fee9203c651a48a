//! Cloudflare's `pingora-proxy` as the second reference: `pingora-hop`
//! (`benches/pingora-hop/`, its own cargo project, never built by the
//! workspace or CI) reads the destination id from the path as the
//! coordinator's route does, finds the pod in an in-memory map (the
//! coordinator's cache-hit case) and proxies over pingora's upstream
//! keep-alive pool, on one pingora worker thread. Its CPU time is its
//! process's, as nginx's is.
//!
//! Build it once, then point `PINGORA_HOP` at the binary:
//!
//! ```text
//! cargo build --release --manifest-path crates/coordinator/benches/pingora-hop/Cargo.toml
//! PINGORA_HOP=crates/coordinator/benches/pingora-hop/target/release/pingora-hop \
//!   VALKEY_URL=redis://127.0.0.1:6379 cargo bench -p coordinator --bench routing
//! ```
//!
//! Without `PINGORA_HOP`, the binary is looked for where that build puts it
//! when `CARGO_TARGET_DIR` is unset; absent, the row is skipped with a
//! message.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A running `pingora-hop`; killed when dropped.
pub(crate) struct PingoraHop {
    child: Child,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl Drop for PingoraHop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `PINGORA_HOP`, or the release build inside `benches/pingora-hop/target`.
fn binary() -> Result<PathBuf, String> {
    let path = std::env::var_os("PINGORA_HOP").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("benches/pingora-hop/target/release/pingora-hop")
        },
        PathBuf::from,
    );
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found (build benches/pingora-hop with `cargo build --release \
             --manifest-path crates/coordinator/benches/pingora-hop/Cargo.toml`, \
             and set PINGORA_HOP to the binary)",
            path.display()
        ))
    }
}

/// Starts `pingora-hop` on `threads` worker threads, routing `destination`
/// to `pod`; `Err` says why not (no binary, or it did not come up).
pub(crate) fn start(
    destination: &str,
    pod: SocketAddr,
    threads: usize,
) -> Result<PingoraHop, String> {
    let bin = binary()?;
    let addr = crate::proxy_process::free_port();
    let child = Command::new(&bin)
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--route")
        .arg(format!("{destination}={pod}"))
        .arg("--threads")
        .arg(threads.to_string())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let mut hop = PingoraHop { child, addr };
    crate::proxy_process::wait_listening(&mut hop.child, addr, "pingora-hop")?;
    Ok(hop)
}

impl PingoraHop {
    /// The process id (its CPU time is read from `/proc/<pid>/stat`).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}
