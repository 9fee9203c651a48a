//! PostgreSQL behind PgBouncer (Debian's `pgbouncer`), for the
//! `postgres-pgbouncer` row of `cargo xtask test-drivers`.
//!
//! [`start`] starts the password-auth PostgreSQL of the `postgres` row
//! and two PgBouncers in front of it, as the `postgres` user (PgBouncer
//! refuses to run as root; `setpriv` so the child is PgBouncer itself):
//!
//! - one with `ignore_startup_parameters = options`, serving the database
//!   three times: `postgres` in **session** mode (the URL the whole
//!   storage-postgres suite runs through, `POSTGRES_URL`),
//!   `postgres_transaction` in transaction mode and `postgres_statement`
//!   in statement mode (`POSTGRES_PGBOUNCER_TRANSACTION_URL`,
//!   `POSTGRES_PGBOUNCER_STATEMENT_URL`: the driver must refuse both);
//! - one with PgBouncer's defaults (session mode), which refuses the
//!   driver's startup parameter `options`
//!   (`POSTGRES_PGBOUNCER_STRICT_URL`: the driver must say what to set).
//!
//! `POSTGRES_TLS_URL` stays the server's own (TLS is the driver's, not the
//! pooler's, to test), and `POSTGRES_DIRECT_URL` names the server itself.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};

use super::{
    LogTo, Started, free_port,
    postgres::{self, PASSWORD, PASSWORD_IN_URL, PG_USER},
    wait_ready,
};

/// How long PgBouncer may take to answer through to the server.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// One PgBouncer's configuration.
struct Bouncer {
    /// `ignore_startup_parameters = options`.
    ignore_options: bool,
}

/// Starts the server and both poolers; see the module docs.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    let binary = find_binary()?;
    let mut server = postgres::start_with_password(work_dir)?;
    let direct = server
        .env
        .iter()
        .find(|(k, _)| k == "POSTGRES_URL")
        .map(|(_, v)| v.clone())
        .context("the postgres engine did not set POSTGRES_URL")?;
    let server_port = url::port_of(&direct)?;
    let dir =
        std::env::temp_dir().join(format!("pgbouncer-{}-{}", std::process::id(), free_port()?));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let guard = Dir(dir.clone());
    let as_root = postgres::is_root()?;
    // PgBouncer authenticates clients with SCRAM against the plain
    // password here, and logs in to the server with it.
    let users = dir.join("users.txt");
    std::fs::write(&users, format!("\"{PG_USER}\" \"{PASSWORD}\"\n"))?;
    let mut children = Vec::new();
    let mut ports = Vec::new();
    for bouncer in [
        Bouncer {
            ignore_options: true,
        },
        Bouncer {
            ignore_options: false,
        },
    ] {
        let port = free_port()?;
        let name = if bouncer.ignore_options {
            "main"
        } else {
            "strict"
        };
        let ini = dir.join(format!("{name}.ini"));
        std::fs::write(
            &ini,
            config(&bouncer, port, server_port, &users, &dir, name),
        )?;
        if as_root {
            postgres::chown(&dir)?;
            postgres::chown(&users)?;
            postgres::chown(&ini)?;
        }
        let log_path = work_dir.join(format!("pgbouncer-{name}-{port}.out"));
        let log = File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut command = match as_root {
            true => {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid",
                    PG_USER,
                    "--regid",
                    PG_USER,
                    "--init-groups",
                    "--",
                ])
                .arg(&binary);
                c
            }
            false => Command::new(&binary),
        };
        let mut child: Child = command
            .arg(&ini)
            .log_to(log)?
            .spawn()
            .with_context(|| format!("cannot run {}", binary.display()))?;
        let url = format!("postgresql://{PG_USER}:{PASSWORD_IN_URL}@127.0.0.1:{port}/postgres");
        let psql = postgres::find_bin_dir()?.join("psql");
        let ready = wait_ready("pgbouncer", &mut child, READY_TIMEOUT, || {
            answers(&psql, &url)
        });
        if let Err(err) = ready {
            super::kill_tree(&mut child);
            for child in &mut children {
                super::kill_tree(child);
            }
            return Err(err.context(format!("see {}", log_path.display())));
        }
        children.push(child);
        ports.push(port);
    }
    let [main, strict] = ports[..] else {
        bail!("expected two PgBouncers");
    };
    let url = |port: u16, db: &str| {
        format!("postgresql://{PG_USER}:{PASSWORD_IN_URL}@127.0.0.1:{port}/{db}")
    };
    let mut env: Vec<(String, String)> = server
        .env
        .iter()
        .filter(|(k, _)| k == "POSTGRES_TLS_URL")
        .cloned()
        .collect();
    env.extend([
        ("POSTGRES_URL".to_string(), url(main, "postgres")),
        ("POSTGRES_PGBOUNCER_URL".to_string(), url(main, "postgres")),
        (
            "POSTGRES_PGBOUNCER_TRANSACTION_URL".to_string(),
            url(main, "postgres_transaction"),
        ),
        (
            "POSTGRES_PGBOUNCER_STATEMENT_URL".to_string(),
            url(main, "postgres_statement"),
        ),
        (
            "POSTGRES_PGBOUNCER_STRICT_URL".to_string(),
            url(strict, "postgres"),
        ),
        ("POSTGRES_DIRECT_URL".to_string(), direct),
    ]);
    // The server's processes and guards, under the variables above.
    server.env.clear();
    Ok(Started::local_many(children, env)
        .with_guard(guard)
        .merge(server))
}

/// A PgBouncer configuration: the database three times (session,
/// transaction, statement mode), or once in session mode for `strict`.
fn config(
    bouncer: &Bouncer,
    port: u16,
    server_port: u16,
    users: &Path,
    dir: &Path,
    name: &str,
) -> String {
    let server = format!("host=127.0.0.1 port={server_port} dbname=postgres");
    let mut databases = format!("postgres = {server} pool_mode=session\n");
    let mut ignore = String::new();
    if bouncer.ignore_options {
        databases.push_str(&format!(
            "postgres_transaction = {server} pool_mode=transaction\n\
             postgres_statement = {server} pool_mode=statement\n"
        ));
        ignore = "ignore_startup_parameters = options\n".to_string();
    }
    format!(
        "[databases]\n{databases}\n[pgbouncer]\n\
         listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
         auth_type = scram-sha-256\nauth_file = {}\n\
         pool_mode = session\nmax_client_conn = 1000\ndefault_pool_size = 100\n\
         {ignore}logfile = {}\npidfile = {}\n",
        users.display(),
        dir.join(format!("{name}.log")).display(),
        dir.join(format!("{name}.pid")).display(),
    )
}

/// `SELECT 1` through `url` answers.
fn answers(psql: &Path, url: &str) -> bool {
    Command::new(psql)
        .arg(url)
        .args(["-tAc", "SELECT 1"])
        .env("PGCONNECT_TIMEOUT", "2")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1")
}

/// `pgbouncer` on `PATH`.
fn find_binary() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("pgbouncer"))
        .find(|candidate| candidate.is_file())
        .context("pgbouncer is not on PATH (Debian: `apt-get install pgbouncer`)")
}

/// The poolers' directory, removed when the engine stops.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

mod url {
    /// The port of `postgresql://user:pw@host:port/db`.
    pub(super) fn port_of(url: &str) -> anyhow::Result<u16> {
        let authority = url
            .split_once('@')
            .map_or(url, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        let port = authority
            .rsplit_once(':')
            .map(|(_, port)| port)
            .ok_or_else(|| anyhow::anyhow!("no port in {url}"))?;
        Ok(port.parse()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations() {
        let main = config(
            &Bouncer {
                ignore_options: true,
            },
            6432,
            5432,
            Path::new("/d/users.txt"),
            Path::new("/d"),
            "main",
        );
        assert!(
            main.contains("postgres = host=127.0.0.1 port=5432 dbname=postgres pool_mode=session")
        );
        assert!(main.contains(
            "postgres_transaction = host=127.0.0.1 port=5432 dbname=postgres pool_mode=transaction"
        ));
        assert!(main.contains("ignore_startup_parameters = options"));
        let strict = config(
            &Bouncer {
                ignore_options: false,
            },
            6433,
            5432,
            Path::new("/d/users.txt"),
            Path::new("/d"),
            "strict",
        );
        assert!(!strict.contains("ignore_startup_parameters"));
        assert!(!strict.contains("postgres_transaction"));
        assert_eq!(
            url::port_of("postgresql://postgres:s3cret%3A%40@127.0.0.1:5433/postgres").unwrap(),
            5433
        );
    }
}
