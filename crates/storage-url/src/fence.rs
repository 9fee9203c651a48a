//! Open a driver's [`Fence`](::fence::Fence) from a storage URL: the list
//! of the drivers that have one, each behind its cargo feature.

use std::{future::Future, pin::Pin};

use ::fence::{DynFence, OpenOptions};
use ttl_storage::StorageError;

use crate::{Engine, OpenError, StorageUrl};

/// A driver's `fence::open`, boxed.
type OpenFence =
    for<'a> fn(
        &'a str,
        &'a OpenOptions,
    ) -> Pin<Box<dyn Future<Output = Result<DynFence, StorageError>> + Send + 'a>>;

/// One driver with a fence.
struct FenceDriver {
    engine: Engine,
    open: OpenFence,
}

/// Every driver compiled in that has a fence.
const FENCES: &[FenceDriver] = &[
    #[cfg(feature = "scylla")]
    FenceDriver {
        engine: Engine::Cassandra,
        open: |url, options| Box::pin(storage_scylla::fence::open(url, options)),
    },
    #[cfg(feature = "dynamodb")]
    FenceDriver {
        engine: Engine::DynamoDb,
        open: |url, options| Box::pin(storage_dynamo::fence::open(url, options)),
    },
    #[cfg(feature = "valkey")]
    FenceDriver {
        engine: Engine::Valkey,
        open: |url, options| Box::pin(storage_valkey::fence::open(url, options)),
    },
    #[cfg(feature = "postgres")]
    FenceDriver {
        engine: Engine::Postgres,
        open: |url, options| Box::pin(storage_postgres::fence::open(url, options)),
    },
    #[cfg(feature = "etcd")]
    FenceDriver {
        engine: Engine::Etcd,
        open: |url, options| Box::pin(storage_etcd::fence::open(url, options)),
    },
];

/// Opens the fence of the database `url` names (Cassandra / ScyllaDB,
/// DynamoDB, Valkey / Redis, PostgreSQL, etcd), with its own connection,
/// keeping its registers and logs where `options` says.
///
/// ```no_run
/// # async fn demo(token: u64) -> Result<(), Box<dyn std::error::Error>> {
/// use fence::{Fence, FenceOutcome, OpenOptions};
///
/// let url: storage_url::StorageUrl = "etcd://127.0.0.1:2379".parse()?;
/// let fence = storage_url::open_fence(&url, &OpenOptions::new("fences", true)).await?;
/// if let FenceOutcome::Rejected { highest } = fence.write("report", token, b"done").await? {
///     // A newer leader (token `highest`) exists: stop working.
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`OpenError::NoFence`] for `mem` and `redb` URLs; [`OpenError::Connect`]
/// naming the URL (password redacted) if the fence cannot be opened.
pub async fn open_fence(url: &StorageUrl, options: &OpenOptions) -> Result<DynFence, OpenError> {
    let engine = url.engine();
    let Some(driver) = FENCES.iter().find(|driver| driver.engine == engine) else {
        return Err(OpenError::NoFence {
            url: url.to_string(),
        });
    };
    (driver.open)(url.as_str(), options)
        .await
        .map_err(|err| OpenError::Connect {
            url: url.to_string(),
            source: Box::new(err),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn engines_without_a_fence_are_refused() {
        let err = open_fence(&StorageUrl::mem(), &OpenOptions::new("fences", true))
            .await
            .err();
        assert!(matches!(err, Some(OpenError::NoFence { .. })), "{err:?}");
    }
}
