//! Creating and checking the keyspace and table.

use scylla::client::session::Session;
use ttl_storage::{ErrorKind, StorageError};

use crate::{
    classify::{Op, classify_execution},
    config::ScyllaConfig,
};

/// The columns the table must have: `(name, kind, CQL type)`.
const EXPECTED_COLUMNS: [(&str, &str, &str); 2] = [
    ("key", "partition_key", "text"),
    ("value", "regular", "blob"),
];

/// Creates the keyspace and table if they are missing.
pub(crate) async fn create(session: &Session, config: &ScyllaConfig) -> Result<(), StorageError> {
    let Some(replication) = config.replication.as_ref() else {
        return Err(StorageError::permanent(
            "create_schema needs a replication setting",
        ));
    };
    let keyspace = format!(
        "CREATE KEYSPACE IF NOT EXISTS {} WITH replication = {}",
        config.keyspace,
        replication.to_cql()
    );
    // ScyllaDB gives new keyspaces tablets by default, and its releases up
    // to 2025.x refuse lightweight transactions on tablets: ask for vnodes.
    // Cassandra (and older ScyllaDB) reject the option, so fall back.
    let scylla_keyspace = format!("{keyspace} AND tablets = {{'enabled': false}}");
    match run_ddl(session, &scylla_keyspace).await {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::Permanent => {
            tracing::debug!(%err, "no tablets option (not ScyllaDB); creating a plain keyspace");
            run_ddl(session, &keyspace).await?;
        }
        Err(err) => return Err(err),
    }
    let table = format!(
        "CREATE TABLE IF NOT EXISTS {}.{} (key text PRIMARY KEY, value blob)",
        config.keyspace, config.table
    );
    run_ddl(session, &table).await
}

/// Runs one schema statement.
async fn run_ddl(session: &Session, statement: &str) -> Result<(), StorageError> {
    tracing::debug!(%statement, "creating schema");
    session
        .query_unpaged(statement, ())
        .await
        .map(|_| ())
        .map_err(|err| {
            StorageError::with_source(
                classify_execution(&err, Op::Read),
                format!("creating schema failed: {statement}"),
                err,
            )
        })
}

/// Checks that the table exists with exactly the expected columns.
pub(crate) async fn validate(session: &Session, config: &ScyllaConfig) -> Result<(), StorageError> {
    let result = session
        .query_unpaged(
            "SELECT column_name, kind, type FROM system_schema.columns \
             WHERE keyspace_name = ? AND table_name = ?",
            (config.keyspace.as_str(), config.table.as_str()),
        )
        .await
        .map_err(|err| {
            StorageError::with_source(
                classify_execution(&err, Op::Read),
                "reading system_schema.columns failed",
                err,
            )
        })?;
    let rows = result
        .into_rows_result()
        .map_err(|err| {
            StorageError::with_source(ErrorKind::Transient, "system_schema.columns: no rows", err)
        })?
        .rows::<(String, String, String)>()
        .map_err(|err| {
            StorageError::with_source(
                ErrorKind::Permanent,
                "system_schema.columns: bad types",
                err,
            )
        })?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| {
            StorageError::with_source(ErrorKind::Permanent, "system_schema.columns: bad row", err)
        })?;
    check_columns(&config.keyspace, &config.table, &rows)
}

/// Compares the table's columns with [`EXPECTED_COLUMNS`].
fn check_columns(
    keyspace: &str,
    table: &str,
    columns: &[(String, String, String)],
) -> Result<(), StorageError> {
    if columns.is_empty() {
        return Err(StorageError::permanent(format!(
            "table {keyspace}.{table} does not exist; create it with \
             `CREATE TABLE {keyspace}.{table} (key text PRIMARY KEY, value blob)` \
             or connect with create_schema=true"
        )));
    }
    let mut found: Vec<_> = columns
        .iter()
        .map(|(n, k, t)| (n.as_str(), k.as_str(), t.as_str()))
        .collect();
    found.sort_unstable();
    if found != EXPECTED_COLUMNS {
        let found: Vec<String> = found
            .iter()
            .map(|(n, k, t)| format!("{n} {t} ({k})"))
            .collect();
        return Err(StorageError::permanent(format!(
            "table {keyspace}.{table} has the wrong schema: expected exactly \
             `key text PRIMARY KEY, value blob`, found [{}]",
            found.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        list.iter()
            .map(|(n, k, t)| (n.to_string(), k.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn accepts_the_expected_table_in_any_order() {
        let columns = cols(&[
            ("value", "regular", "blob"),
            ("key", "partition_key", "text"),
        ]);
        assert!(check_columns("ks", "t", &columns).is_ok());
    }

    #[test]
    fn rejects_missing_and_wrong_tables() {
        let missing = check_columns("ks", "t", &[]).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::Permanent);
        assert!(missing.to_string().contains("does not exist"));

        for wrong in [
            cols(&[
                ("key", "partition_key", "text"),
                ("value", "regular", "text"),
            ]),
            cols(&[
                ("key", "partition_key", "blob"),
                ("value", "regular", "blob"),
            ]),
            cols(&[("key", "partition_key", "text")]),
            cols(&[
                ("key", "partition_key", "text"),
                ("value", "regular", "blob"),
                ("extra", "regular", "int"),
            ]),
            cols(&[
                ("key", "partition_key", "text"),
                ("value", "clustering", "blob"),
            ]),
        ] {
            let err = check_columns("ks", "t", &wrong).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Permanent);
            assert!(err.to_string().contains("wrong schema"), "{err}");
        }
    }
}
