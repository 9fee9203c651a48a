//! PostgreSQL as users run it highly available: a primary and one
//! streaming standby made with `pg_basebackup`, with synchronous
//! replication (`synchronous_commit = on`, `synchronous_standby_names`
//! naming the standby), both from Debian's `postgresql` package and set
//! up as [`super::postgres`]'s password engine (SCRAM over TCP, TLS with a
//! throwaway CA).
//!
//! [`start`] waits until the primary reports the standby `sync` in
//! `pg_stat_replication`, and returns a multi-host `POSTGRES_URL`
//! (`postgresql://postgres:…@127.0.0.1:<primary>,127.0.0.1:<standby>/postgres?target_session_attrs=read-write`),
//! `POSTGRES_TLS_URL` naming the primary and `POSTGRES_STANDBYS=1`.
//!
//! [`promote`] SIGKILLs the primary's postmaster, runs `pg_ctl promote` on
//! the standby, waits until it accepts writes, and lists it first in
//! `POSTGRES_URL` (the dead primary stays listed second, as a client's
//! configuration would still have it), `POSTGRES_TLS_URL` names it and
//! `POSTGRES_STANDBYS=0`. Both servers are stopped and their directory
//! removed when the [`Started`] is dropped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::postgres::{PASSWORD, PASSWORD_IN_URL, chown, find_bin_dir, is_root, select_one};
use super::{
    Started,
    failover::{FailoverReport, fault_line, hold_for},
    free_port, kill_tree, wait_ready,
};

/// How long a server may take to answer, the standby to catch up, or the
/// promoted standby to accept writes.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The standby's `application_name`, named by `synchronous_standby_names`.
const STANDBY_NAME: &str = "standby1";

/// The two servers; dropping this stops both and removes their directory.
pub(crate) struct Pair {
    bin: PathBuf,
    dir: PathBuf,
    as_root: bool,
    ports: [u16; 2],
    ca: PathBuf,
    /// Whether the primary was killed (and the standby promoted).
    promoted: bool,
}

impl Pair {
    fn data(&self, i: usize) -> PathBuf {
        self.dir.join(["primary", "standby"][i])
    }

    /// `tool` from the server's bin dir, as the postgres user when root.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_root {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", super::postgres::PG_USER, "--"]).arg(exe);
            cmd
        } else {
            Command::new(exe)
        };
        cmd.env("PGPASSWORD", PASSWORD).stdin(Stdio::null());
        cmd
    }

    /// The postmaster pid of server `i`, from `postmaster.pid`.
    fn postmaster_pid(&self, i: usize) -> Option<u32> {
        let text = std::fs::read_to_string(self.data(i).join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// One value from `psql -tAc sql` on server `i`, if it answers.
    fn query(&self, i: usize, sql: &str) -> Option<String> {
        let out = Command::new(self.bin.join("psql"))
            .env("PGPASSWORD", PASSWORD)
            .env("PGCONNECT_TIMEOUT", "2")
            .args(["-h", "127.0.0.1", "-p", &self.ports[i].to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-tAc", sql])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Polls `done` every 200 ms until it holds or [`READY_TIMEOUT`] passes.
    fn wait(&self, what: &str, mut done: impl FnMut(&Self) -> bool) -> Result<Duration> {
        let started = Instant::now();
        while !done(self) {
            if started.elapsed() > READY_TIMEOUT {
                bail!("postgres-ha: {what} not after {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(started.elapsed())
    }

    /// The suites' variables: the live server first.
    fn env(&self) -> Vec<(String, String)> {
        let order = if self.promoted { [1, 0] } else { [0, 1] };
        let hosts: Vec<String> = order
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.ports[i]))
            .collect();
        let url = format!(
            "postgresql://postgres:{PASSWORD_IN_URL}@{}/postgres?target_session_attrs=read-write",
            hosts.join(",")
        );
        let tls = format!(
            "postgresql://postgres:{PASSWORD_IN_URL}@127.0.0.1:{}/postgres\
             ?sslmode=verify-full&sslrootcert={}",
            self.ports[order[0]],
            self.ca.display()
        );
        vec![
            ("POSTGRES_URL".to_string(), url),
            ("POSTGRES_TLS_URL".to_string(), tls),
            (
                "POSTGRES_STANDBYS".to_string(),
                if self.promoted { "0" } else { "1" }.to_string(),
            ),
        ]
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for i in 0..2 {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data(i))
                .args(["stop", "-m", "immediate", "-w", "-t", "20"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if let Some(pid) = self.postmaster_pid(i) {
                kill_pid(pid);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kill_pid(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Starts the primary, clones the standby, starts it; see the module docs.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let ports = [free_port()?, free_port()?];
    // Outside the target dir: the postgres user must reach it.
    let dir = std::env::temp_dir().join(format!("pg-ha-{}-{}", std::process::id(), ports[0]));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let as_root = is_root()?;
    if as_root {
        chown(&dir)?;
    }
    let certs = super::tls::generate(&dir.join("tls"))?;
    let pair = Pair {
        bin: find_bin_dir()?,
        dir: dir.clone(),
        as_root,
        ports,
        ca: certs.ca.clone(),
        promoted: false,
    };
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&certs.key, std::fs::Permissions::from_mode(0o600))?;
    }
    if as_root {
        for path in [&certs.key, &certs.cert, &dir.join("tls")] {
            chown(path)?;
        }
    }
    let pwfile = dir.join("pwfile");
    std::fs::write(&pwfile, PASSWORD)?;
    if as_root {
        chown(&pwfile)?;
    }
    let log = |name: &str| -> Result<(Stdio, Stdio)> {
        let path = work_dir.join(format!("{name}-{}.log", ports[0]));
        let file =
            File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok((Stdio::from(file.try_clone()?), Stdio::from(file)))
    };
    let (out, err) = log("initdb")?;
    let status = pair
        .command("initdb")
        .arg("-D")
        .arg(pair.data(0))
        .args(["-U", "postgres", "--no-sync", "--no-locale", "-E", "UTF8"])
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .stdout(out)
        .stderr(err)
        .status()
        .context("cannot run initdb")?;
    anyhow::ensure!(
        status.success(),
        "initdb failed ({status}); see {}",
        work_dir.display()
    );

    let server = |i: usize, extra: &[String]| -> Result<std::process::Child> {
        let (out, err) = log(["primary", "standby"][i])?;
        pair.command("postgres")
            .arg("-D")
            .arg(pair.data(i))
            .args(["-p", &ports[i].to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "max_connections=300", "-c", "max_wal_senders=10"])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "ssl=on"])
            .arg("-c")
            .arg(format!("ssl_cert_file={}", certs.cert.display()))
            .arg("-c")
            .arg(format!("ssl_key_file={}", certs.key.display()))
            .args(extra)
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot run postgres")
    };
    let primary_settings = [
        "-c".to_string(),
        "synchronous_commit=on".to_string(),
        "-c".to_string(),
        format!("synchronous_standby_names={STANDBY_NAME}"),
    ];
    let mut primary = server(0, &primary_settings)?;
    let psql = pair.bin.join("psql");
    if let Err(err) = wait_ready("postgres-ha primary", &mut primary, READY_TIMEOUT, || {
        select_one(&psql, ports[0], Some(PASSWORD))
    }) {
        kill_tree(&mut primary);
        return Err(err.context(format!("see the logs in {}", work_dir.display())));
    }
    let (out, err) = log("basebackup")?;
    let status = pair
        .command("pg_basebackup")
        .arg("-d")
        .arg(format!(
            "host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}",
            ports[0]
        ))
        .arg("-D")
        .arg(pair.data(1))
        .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"])
        .stdout(out)
        .stderr(err)
        .status()
        .context("cannot run pg_basebackup")?;
    if !status.success() {
        kill_tree(&mut primary);
        bail!(
            "pg_basebackup failed ({status}); see {}",
            work_dir.display()
        );
    }
    let mut standby = server(1, &[])?;
    let started = Started::local_many(Vec::new(), Vec::new());
    // From here on, dropping `started` stops both servers.
    let mut started = started.with_guard(pair);
    let ready = wait_ready("postgres-ha standby", &mut standby, READY_TIMEOUT, || {
        select_one(&psql, ports[1], Some(PASSWORD))
    });
    let pair = started.guard_mut::<Pair>().context("no pair")?;
    let synced = ready.and_then(|_| {
        pair.wait("the standby streaming synchronously", |p| {
            p.query(
                0,
                &format!(
                    "SELECT count(*) FROM pg_stat_replication \
                     WHERE application_name = '{STANDBY_NAME}' AND sync_state = 'sync'"
                ),
            )
            .as_deref()
                == Some("1")
        })
    });
    if let Err(err) = synced {
        kill_tree(&mut standby);
        kill_tree(&mut primary);
        return Err(err.context(format!("see the logs in {}", work_dir.display())));
    }
    println!(
        "postgres-ha: primary :{} with synchronous standby :{}",
        ports[0], ports[1]
    );
    let env = pair.env();
    let running = Started::local_many(vec![primary, standby], env);
    Ok(running.merge(started))
}

/// Chaos: after `gap`, SIGKILLs the primary and promotes the standby,
/// once (the pair then has no standby left to fail over to).
pub(crate) fn primary_fault(
    started: &mut Started,
    gap: Duration,
    stop: &mut dyn FnMut() -> bool,
) -> Result<FailoverReport> {
    let mut report = FailoverReport::default();
    if hold_for(gap, stop) {
        return Ok(report);
    }
    fault_line(
        "postgres-ha",
        "SIGKILL the primary, pg_ctl promote the standby",
    );
    let killed = Instant::now();
    promote(started)?;
    report.kills = 1;
    report.slowest_failover = killed.elapsed();
    fault_line(
        "postgres-ha",
        &format!(
            "standby promoted, writable {:.1}s after the kill",
            report.slowest_failover.as_secs_f64()
        ),
    );
    while !hold_for(Duration::from_secs(1), stop) {}
    Ok(report)
}

/// SIGKILLs the primary and promotes the standby; see the module docs.
pub(crate) fn promote(started: &mut Started) -> Result<()> {
    let pair = started
        .guard_mut::<Pair>()
        .context("not a postgres-ha pair")?;
    anyhow::ensure!(!pair.promoted, "the standby is already promoted");
    let pid = pair
        .postmaster_pid(0)
        .context("no primary postmaster.pid")?;
    println!("postgres-ha: SIGKILL the primary's postmaster (pid {pid})");
    kill_pid(pid);
    pair.wait("the primary gone", |p| p.query(0, "SELECT 1").is_none())?;
    let killed = Instant::now();
    let status = pair
        .command("pg_ctl")
        .arg("-D")
        .arg(pair.data(1))
        .args(["promote", "-w", "-t", "60"])
        .stdout(Stdio::null())
        .status()
        .context("cannot run pg_ctl promote")?;
    anyhow::ensure!(status.success(), "pg_ctl promote failed ({status})");
    pair.wait("the promoted standby accepting writes", |p| {
        p.query(1, "SELECT pg_is_in_recovery()").as_deref() == Some("f")
    })?;
    pair.promoted = true;
    println!(
        "postgres-ha: standby promoted, accepting writes {:.1}s after the kill",
        killed.elapsed().as_secs_f64()
    );
    let env = pair.env();
    started.env = env;
    Ok(())
}
