//! Creating the table idempotently and checking its shape.

use deadpool_postgres::Object;
use ttl_storage::{ErrorKind, NoStore, StorageError};

use crate::{
    config::PostgresConfig,
    error::{Op, classify, storage_error},
};

/// The columns and types the driver needs, as `information_schema` names them.
const EXPECTED: [(&str, &str); 3] = [
    ("key", "text"),
    ("value", "bytea"),
    ("expires_at", "timestamp with time zone"),
];

/// Creates the schema (if named) and the table when missing. Concurrent
/// callers serialize on a transaction-scoped advisory lock, so two
/// processes starting at once never race inside `CREATE ... IF NOT EXISTS`
/// (which can fail with a unique violation on the catalog).
pub(crate) async fn create(
    client: &mut Object,
    config: &PostgresConfig,
) -> Result<(), StorageError> {
    let table = config.qualified_table();
    let failed = |what: &str, err: tokio_postgres::Error| {
        storage_error(classify(&err, Op::Read), &format!("{what} {table}"), err)
    };
    let tx = client
        .transaction()
        .await
        .map_err(|err| failed("starting to create", err))?;
    // `IF NOT EXISTS` on an existing table or schema sends a NOTICE
    // ("relation ... already exists, skipping") that the client logs at
    // INFO on every start: say nothing below a warning here.
    tx.batch_execute("SET LOCAL client_min_messages = warning")
        .await
        .map_err(|err| failed("starting to create", err))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("storage-postgres:{table}")],
    )
    .await
    .map_err(|err| failed("locking to create", err))?;
    if let Some(schema) = config.schema() {
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .await
            .map_err(|err| failed("creating the schema of", err))?;
    }
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (\
           key text PRIMARY KEY, \
           value bytea NOT NULL, \
           expires_at timestamptz NULL)"
    ))
    .await
    .map_err(|err| failed("creating", err))?;
    tx.commit().await.map_err(|err| failed("creating", err))?;
    Ok(())
}

/// A [`NoStore`] error (permanent) unless the table exists: for a
/// read-only open, which creates nothing. Needs no privilege on the table.
pub(crate) async fn require(client: &Object, config: &PostgresConfig) -> Result<(), StorageError> {
    let table = config.qualified_table();
    let row = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(|err| {
            storage_error(
                classify(&err, Op::Read),
                &format!("looking up table {table}"),
                err,
            )
        })?;
    let exists: bool = row.try_get(0).map_err(|err| {
        storage_error(
            ErrorKind::Permanent,
            &format!("looking up table {table}"),
            err,
        )
    })?;
    if exists {
        return Ok(());
    }
    Err(StorageError::with_source(
        ErrorKind::Permanent,
        "opening without creating",
        NoStore::new(format!("table {table}")),
    ))
}

/// Checks that the table exists with exactly the expected columns.
pub(crate) async fn validate(client: &Object, config: &PostgresConfig) -> Result<(), StorageError> {
    let table = config.qualified_table();
    let rows = client
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = coalesce($1, current_schema()) AND table_name = $2 \
             ORDER BY ordinal_position",
            &[&config.schema(), &config.table()],
        )
        .await
        .map_err(|err| {
            storage_error(
                classify(&err, Op::Read),
                &format!("reading the columns of {table}"),
                err,
            )
        })?;
    let mut found: Vec<(String, String)> = Vec::with_capacity(rows.len());
    for row in rows {
        let column = (row.try_get(0), row.try_get(1));
        match column {
            (Ok(name), Ok(data_type)) => found.push((name, data_type)),
            (Err(err), _) | (_, Err(err)) => {
                return Err(storage_error(
                    ErrorKind::Permanent,
                    &format!("reading the columns of {table}"),
                    err,
                ));
            }
        }
    }
    if found.is_empty() {
        return Err(StorageError::permanent(format!(
            "table {table} does not exist (create it, or leave create_table on)"
        )));
    }
    let matches = found.len() == EXPECTED.len()
        && EXPECTED
            .iter()
            .all(|(name, ty)| found.iter().any(|(n, t)| n == name && t == ty));
    if !matches {
        let found: Vec<String> = found.iter().map(|(n, t)| format!("{n} {t}")).collect();
        return Err(StorageError::permanent(format!(
            "table {table} has the wrong schema: expected (key text, value bytea, \
             expires_at timestamp with time zone), found ({})",
            found.join(", ")
        )));
    }
    Ok(())
}
