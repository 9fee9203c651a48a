//! The two errors: a URL that does not parse, a storage that does not open.

/// A storage URL that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Nothing was given.
    #[error("empty storage URL")]
    Empty,
    /// The scheme is not one of any driver. The message lists every scheme
    /// the registry knows, saying which are compiled into this build and
    /// which cargo feature adds the others.
    #[error("unknown storage scheme in {url:?}; {}", crate::registry::known())]
    Unknown {
        /// The URL, password redacted.
        url: String,
    },
    /// The scheme's driver is not compiled into this build.
    #[error("storage {scheme}:// is not built in: enable the cargo feature `{feature}`")]
    NotBuiltIn {
        /// The scheme.
        scheme: String,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// The driver refused the URL.
    #[error("bad {scheme}:// URL {url}: {source}")]
    Invalid {
        /// The scheme.
        scheme: String,
        /// The URL, password redacted.
        url: String,
        /// The driver's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The URL names no single network address to replace.
    #[error("{url} names no single network address")]
    NoEndpoint {
        /// The URL, password redacted.
        url: String,
    },
}

/// A storage that cannot be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL itself is unusable.
    #[error("{source}")]
    Url {
        /// The URL, password redacted.
        url: String,
        /// Why.
        #[source]
        source: UrlError,
    },
    /// The driver could not open or connect (the cause is the source: print
    /// the chain, e.g. with `{:#}` in anyhow, to see it once).
    #[error("cannot open storage {url}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A read-only open ([`crate::StorageUrl::open_existing`]) found no
    /// store: the table, keyspace or file the URL names does not exist.
    /// Nothing was created.
    #[error("no store at {url}: {what} does not exist (nothing was created)")]
    NoStore {
        /// The URL, password redacted.
        url: String,
        /// What is missing (`table ttl_records`, `storage file /x.redb`, ...).
        what: String,
    },
    /// The URL's engine has no fence ([`crate::open_fence`]): `mem` and
    /// `redb` protect nothing outside their host.
    #[error("no fence on {url}: use a cassandra, dynamodb, valkey, postgres or etcd URL")]
    NoFence {
        /// The URL, password redacted.
        url: String,
    },
}
