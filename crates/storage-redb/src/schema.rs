//! The tables of a storage file, and the check that a file holds them.

use redb::{
    Database, ReadOnlyDatabase, ReadableDatabase, ReadableTable, TableDefinition, TableHandle,
};

/// Key -> the encoded record (see [`crate::record`]).
pub(crate) const RECORDS: TableDefinition<'static, &str, &[u8]> =
    TableDefinition::new("ttl_storage.records");

/// (expiry in Unix millis, key) -> (): the expiry index the sweep walks.
/// Holds one entry per record that expires.
pub(crate) const EXPIRY: TableDefinition<'static, (u64, &str), ()> =
    TableDefinition::new("ttl_storage.expiry");

/// Metadata: the format version of the file.
pub(crate) const META: TableDefinition<'static, &str, u64> =
    TableDefinition::new("ttl_storage.meta");

/// The key of the format version in [`META`].
const FORMAT_KEY: &str = "format_version";

/// The format version this crate writes and reads.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// Why a redb file cannot be used as a storage file.
#[derive(Debug)]
pub(crate) enum SchemaError {
    /// The file holds tables of some other program.
    Foreign(Vec<String>),
    /// The file was written by another format version of this crate.
    Version(u64),
    /// redb failed.
    Redb(redb::Error),
}

impl<E: Into<redb::Error>> From<E> for SchemaError {
    fn from(err: E) -> Self {
        SchemaError::Redb(err.into())
    }
}

/// Creates the tables in a new (empty) database, or checks that an existing
/// one is a storage file of [`FORMAT_VERSION`].
pub(crate) fn init_or_check(db: &Database) -> Result<(), SchemaError> {
    let txn = db.begin_write()?;
    let names: Vec<String> = txn
        .list_tables()?
        .map(|table| table.name().to_owned())
        .collect();
    let version = if names.iter().any(|name| name == META.name()) {
        let meta = txn.open_table(META)?;
        meta.get(FORMAT_KEY)?.map(|guard| guard.value())
    } else {
        None
    };
    let has = |table: &str| names.iter().any(|name| name == table);
    match version {
        // Complete already: nothing to write, so no commit (and no fsync:
        // every open of a shared file, `vvm-host status` and `handover`'s
        // included, would pay for one otherwise).
        Some(FORMAT_VERSION) if has(RECORDS.name()) && has(EXPIRY.name()) => {
            txn.abort()?;
            return Ok(());
        }
        Some(FORMAT_VERSION) => {}
        Some(other) => return Err(SchemaError::Version(other)),
        None if names.is_empty() => {
            txn.open_table(META)?.insert(FORMAT_KEY, FORMAT_VERSION)?;
        }
        None => return Err(SchemaError::Foreign(names)),
    }
    // Creates the data tables in a new file; a no-op in an existing one.
    txn.open_table(RECORDS)?;
    txn.open_table(EXPIRY)?;
    txn.commit()?;
    Ok(())
}

/// Checks, without writing, that an existing database is a storage file of
/// [`FORMAT_VERSION`] or still empty of tables.
pub(crate) fn check_read_only(db: &ReadOnlyDatabase) -> Result<(), SchemaError> {
    let txn = db.begin_read()?;
    let names: Vec<String> = txn
        .list_tables()?
        .map(|table| table.name().to_owned())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    if !names.iter().any(|name| name == META.name()) {
        return Err(SchemaError::Foreign(names));
    }
    let meta = txn.open_table(META)?;
    match meta.get(FORMAT_KEY)?.map(|guard| guard.value()) {
        Some(FORMAT_VERSION) => Ok(()),
        Some(other) => Err(SchemaError::Version(other)),
        None => Err(SchemaError::Foreign(names)),
    }
}
