//! `vvm-host status` and `handover` only read the store: they open it
//! with the driver's read-only open (`StorageUrl::open_existing`), which
//! creates no file, directory, table or schema; a store that is not there
//! is exit status 4 ("no store"). Real `vvm-host` processes against a real
//! file system, and against a real PostgreSQL with a role that may only
//! `SELECT` (`cargo xtask test-drivers --engine postgres` runs that case).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    path::Path,
    process::{Command, Output},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use common::*;

/// `vvm-host ARGS --storage URL NAME`, run to its end.
fn read_only(args: &[&str], url: &str) -> Output {
    Command::new(bin())
        .args(args)
        .args(["--storage", url, NAME])
        .env_remove("VVM_HOST_STORAGE")
        .output()
        .unwrap()
}

/// Every read-only subcommand says "no store" with exit status 4.
fn assert_no_store(url: &str) {
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["status", "--watch"],
        &["handover"],
    ] {
        let output = read_only(args, url);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(4), "{args:?} {url}: {stderr}");
        assert!(stderr.contains("no store at"), "{args:?} {url}: {stderr}");
    }
}

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// On redb, in both modes: a path whose directory is missing, a missing
/// file, and an empty file (no store yet: opening it for writing would
/// initialise it) are "no store", and nothing is created or written.
#[test]
fn status_and_handover_create_no_redb_file_or_directory() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    std::fs::File::create(&empty).unwrap();
    for mode in ["", "?mode=exclusive"] {
        for path in [
            dir.path().join("no/such/dir/leases.redb"),
            dir.path().join("leases.redb"),
            empty.clone(),
        ] {
            assert_no_store(&format!("redb://{}{mode}", path.display()));
        }
    }
    assert_eq!(entries(dir.path()), ["empty.redb"], "something was created");
    assert_eq!(
        std::fs::metadata(&empty).unwrap().len(),
        0,
        "the file was written"
    );
}

/// PostgreSQL: `POSTGRES_URL`'s first server, as `user` (with `password`)
/// in `database`; `None` keeps the URL's own credentials.
fn postgres_url(credentials: Option<(&str, &str)>, database: &str) -> String {
    let base = std::env::var("POSTGRES_URL").unwrap_or_else(|_| {
        panic!("POSTGRES_URL is not set: run `cargo xtask test-drivers --engine postgres`")
    });
    // `scheme://userinfo@h1,h2/...`: keep the first server only.
    let (scheme, rest) = base.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = authority.split_at(authority.rfind('@').map_or(0, |at| at + 1));
    let first = hosts.split(',').next().unwrap();
    let mut url = url::Url::parse(&format!("{scheme}://{userinfo}{first}{tail}")).unwrap();
    if let Some((user, password)) = credentials {
        url.set_username(user).unwrap();
        url.set_password(Some(password)).unwrap();
    }
    url.set_path(&format!("/{database}"));
    url.to_string()
}

/// Runs `sql` as the engine's own user in `database`: the rows of a
/// query, none for a statement.
fn admin(database: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    let url = postgres_url(None, database);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(connection);
        let rows = if sql.starts_with("SELECT") {
            client.query(sql, &[]).await.unwrap()
        } else {
            client.batch_execute(sql).await.unwrap();
            Vec::new()
        };
        drop(client);
        let _ = task.await;
        rows
    })
}

/// A role that may only `SELECT`: `status` on an empty database says "no
/// store" (exit 4) and creates no table (before, it ran `CREATE TABLE` and
/// failed with "permission denied for schema public"); once a writer made
/// the table and leads, the role reads the leader. A second writer's start
/// on the existing table logs no `NOTICE ... already exists` at INFO.
#[test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
fn status_on_postgres_with_a_select_only_role() {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let database = format!("vvm_read_only_{nanos}");
    let reader = format!("vvm_reader_{nanos}");
    admin("postgres", &format!("CREATE DATABASE {database}"));
    admin(
        "postgres",
        &format!("CREATE ROLE {reader} LOGIN PASSWORD 'reader-pw'"),
    );
    admin(&database, "REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    let reader_url = postgres_url(Some((&reader, "reader-pw")), &database);
    let writer_url = postgres_url(None, &database);

    // An empty database: no store, and no table made.
    assert_no_store(&reader_url);
    let table = admin(&database, "SELECT to_regclass('ttl_records')::text");
    assert_eq!(
        table[0].get::<_, Option<String>>(0),
        None,
        "a read-only command created the table"
    );

    // A writer creates the table and leads; the reader may read it.
    let (mut leader, _lines, log) = spawn_started(&[
        "--storage",
        &writer_url,
        "--leadership-duration",
        "60s",
        "--",
        "sleep",
        "1000",
    ]);
    admin(
        &database,
        &format!("GRANT SELECT ON ttl_records TO {reader}"),
    );
    let output = read_only(&["status", "--json"], &reader_url);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["leaders"], 1, "{json}");

    // Another writer starts on the existing table: no NOTICE at INFO.
    let second = vvm_host(&[
        "--storage",
        &writer_url,
        "--key-prefix",
        "second/",
        "--",
        "true",
    ])
    .output()
    .unwrap();
    let second_log = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{second_log}");
    assert!(!second_log.contains("already exists"), "{second_log}");

    let (status, log) = stop(&mut leader, nix::sys::signal::Signal::SIGTERM, log);
    assert!(status.success(), "{log}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let connected =
        format!("SELECT count(*)::int FROM pg_stat_activity WHERE datname = '{database}'");
    while admin("postgres", &connected)[0].get::<_, i32>(0) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    admin("postgres", &format!("DROP DATABASE {database}"));
    admin("postgres", &format!("DROP ROLE {reader}"));
}
