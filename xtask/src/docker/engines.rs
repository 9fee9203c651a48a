//! One function per engine: its container, its readiness probe (the process
//! route's, against the published port) and the variables its suites read.

use std::{
    net::{SocketAddr, TcpStream},
    path::Path,
    time::Duration,
};

use anyhow::Context;

use super::{Running, Spec, start};
use crate::engines::{Started, shared};

/// How long a JVM engine (Cassandra, ScyllaDB) may take to answer CQL.
const CQL_LIMIT: Duration = Duration::from_secs(240);
/// How long the others may take.
const LIMIT: Duration = Duration::from_secs(90);

/// Where containers see the throwaway TLS files (`ca.pem`, `server.pem`, `server.key`).
const CERTS: &str = "/certs";

/// Mounts the directory of `certs` at `CERTS` (or, with `same_path`, at
/// its own path, for a server whose configured file names clients read).
fn mount_certs(
    spec: &mut Spec,
    certs: &shared::TlsCerts,
    same_path: bool,
) -> anyhow::Result<String> {
    let dir = certs.ca.parent().context("the CA file has no directory")?;
    let host = dir.display().to_string();
    let target = if same_path {
        host.clone()
    } else {
        CERTS.to_string()
    };
    spec.mounts.push((host, target.clone()));
    Ok(target)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Apache Cassandra 5 (`cassandra:5.0`); `SCYLLA_URI`.
pub(super) fn cassandra(_work_dir: &Path) -> anyhow::Result<Started> {
    cassandra_image("cassandra", "cassandra:5.0")
}

fn cassandra_image(name: &'static str, image: &'static str) -> anyhow::Result<Started> {
    let mut spec = Spec::new(name, image, &[9042]);
    // As the official image reads them (and local/cassandra:ci too).
    spec.env = vec![
        ("MAX_HEAP_SIZE", "1G".into()),
        ("HEAP_NEWSIZE", "200M".into()),
        ("CASSANDRA_CLUSTER_NAME", "xtask".into()),
    ];
    cql_engine(start(spec)?)
}

/// ScyllaDB (`scylladb/scylla:2025.1`), a small single-shard developer node; `SCYLLA_URI`.
pub(super) fn scylla(_work_dir: &Path) -> anyhow::Result<Started> {
    let mut spec = Spec::new("scylla", "scylladb/scylla:2025.1", &[9042]);
    spec.cmd = Some(
        ["--smp", "1", "--memory", "750M", "--overprovisioned", "1"]
            .into_iter()
            .chain(["--developer-mode", "1"])
            .map(String::from)
            .collect(),
    );
    cql_engine(start(spec)?)
}

fn cql_engine(running: Running) -> anyhow::Result<Started> {
    let port = running.port(9042)?;
    running.wait_ready(CQL_LIMIT, || shared::cql_ping(loopback(port), None).is_ok())?;
    let keyspace = shared::CASSANDRA_KEYSPACE;
    let uri =
        format!("scylla://127.0.0.1:{port}/{keyspace}?replication=simple:1&create_schema=true");
    Ok(running.into_started(vec![("SCYLLA_URI".into(), uri)]))
}

/// DynamoDB Local (`amazon/dynamodb-local`), in memory; `DYNAMODB_ENDPOINT`.
pub(super) fn dynamodb(_work_dir: &Path) -> anyhow::Result<Started> {
    let mut spec = Spec::new("dynamodb", "amazon/dynamodb-local:latest", &[8000]);
    spec.cmd = Some(
        ["-jar", "DynamoDBLocal.jar", "-inMemory", "-sharedDb"]
            .map(String::from)
            .to_vec(),
    );
    let running = start(spec)?;
    let port = running.port(8000)?;
    running.wait_ready(LIMIT, || shared::list_tables(loopback(port)).is_ok())?;
    let endpoint = format!("http://127.0.0.1:{port}");
    Ok(running.into_started(vec![("DYNAMODB_ENDPOINT".into(), endpoint)]))
}

/// Valkey (`valkey/valkey:8`), also listening with TLS; `VALKEY_URL` and
/// `VALKEY_TLS_URL`. As with the process route, the coordinator's tests ask
/// the server (`CONFIG GET`) for its TLS port and certificate files: the TLS
/// port is published on the same host port and the files are mounted at
/// their host paths.
pub(super) fn valkey(work_dir: &Path) -> anyhow::Result<Started> {
    valkey_container(work_dir, true)
}

fn valkey_container(work_dir: &Path, tls: bool) -> anyhow::Result<Started> {
    let tls_port = crate::engines::free_port()?;
    let mut spec = Spec::new("valkey", "valkey/valkey:8", &[6379, tls_port]);
    // The server itself (not the image's entrypoint, which would drop to a
    // user that cannot read the key): as root, persistence off.
    spec.entrypoint = Some("valkey-server");
    let mut cmd: Vec<String> = [
        "--port",
        "6379",
        "--bind",
        "0.0.0.0",
        "--protected-mode",
        "no",
    ]
    .into_iter()
    .chain(["--save", "", "--appendonly", "no"])
    .map(String::from)
    .collect();
    let mut ca = None;
    if tls {
        let certs = shared::tls_certs(&work_dir.join("tls"))?;
        let dir = mount_certs(&mut spec, &certs, true)?;
        spec.same_port.push(tls_port);
        cmd.extend([
            "--tls-port".to_string(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            format!("{dir}/server.pem"),
            "--tls-key-file".into(),
            format!("{dir}/server.key"),
            "--tls-ca-cert-file".into(),
            format!("{dir}/ca.pem"),
            "--tls-auth-clients".into(),
            "no".into(),
        ]);
        ca = Some(certs.ca);
    } else {
        spec.ports.retain(|p| *p == 6379);
    }
    spec.cmd = Some(cmd);
    let running = start(spec)?;
    let port = running.port(6379)?;
    running.wait_ready(LIMIT, || {
        shared::valkey_ping(loopback(port)).unwrap_or(false)
    })?;
    let mut env = vec![("VALKEY_URL".into(), format!("redis://127.0.0.1:{port}"))];
    if let Some(ca) = ca {
        env.push((
            "VALKEY_TLS_URL".into(),
            format!("rediss://127.0.0.1:{tls_port}?tls_ca_file={}", ca.display()),
        ));
    }
    Ok(running.into_started(env))
}

/// PostgreSQL (`postgres:17`) with SCRAM password auth and TLS;
/// `POSTGRES_URL` and `POSTGRES_TLS_URL`, as the process route sets them.
pub(super) fn postgres(work_dir: &Path) -> anyhow::Result<Started> {
    let certs = shared::tls_certs(&work_dir.join("tls"))?;
    let mut spec = Spec::new("postgres", "postgres:17", &[5432]);
    mount_certs(&mut spec, &certs, false)?;
    spec.env = vec![("POSTGRES_PASSWORD", shared::POSTGRES_PASSWORD.into())];
    // PostgreSQL wants its key owned by the server's user with mode 0600:
    // a copy inside the container, then the image's own entrypoint.
    spec.entrypoint = Some("sh");
    spec.cmd = Some(vec![
        "-c".into(),
        format!(
            "set -e; mkdir -p /tls; cp {CERTS}/server.pem {CERTS}/server.key /tls/; \
             chown -R postgres /tls; chmod 600 /tls/server.key; \
             exec docker-entrypoint.sh postgres {}",
            postgres_args(true)
        ),
    ]);
    let running = start(spec)?;
    let port = running.port(5432)?;
    running.wait_ready(LIMIT, || postgres_answers(loopback(port)))?;
    let url = format!(
        "postgresql://postgres:{}@127.0.0.1:{port}/postgres",
        shared::PASSWORD_IN_URL
    );
    let tls_url = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        certs.ca.display()
    );
    Ok(running.into_started(vec![
        ("POSTGRES_TLS_URL".into(), tls_url),
        ("POSTGRES_URL".into(), url),
    ]))
}

/// The server settings of the process route (and TLS with `/tls`).
fn postgres_args(tls: bool) -> String {
    let mut args = String::from(
        "-c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
    );
    if tls {
        args.push_str(
            " -c ssl=on -c ssl_cert_file=/tls/server.pem -c ssl_key_file=/tls/server.key",
        );
    }
    args
}

/// PostgreSQL and Valkey for the `pg-tenants` example: `PG_URL` (trust
/// auth) and `VALKEY_URL`.
pub(super) fn pg_example(work_dir: &Path) -> anyhow::Result<Started> {
    let mut spec = Spec::new("postgres", "postgres:17", &[5432]);
    spec.env = vec![("POSTGRES_HOST_AUTH_METHOD", "trust".into())];
    spec.cmd = Some(
        ["postgres"]
            .into_iter()
            .map(String::from)
            .chain(postgres_args(false).split(' ').map(String::from))
            .collect(),
    );
    let running = start(spec)?;
    let port = running.port(5432)?;
    running.wait_ready(LIMIT, || postgres_answers(loopback(port)))?;
    let url = format!("postgresql://postgres@127.0.0.1:{port}/postgres");
    let pg = running.into_started(vec![("PG_URL".into(), url)]);
    Ok(pg.merge(valkey_container(work_dir, false)?))
}

/// A real protocol exchange: a StartupMessage for `postgres`/`postgres` is
/// answered with an authentication request (`R`), not an error (`E`, as
/// while the server starts up) nor a closed connection (a published port
/// with nothing listening behind it).
fn postgres_answers(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let check = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        let params = b"user\0postgres\0database\0postgres\0\0";
        let len = u32::try_from(8 + params.len()).unwrap_or(u32::MAX);
        let mut msg = Vec::with_capacity(64);
        msg.extend_from_slice(&len.to_be_bytes());
        msg.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
        msg.extend_from_slice(params);
        stream.write_all(&msg)?;
        let mut tag = [0u8; 1];
        stream.read_exact(&mut tag)?;
        Ok(tag[0] == b'R')
    };
    check().unwrap_or(false)
}

/// etcd (`quay.io/coreos/etcd:v3.5`), one member with a short election
/// timeout, clients served plain and with TLS; `ETCD_URL` and `ETCD_TLS_URL`.
pub(super) fn etcd(work_dir: &Path) -> anyhow::Result<Started> {
    let certs = shared::tls_certs(&work_dir.join("tls"))?;
    let mut spec = Spec::new("etcd", "quay.io/coreos/etcd:v3.5", &[2379, 2381]);
    mount_certs(&mut spec, &certs, false)?;
    spec.cmd = Some(
        [
            "etcd",
            "--name",
            "xtask",
            "--data-dir",
            "/tmp/etcd-data",
            "--listen-client-urls",
            "http://0.0.0.0:2379,https://0.0.0.0:2381",
            "--advertise-client-urls",
            "http://127.0.0.1:2379",
            "--cert-file",
            "/certs/server.pem",
            "--key-file",
            "/certs/server.key",
            "--listen-peer-urls",
            "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:2380",
            "--initial-cluster",
            "xtask=http://127.0.0.1:2380",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
        ]
        .map(String::from)
        .to_vec(),
    );
    let running = start(spec)?;
    let port = running.port(2379)?;
    running.wait_ready(LIMIT, || shared::etcd_healthy(loopback(port)))?;
    let tls_port = running.port(2381)?;
    let env = vec![
        ("ETCD_URL".into(), format!("etcd://127.0.0.1:{port}")),
        (
            "ETCD_TLS_URL".into(),
            format!(
                "etcds://127.0.0.1:{tls_port}?tls_ca_file={}",
                certs.ca.display()
            ),
        ),
    ];
    Ok(running.into_started(env))
}
