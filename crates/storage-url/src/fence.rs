//! Open a driver's [`Fence`](ttl_storage::fence::Fence) from a storage
//! URL: the descriptor of the URL's driver carries its fence opener
//! ([`Driver::open_fence`](ttl_storage::Driver::open_fence)), which opens
//! the configuration parsed with the URL: the text is not parsed again.

use ttl_storage::fence::{DynFence, OpenOptions};

use crate::{OpenError, StorageUrl};

/// Opens the fence of the database `url` names (Cassandra / ScyllaDB,
/// DynamoDB, Valkey / Redis, PostgreSQL, etcd), with its own connection,
/// keeping its registers and logs where `options` says.
///
/// ```no_run
/// # async fn demo(token: u64) -> Result<(), Box<dyn std::error::Error>> {
/// use ttl_storage::fence::{Fence, FenceOutcome, OpenOptions};
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
    let Some(open) = url.driver().open_fence else {
        return Err(OpenError::NoFence {
            url: url.to_string(),
        });
    };
    open(url.parsed(), options)
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

    /// Every driver built in but the in-process ones carries its fence
    /// opener in its descriptor (there is no other list of fences to
    /// fall back on), and no help line carries a stray piece of code.
    #[test]
    fn every_network_driver_carries_its_fence() {
        for driver in crate::registry::built_in() {
            let in_process = ["mem", "redb"].contains(&driver.name);
            assert_eq!(
                driver.open_fence.is_some(),
                !in_process,
                "{}: a fence opener is expected exactly for network drivers",
                driver.name
            );
            assert!(
                !driver.help.contains("::<"),
                "{}: {}",
                driver.name,
                driver.help
            );
        }
    }
}
