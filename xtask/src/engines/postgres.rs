//! A throwaway local PostgreSQL cluster from Debian's `postgresql` package,
//! for the `pg-tenants` example's end-to-end test and `storage-postgres`'s
//! suite.
//!
//! [`start`] runs `initdb` into a fresh temporary directory (trust auth, no
//! fsync), starts `postgres` on a free loopback port with its socket in that
//! directory, waits until `psql` answers `SELECT 1`, and returns
//! `PG_URL=postgresql://postgres@127.0.0.1:<port>/postgres`.
//! [`start_with_password`] does the same with SCRAM password authentication
//! over TCP, and TLS with a throwaway CA (made with `openssl`), and returns
//! `POSTGRES_URL` with the password in it and `POSTGRES_TLS_URL`
//! (`sslmode=verify-full`). PostgreSQL
//! refuses to run as root, so as root both run as the `postgres` user
//! (`runuser`). Dropping the returned [`Started`] runs `pg_ctl stop`, kills
//! the postmaster if it is still there, and removes the directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{LogTo, Started, free_port, wait_ready};

/// Where Debian installs the server binaries (`<version>/bin`).
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The user PostgreSQL runs as when we are root.
pub(crate) const PG_USER: &str = "postgres";
/// How long the server may take to answer a query.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The password of the `postgres` user in [`start_with_password`]; it has
/// URL-reserved characters on purpose (the URL percent-encodes them).
pub(crate) const PASSWORD: &str = "s3cret:@/pw";
pub(crate) const PASSWORD_IN_URL: &str = "s3cret%3A%40%2Fpw";

/// Starts a trust-auth cluster (logs go to `work_dir`); sets `PG_URL`.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    start_cluster(work_dir, None, &[])
}

/// Starts a cluster where TCP connections need the `postgres` user's
/// password (SCRAM); sets `POSTGRES_URL`.
pub(crate) fn start_with_password(work_dir: &Path) -> Result<Started> {
    start_cluster(work_dir, Some(PASSWORD), &[])
}

/// [`start_with_password`] with `env` added to the server's environment
/// (a preload library, for `--server-clock`).
pub(crate) fn start_with_password_and_env(
    work_dir: &Path,
    env: &[(String, String)],
) -> Result<Started> {
    start_cluster(work_dir, Some(PASSWORD), env)
}

fn start_cluster(
    work_dir: &Path,
    password: Option<&str>,
    env: &[(String, String)],
) -> Result<Started> {
    let bin = find_bin_dir()?;
    std::fs::create_dir_all(work_dir)
        .with_context(|| format!("cannot create {}", work_dir.display()))?;
    let as_root = is_root()?;
    // Outside the target dir: the postgres user must reach it, and the
    // socket path must stay short.
    let dir = std::env::temp_dir().join(format!(
        "pg-example-{}-{}",
        std::process::id(),
        free_port()?
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cluster = Cluster {
        bin,
        dir,
        as_root,
        started: false,
    };
    if as_root {
        chown(&cluster.dir)?;
    }
    let data = cluster.data();
    let init_log = work_dir.join("initdb.log");
    let mut initdb = cluster.command("initdb");
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--no-sync", "--no-locale", "-E", "UTF8"]);
    match password {
        None => {
            initdb.args(["-A", "trust"]);
        }
        Some(password) => {
            let pwfile = cluster.dir.join("pwfile");
            std::fs::write(&pwfile, password)
                .with_context(|| format!("cannot write {}", pwfile.display()))?;
            if as_root {
                chown(&pwfile)?;
            }
            initdb
                .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
                .arg(format!("--pwfile={}", pwfile.display()));
        }
    }
    let status = initdb
        .stdin(Stdio::null())
        .stdout(Stdio::from(File::create(&init_log)?))
        .stderr(Stdio::from(File::create(work_dir.join("initdb.err"))?))
        .status()
        .context("cannot run initdb")?;
    if !status.success() {
        bail!("initdb failed ({status}); see {}", init_log.display());
    }

    // The password cluster (storage-postgres's suite) also serves TLS,
    // with a throwaway CA: `POSTGRES_TLS_URL` verifies against it.
    let mut ssl_args: Vec<String> = Vec::new();
    let mut ca_file = None;
    if password.is_some() {
        let certs = super::tls::generate(&cluster.dir.join("tls"))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&certs.key, std::fs::Permissions::from_mode(0o600))?;
        if as_root {
            chown(&certs.key)?;
            chown(&certs.cert)?;
            chown(&cluster.dir.join("tls"))?;
        }
        ssl_args.extend([
            "-c".into(),
            "ssl=on".into(),
            "-c".into(),
            format!("ssl_cert_file={}", certs.cert.display()),
            "-c".into(),
            format!("ssl_key_file={}", certs.key.display()),
        ]);
        ca_file = Some(certs.ca);
    }
    let port = free_port()?;
    let log_path = work_dir.join(format!("postgres-{port}.log"));
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = cluster
        .command("postgres")
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(&cluster.dir)
        .args(["-c", "listen_addresses=127.0.0.1"])
        .args(["-c", "max_connections=300"])
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off"])
        .args(&ssl_args)
        .envs(env.iter().cloned())
        .log_to(log)?
        .spawn()
        .context("cannot run postgres")?;
    cluster.started = true;
    let psql = cluster.bin.join("psql");
    let ready = wait_ready("postgres", &mut child, READY_TIMEOUT, || {
        select_one(&psql, port, password)
    });
    if let Err(err) = ready {
        super::kill_tree(&mut child);
        drop(cluster);
        return Err(err.context(format!("see {}", log_path.display())));
    }
    let mut env = Vec::new();
    match password {
        None => env.push((
            "PG_URL".to_string(),
            format!("postgresql://postgres@127.0.0.1:{port}/postgres"),
        )),
        Some(_) => {
            let url = format!("postgresql://postgres:{PASSWORD_IN_URL}@127.0.0.1:{port}/postgres");
            if let Some(ca) = ca_file {
                env.push((
                    "POSTGRES_TLS_URL".to_string(),
                    format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display()),
                ));
            }
            env.push(("POSTGRES_URL".to_string(), url));
        }
    }
    Ok(Started::local(child, env).with_guard(cluster))
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb`.
pub(crate) fn find_bin_dir() -> Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no {DEBIAN_ROOT}/*/bin/initdb (Debian: `apt-get install postgresql`), or set PG_URL"
        ),
    }
}

/// Gives `path` to the postgres user.
pub(crate) fn chown(path: &Path) -> Result<()> {
    let status = Command::new("chown")
        .args([&format!("{PG_USER}:{PG_USER}")])
        .arg(path)
        .status()
        .context("cannot run chown")?;
    if !status.success() {
        bail!("chown {PG_USER} {} failed ({status})", path.display());
    }
    Ok(())
}

pub(crate) fn is_root() -> Result<bool> {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .context("cannot run id -u")?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A real query over TCP: `psql -tAc 'SELECT 1'` prints `1`.
pub(crate) fn select_one(psql: &Path, port: u16, password: Option<&str>) -> bool {
    let mut cmd = Command::new(psql);
    if let Some(password) = password {
        cmd.env("PGPASSWORD", password);
    }
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-tAc", "SELECT 1"])
        .env("PGCONNECT_TIMEOUT", "2")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1")
}

/// The cluster's directory; dropping it stops the server and removes it.
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    as_root: bool,
    started: bool,
}

impl Cluster {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `tool` from the server's bin dir, as the postgres user when root.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_root {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", PG_USER, "--"]).arg(exe);
            cmd
        } else {
            Command::new(exe)
        }
    }

    /// The postmaster's pid, from the first line of `postmaster.pid`.
    fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["stop", "-m", "immediate", "-w", "-t", "20"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            // pg_ctl failed or timed out: the postmaster's children exit
            // when it dies
            if let Some(pid) = self.postmaster_pid() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
