//! Creating and checking the keyspace and table.

use scylla::{
    client::session::Session,
    errors::{DbError, ExecutionError, RequestAttemptError},
};
use ttl_storage::{ErrorKind, NoStore, StorageError};

use crate::{
    classify::{Op, classify_execution},
    config::CassandraConfig,
};

/// The columns the table must have: `(name, kind, CQL type)`.
const EXPECTED_COLUMNS: [(&str, &str, &str); 2] = [
    ("key", "partition_key", "text"),
    ("value", "regular", "blob"),
];

/// Creates the keyspace and table if they are missing, safely when several
/// clients do it at once on different coordinators.
///
/// Keyspaces have no id, so concurrent `CREATE KEYSPACE IF NOT EXISTS`
/// statements merge. Tables do: two coordinators that both find the table
/// missing would create it under two random ids, and every later write
/// fails with `INCOMPATIBLE_SCHEMA`. So the table is created `WITH id =`
/// an id derived from its name ([`table_id`]): every creator proposes the
/// same table, and the schema versions merge. The driver waits for schema
/// agreement after each statement, and [`create`] waits once more at the
/// end, so the table is known cluster-wide before anything uses it.
pub(crate) async fn create(
    session: &Session,
    config: &CassandraConfig,
) -> Result<(), StorageError> {
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
    // The table statement may go to another coordinator: let every node
    // know the keyspace first.
    await_agreement(session).await?;
    let table = format!(
        "CREATE TABLE IF NOT EXISTS {}.{} (key text PRIMARY KEY, value blob)",
        config.keyspace, config.table
    );
    let with_id = format!(
        "{table} WITH id = {}",
        table_id(&config.keyspace, &config.table)
    );
    // A coordinator that has not applied the keyspace yet (another
    // creator's, still propagating) answers "Keyspace ... doesn't exist":
    // wait for agreement and retry, a bounded number of times. Measured on
    // a fresh 3-node Cassandra with three processes creating at once.
    let mut attempt = 0u32;
    let created = loop {
        attempt += 1;
        match session.query_unpaged(with_id.as_str(), ()).await {
            Ok(_) => break Ok(()),
            Err(err) if keyspace_missing(&err) && attempt < KEYSPACE_RETRIES => {
                tracing::debug!(%err, attempt, "keyspace not known to the coordinator yet; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                    .await;
                await_agreement(session).await?;
            }
            Err(err) => {
                break Err(StorageError::with_source(
                    classify_execution(&err, Op::Read),
                    format!("creating schema failed: {with_id}"),
                    err,
                ));
            }
        }
    };
    match created {
        Ok(()) => {}
        Err(err) if err.kind() == ErrorKind::Permanent => {
            // An engine without table ids in CQL: create it plainly (this
            // can race with another creator; see `create`).
            tracing::warn!(%err, "CREATE TABLE ... WITH id refused; creating the table without an id");
            run_ddl(session, &table).await?;
        }
        Err(err) => return Err(err),
    }
    await_agreement(session).await
}

/// Waits until every reachable node has the same schema version, so that a
/// table created on one coordinator is known to all of them before use.
pub(crate) async fn await_agreement(session: &Session) -> Result<(), StorageError> {
    session
        .await_schema_agreement()
        .await
        .map(|_| ())
        .map_err(|err| {
            StorageError::with_source(
                ErrorKind::Transient,
                "the nodes did not agree on the schema in time",
                err,
            )
        })
}

/// The id of `keyspace.table` when this driver creates it: a name-based
/// UUID (version 8, two FNV-1a 64 hashes of `keyspace.table`), the same in
/// every process and release.
pub(crate) fn table_id(keyspace: &str, table: &str) -> String {
    fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
        let mut hash = seed;
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    }
    // The name this driver was published under first: the id must stay
    // the same across releases (a renamed crate keeps it).
    let name = format!("storage-scylla:{keyspace}.{table}");
    let hi = fnv1a(0xcbf2_9ce4_8422_2325, name.as_bytes());
    let lo = fnv1a(0x6c62_272e_07bb_0142, name.as_bytes());
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hi.to_be_bytes());
    bytes[8..].copy_from_slice(&lo.to_be_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8: custom
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Attempts of the table statement while its coordinator does not know
/// the keyspace yet (200 ms, 400 ms, ... apart: 9 s in all).
const KEYSPACE_RETRIES: u32 = 10;

/// Whether a schema statement failed because its coordinator does not know
/// the keyspace (yet).
fn keyspace_missing(err: &ExecutionError) -> bool {
    matches!(
        err,
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(DbError::Invalid, message))
            if message.contains("Keyspace") && message.contains("doesn't exist")
    )
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

/// Checks that the table exists with exactly the expected columns; with
/// `existing`, a missing table is a [`NoStore`] (a read-only open, which
/// created nothing).
pub(crate) async fn validate(
    session: &Session,
    config: &CassandraConfig,
    existing: bool,
) -> Result<(), StorageError> {
    let rows = columns(session, config).await?;
    if existing && rows.is_empty() {
        return Err(StorageError::with_source(
            ErrorKind::Permanent,
            "opening without creating",
            NoStore::new(format!("table {}.{}", config.keyspace, config.table)),
        ));
    }
    check_columns(&config.keyspace, &config.table, &rows)
}

/// The table's columns as `(name, kind, type)` (none: no such table).
async fn columns(
    session: &Session,
    config: &CassandraConfig,
) -> Result<Vec<(String, String, String)>, StorageError> {
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
    Ok(rows)
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
    fn table_ids_are_stable_uuids_per_name() {
        let id = table_id("ks", "ttl_records");
        assert_eq!(id, table_id("ks", "ttl_records"));
        assert_ne!(id, table_id("ks2", "ttl_records"));
        assert_ne!(id, table_id("ks", "other"));
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{id}");
        assert!(id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_eq!(&id[14..15], "8", "version nibble: {id}");
        assert!(
            matches!(&id[19..20], "8" | "9" | "a" | "b"),
            "variant: {id}"
        );
    }

    #[test]
    fn a_keyspace_unknown_to_the_coordinator_is_recognised() {
        let db = |err, message: &str| {
            ExecutionError::LastAttemptError(RequestAttemptError::DbError(err, message.into()))
        };
        assert!(keyspace_missing(&db(
            DbError::Invalid,
            "Keyspace 'schema_race_1_0' doesn't exist"
        )));
        assert!(!keyspace_missing(&db(
            DbError::Invalid,
            "Unknown property 'id'"
        )));
        assert!(!keyspace_missing(&db(
            DbError::SyntaxError,
            "Keyspace 'x' doesn't exist"
        )));
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
