//! Storage selection: every driver `vvm-host` can use, chosen by URL.
//!
//! This is the one place that knows the drivers. Adding one means a variant
//! of [`StorageUrl`], its scheme in `FromStr`, and its arm in
//! [`StorageUrl::open`] (behind a cargo feature for network drivers).

use std::{env, fmt, path::PathBuf, str::FromStr, sync::Arc};

use ttl_storage::DynTtlStorage;

/// Name of the redb file in the default data directory.
const DEFAULT_FILE: &str = "vvm-host.redb";

/// Where leadership records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StorageUrl {
    /// `mem`: in this process only; for a throwaway single-node run.
    Mem,
    /// `redb:///path/to/file.redb` (or `redb://relative/path`): an embedded
    /// file, owned by one vvm-host process at a time (redb refuses a second
    /// opener); the record survives restarts of that process.
    Redb(PathBuf),
    /// `scylla://[user:password@]host[:port][,host...]/keyspace[?...]` (or
    /// `cassandra://`): Cassandra or ScyllaDB, see `storage_scylla::ScyllaConfig::from_url`.
    #[cfg(feature = "scylla")]
    Scylla(String),
    /// `dynamodb://TABLE?region=...`: Amazon DynamoDB, see
    /// `storage_dynamo::DynamoConfig::from_url`.
    #[cfg(feature = "dynamodb")]
    Dynamo(String),
}

/// A storage URL that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StorageUrlError {
    #[error("empty storage URL")]
    Empty,
    #[error("{0:?} has no file path (expected redb:///path/to/file.redb)")]
    EmptyPath(String),
    #[error(
        "storage driver {scheme:?} is not built into this vvm-host (build it with the matching cargo feature, e.g. --features scylla)"
    )]
    NotBuiltIn { scheme: String },
    #[error("unknown storage {0:?}: expected `mem` or `redb:///path/to/file.redb`")]
    Unknown(String),
    #[cfg(feature = "scylla")]
    #[error("bad scylla:// URL: {0}")]
    Scylla(String),
    #[cfg(feature = "dynamodb")]
    #[error("bad dynamodb:// URL: {0}")]
    Dynamo(String),
}

/// A storage that cannot be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// Includes "already open in another process": redb allows one owner per file.
    #[error(transparent)]
    Redb(#[from] storage_redb::OpenError),
    #[error("no default data directory: set XDG_DATA_HOME or HOME, or pass --storage")]
    NoDataDir,
    #[cfg(feature = "scylla")]
    #[error(transparent)]
    Scylla(ttl_storage::StorageError),
    #[cfg(feature = "dynamodb")]
    #[error(transparent)]
    Dynamo(storage_dynamo::ConnectError),
}

impl FromStr for StorageUrl {
    type Err = StorageUrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(StorageUrlError::Empty);
        }
        if s == "mem" || s == "mem://" {
            return Ok(StorageUrl::Mem);
        }
        if let Some(path) = s.strip_prefix("redb://") {
            if path.is_empty() {
                return Err(StorageUrlError::EmptyPath(s.to_owned()));
            }
            return Ok(StorageUrl::Redb(PathBuf::from(path)));
        }
        #[cfg(feature = "scylla")]
        if s.starts_with("scylla://") || s.starts_with("cassandra://") {
            // Checked now, so a bad URL is a usage error, not a runtime one.
            storage_scylla::ScyllaConfig::from_url(s)
                .map_err(|err| StorageUrlError::Scylla(err.to_string()))?;
            return Ok(StorageUrl::Scylla(s.to_owned()));
        }
        #[cfg(feature = "dynamodb")]
        if s.starts_with("dynamodb://") {
            storage_dynamo::DynamoConfig::from_url(s)
                .map_err(|err| StorageUrlError::Dynamo(err.to_string()))?;
            return Ok(StorageUrl::Dynamo(s.to_owned()));
        }
        match s.split_once("://") {
            Some((scheme @ ("scylla" | "cassandra" | "dynamodb"), _)) => {
                Err(StorageUrlError::NotBuiltIn {
                    scheme: scheme.to_owned(),
                })
            }
            _ => Err(StorageUrlError::Unknown(s.to_owned())),
        }
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUrl::Mem => f.write_str("mem"),
            StorageUrl::Redb(path) => write!(f, "redb://{}", path.display()),
            // Without the user info, which may hold a password.
            #[cfg(feature = "scylla")]
            StorageUrl::Scylla(url) => match url.split_once("://") {
                Some((scheme, rest)) => {
                    let rest = rest.split_once('@').map_or(rest, |(_, hosts)| hosts);
                    write!(f, "{scheme}://{rest}")
                }
                None => f.write_str(url),
            },
            #[cfg(feature = "dynamodb")]
            StorageUrl::Dynamo(url) => f.write_str(url),
        }
    }
}

impl StorageUrl {
    /// The default: a redb file in the user's data directory
    /// (`$XDG_DATA_HOME/vvm-host/vvm-host.redb`, else `~/.local/share/...`).
    pub(crate) fn default_url() -> Result<StorageUrl, OpenError> {
        let base = env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".local").join("share"))
            })
            .ok_or(OpenError::NoDataDir)?;
        Ok(StorageUrl::Redb(base.join("vvm-host").join(DEFAULT_FILE)))
    }

    /// Opens the storage.
    pub(crate) async fn open(&self) -> Result<DynTtlStorage, OpenError> {
        match self {
            StorageUrl::Mem => Ok(Arc::new(storage_mem::MemStorage::new())),
            StorageUrl::Redb(path) => Ok(Arc::new(storage_redb::RedbStorage::open(path).await?)),
            #[cfg(feature = "scylla")]
            StorageUrl::Scylla(url) => {
                let storage = storage_scylla::ScyllaStorage::from_url(url)
                    .await
                    .map_err(OpenError::Scylla)?;
                Ok(Arc::new(storage))
            }
            #[cfg(feature = "dynamodb")]
            StorageUrl::Dynamo(url) => {
                let config = storage_dynamo::DynamoConfig::from_url(url)
                    .map_err(|err| OpenError::Dynamo(err.into()))?;
                let storage = storage_dynamo::DynamoStorage::connect(config)
                    .await
                    .map_err(OpenError::Dynamo)?;
                Ok(Arc::new(storage))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        assert_eq!("mem".parse(), Ok(StorageUrl::Mem));
        assert_eq!(
            "redb:///var/lib/x.redb".parse(),
            Ok(StorageUrl::Redb(PathBuf::from("/var/lib/x.redb")))
        );
        assert_eq!(
            "redb://data/x.redb".parse(),
            Ok(StorageUrl::Redb(PathBuf::from("data/x.redb")))
        );
        assert_eq!(
            "redb://".parse::<StorageUrl>(),
            Err(StorageUrlError::EmptyPath("redb://".into()))
        );
        assert_eq!("".parse::<StorageUrl>(), Err(StorageUrlError::Empty));
        #[cfg(not(feature = "scylla"))]
        assert!(matches!(
            "scylla://10.0.0.1/k".parse::<StorageUrl>(),
            Err(StorageUrlError::NotBuiltIn { .. })
        ));
        #[cfg(not(feature = "dynamodb"))]
        assert!(matches!(
            "dynamodb://leases?region=eu-west-1".parse::<StorageUrl>(),
            Err(StorageUrlError::NotBuiltIn { .. })
        ));
        #[cfg(feature = "dynamodb")]
        assert!(matches!(
            "dynamodb://leases?region=eu-west-1".parse::<StorageUrl>(),
            Ok(StorageUrl::Dynamo(_))
        ));
        assert!(matches!(
            "postgres://x".parse::<StorageUrl>(),
            Err(StorageUrlError::Unknown(_))
        ));
        let url = StorageUrl::Redb(PathBuf::from("/a/b.redb"));
        assert_eq!(url.to_string().parse(), Ok(url));
    }

    #[cfg(feature = "scylla")]
    #[test]
    fn scylla_urls_hide_the_password() {
        let url: StorageUrl = "scylla://app:secret@10.0.0.1/leases".parse().unwrap();
        assert_eq!(url.to_string(), "scylla://10.0.0.1/leases");
        assert!(matches!(
            "cassandra://10.0.0.1/k".parse(),
            Ok(StorageUrl::Scylla(_))
        ));
        assert!(matches!(
            "scylla://10.0.0.1/k?bogus=1".parse::<StorageUrl>(),
            Err(StorageUrlError::Scylla(_))
        ));
    }
}
