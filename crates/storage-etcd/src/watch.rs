//! The watch behind [`ttl_storage::TtlStorage::watch`]: a read, then an
//! etcd watch of the key from the next revision, delete events only.

use etcd_client::{Client, EventType, WatchFilterType, WatchOptions};

use crate::unsent;

/// How long a failed watch waits before it completes, so that a caller that
/// re-watches at once does not spin while etcd is unreachable.
pub(crate) const ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Waits for the delete of `key` (true), or returns false on an error.
pub(crate) async fn until_deleted(client: Client, key: String) -> bool {
    let current = match unsent::retry(|| {
        let mut client = client.clone();
        let key = key.clone();
        async move { client.get(key, None).await }
    })
    .await
    {
        Ok(current) => current,
        Err(err) => {
            tracing::debug!(%err, "etcd watch: reading the key failed");
            return false;
        }
    };
    if current.kvs().is_empty() {
        return true;
    }
    // From the next revision: a delete after the read is never missed.
    let from = current.header().map_or(0, |h| h.revision()) + 1;
    let started = unsent::retry(|| {
        let mut client = client.clone();
        let key = key.clone();
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        async move { client.watch(key, Some(options)).await }
    });
    let (_watcher, mut stream) = match started.await {
        Ok(watch) => watch,
        Err(err) => {
            tracing::debug!(%err, "etcd watch: starting the watch failed");
            return false;
        }
    };
    loop {
        match stream.message().await {
            Ok(Some(response)) => {
                if response
                    .events()
                    .iter()
                    .any(|event| event.event_type() == EventType::Delete)
                {
                    return true;
                }
                if response.canceled() {
                    tracing::debug!(reason = response.cancel_reason(), "etcd watch cancelled");
                    return false;
                }
            }
            Ok(None) => return false,
            Err(err) => {
                tracing::debug!(%err, "etcd watch: the stream failed");
                return false;
            }
        }
    }
}
