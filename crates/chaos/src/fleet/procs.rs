//! Child processes of a fleet run: started, awaited until they announce
//! their address, signalled.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::Context;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

/// A running child: a pod or a coordinator.
#[derive(Debug)]
pub(crate) struct Proc {
    /// Its name in the fault log (a pod's member id).
    pub(crate) name: String,
    /// The address it announced.
    pub(crate) addr: String,
    pub(crate) child: Child,
}

impl Proc {
    /// Starts `exe` with `args` (stderr to `log`), and waits up to `limit`
    /// for a stdout line starting with `ready_prefix`; the rest of that line
    /// is its address. Later stdout lines are drained.
    pub(crate) async fn start(
        exe: &Path,
        args: Vec<OsString>,
        name: String,
        log: PathBuf,
        ready_prefix: &'static str,
        limit: Duration,
    ) -> anyhow::Result<Self> {
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(limit, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(addr) = line.strip_prefix(ready_prefix) {
                    return Ok::<_, std::io::Error>(Some(addr.trim().to_owned()));
                }
            }
            Ok(None)
        })
        .await;
        let addr = match ready {
            Ok(Ok(Some(addr))) => addr,
            other => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                anyhow::bail!(
                    "{name} did not announce itself within {limit:?} ({other:?}); see {}",
                    log.display()
                );
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Proc { name, addr, child })
    }

    /// Whether it has exited (its status is then reaped).
    pub(crate) fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, and waits for it.
    pub(crate) async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Sends `kill -s <sig>` (`STOP`, `CONT`).
    pub(crate) async fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let pid = self.child.id().context("the process is gone")?;
        crate::process::signal(pid, sig).await
    }
}
