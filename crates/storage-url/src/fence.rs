//! Open a driver's [`Fence`](::fence::Fence) from a storage URL: the list
//! of the drivers that have one (their `FENCE` descriptors), each behind
//! its cargo feature. The fence opens the configuration parsed with the
//! URL: the text is not parsed again.

use ::fence::{DynFence, FenceDriver, OpenOptions};

use crate::{OpenError, StorageUrl};

/// Every driver compiled in that has a fence: each driver crate's `FENCE`
/// descriptor, found by the configuration its `DRIVER` parsed.
const FENCES: &[FenceDriver] = &[
    #[cfg(feature = "scylla")]
    storage_scylla::FENCE,
    #[cfg(feature = "dynamodb")]
    storage_dynamo::FENCE,
    #[cfg(feature = "valkey")]
    storage_valkey::FENCE,
    #[cfg(feature = "postgres")]
    storage_postgres::FENCE,
    #[cfg(feature = "etcd")]
    storage_etcd::FENCE,
    #[cfg(test)]
    crate::parse::tests::COUNTED_FENCE,
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
    let parsed = url.parsed();
    let Some(driver) = FENCES.iter().find(|driver| driver.accepts(parsed)) else {
        return Err(OpenError::NoFence {
            url: url.to_string(),
        });
    };
    (driver.open)(parsed, options)
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
