//! What opening a fence needs besides the database's URL.

/// Where a fence keeps its registers and logs, and whether to create
/// them. Passed to a driver's fence opener
/// ([`Driver::open_fence`](crate::Driver::open_fence)) and to
/// `storage_url::open_fence`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    /// The table of the registers (Cassandra keyspace table, DynamoDB
    /// table, PostgreSQL table); its log table is `<table>_log`. Valkey and
    /// etcd keep fences under the URL's key prefix and ignore it.
    pub table: String,
    /// Create the tables if they are missing. Do it once (at deploy time,
    /// or in one process): concurrent schema changes are unsafe on
    /// Cassandra.
    pub create: bool,
}

impl OpenOptions {
    /// Fences in `table`, created if missing when `create`.
    pub fn new(table: impl Into<String>, create: bool) -> Self {
        OpenOptions {
            table: table.into(),
            create,
        }
    }
}
