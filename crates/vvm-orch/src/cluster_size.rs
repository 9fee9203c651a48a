//! Nodes agree on the cluster size. Each leader claims `{key_prefix}size`
//! (the size it was started with, `N`, as decimal text) beside its lease,
//! with the same TTL, and refreshes it while it leads; a node started with
//! another size finds the record and refuses to lead
//! ([`crate::VvmProblem::ClusterSizeMismatch`]). So nodes started with
//! different `--cluster-size` never lead together, and never more than the
//! smallest N run at once. When the last leader is gone the record expires
//! after one leadership duration, and the cluster may restart with another
//! size.
//!
//! The claim is made after a key was acquired and before the services
//! start; a lost race (two sizes claiming at once) is decided by the
//! store's insert-if-not-exists, and the loser releases its key.

use std::time::Duration;

use ttl_storage::{DynTtlStorage, Key, StorageError, Ttl, ValidationError};

use crate::VvmConfig;

/// What a claim found.
#[derive(Debug)]
pub(crate) enum Claim {
    /// The record says our size (or did not exist, and now does).
    Agreed,
    /// Leaders started with another size are running.
    Mismatch(u32),
    /// The record holds something that is not a size: treated as a mismatch
    /// of unknown size.
    Garbled,
}

/// `{key_prefix}size`.
pub(crate) fn key(config: &VvmConfig) -> Result<Key, ValidationError> {
    Key::new(format!("{}size", config.key_prefix))
}

fn encode(size: u32) -> Vec<u8> {
    size.to_string().into_bytes()
}

fn decode(bytes: &[u8]) -> Option<u32> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Claims (or confirms, refreshing its TTL) the cluster size `size`.
pub(crate) async fn claim(
    storage: &DynTtlStorage,
    key: &Key,
    size: u32,
    duration: Duration,
) -> Result<Claim, StorageError> {
    let ttl = Ttl::expiring(duration).map_err(|err| StorageError::permanent(err.to_string()))?;
    let ours = encode(size);
    // Two rounds: a record that expired or was inserted between our read
    // and our write is read again once.
    for _ in 0..2 {
        match storage.get(key).await? {
            None => {
                if storage.insert_if_not_exists(key, &ours, ttl).await? {
                    return Ok(Claim::Agreed);
                }
            }
            Some(found) if found == ours => {
                if storage.compare_and_swap(key, &ours, &ours, ttl).await? {
                    return Ok(Claim::Agreed);
                }
            }
            Some(found) => {
                return Ok(match decode(&found) {
                    Some(theirs) => Claim::Mismatch(theirs),
                    None => Claim::Garbled,
                });
            }
        }
    }
    // Still changing under us: let the caller retry later.
    Err(StorageError::transient(
        "the cluster-size record kept changing while it was claimed",
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_size_wins_until_it_expires() {
        let storage: DynTtlStorage = std::sync::Arc::new(storage_mem::MemStorage::new());
        let key = Key::new("vvm/leader/size").unwrap();
        let d = Duration::from_secs(20);
        assert!(matches!(
            claim(&storage, &key, 2, d).await.unwrap(),
            Claim::Agreed
        ));
        assert!(matches!(
            claim(&storage, &key, 2, d).await.unwrap(),
            Claim::Agreed
        ));
        assert!(matches!(
            claim(&storage, &key, 3, d).await.unwrap(),
            Claim::Mismatch(2)
        ));
        tokio::time::sleep(d + Duration::from_secs(1)).await;
        assert!(matches!(
            claim(&storage, &key, 3, d).await.unwrap(),
            Claim::Agreed
        ));
    }
}
