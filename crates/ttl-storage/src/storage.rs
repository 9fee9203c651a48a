//! The [`TtlStorage`] trait.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Key, Result, Ttl};

/// A key-value store with conditional writes and per-record TTL: the one
/// contract every driver implements and elections depend on.
///
/// # Semantics every driver guarantees
///
/// - **Linearizable conditional writes.** Each operation on one key takes
///   effect atomically at one instant between its call and its return: of
///   any number of concurrent `insert_if_not_exists` on an absent key exactly
///   one returns `Ok(true)`, and of concurrent `compare_and_swap`s from the
///   same `old` value exactly one returns `Ok(true)`.
/// - **Reads see every acknowledged write** (`get` is linearizable too).
/// - **Expiry.** A record written with an expiring [`Ttl`] of `t` by a call
///   that started at instant `s` stays live at least until `s + t`: drivers
///   count `t` from an instant at or after the call's start (the start of
///   the write transaction, a coordinator's clock reading, the request's
///   construction). It is gone at most the driver's documented granularity
///   (at most one second) after `t` has passed from the write's application.
///   This is the bound elections rely on: a lease counted from the start of
///   the call that wrote it never outlives the record.
///   Expired records are invisible to *every* operation: `get` returns `None`,
///   `insert_if_not_exists` succeeds, `compare_and_swap` and
///   `compare_and_delete` return `Ok(false)`.
/// - **[`Ttl::NEVER`]** writes a record that never expires.
/// - **Values are opaque bytes**, compared byte for byte: empty values and NUL
///   bytes round-trip. Drivers reject values over [`crate::MAX_VALUE_LEN`]
///   with [`crate::ValidationError::ValueTooLong`] (see [`crate::check_value`]).
/// - **Errors are classified** by [`crate::StorageError::kind`]; a driver
///   reports [`crate::ErrorKind::OutcomeUnknown`] whenever a conditional
///   write may have been applied without its answer reaching us.
///
/// Each driver documents which clock its expiry uses and what it assumes
/// about clocks across machines.
///
/// # Object safety
///
/// The trait is object safe: the host program can pick a driver at run time
/// and pass `Arc<dyn TtlStorage>` ([`DynTtlStorage`]). `Arc<S>`, `Box<S>` and
/// `&S` implement it too, so generic code accepts all of them.
#[async_trait]
pub trait TtlStorage: Send + Sync {
    /// Writes `value` under `key` with `ttl` if no live record exists.
    ///
    /// Returns `Ok(true)` when this call created the record, `Ok(false)` when
    /// a live record was already there (whatever its value).
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool>;

    /// Replaces the live record's value `old` by `new` and restarts its TTL
    /// at `ttl`, if and only if the live record holds exactly `old`.
    ///
    /// Returns `Ok(false)` when the record is absent, expired or holds
    /// another value. `compare_and_swap(k, v, v, ttl)` is the renewal of a
    /// lease: idempotent, so safe to retry.
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool>;

    /// Deletes the live record if it holds exactly `value`.
    ///
    /// Returns `Ok(false)` when the record is absent, expired or holds
    /// another value.
    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool>;

    /// Reads the live record's value, `None` when absent or expired.
    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>>;
}

/// A storage chosen at run time.
pub type DynTtlStorage = Arc<dyn TtlStorage>;

macro_rules! forward_impl {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<S: TtlStorage + ?Sized> TtlStorage for $ty {
            async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
                (**self).insert_if_not_exists(key, value, ttl).await
            }
            async fn compare_and_swap(
                &self,
                key: &Key,
                old: &[u8],
                new: &[u8],
                ttl: Ttl,
            ) -> Result<bool> {
                (**self).compare_and_swap(key, old, new, ttl).await
            }
            async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
                (**self).compare_and_delete(key, value).await
            }
            async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
                (**self).get(key).await
            }
        }
    )*};
}

forward_impl!(Arc<S>, Box<S>, &S);

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    #[async_trait]
    impl TtlStorage for Nothing {
        async fn insert_if_not_exists(&self, _: &Key, _: &[u8], _: Ttl) -> Result<bool> {
            Ok(true)
        }
        async fn compare_and_swap(&self, _: &Key, _: &[u8], _: &[u8], _: Ttl) -> Result<bool> {
            Ok(false)
        }
        async fn compare_and_delete(&self, _: &Key, _: &[u8]) -> Result<bool> {
            Ok(false)
        }
        async fn get(&self, _: &Key) -> Result<Option<Vec<u8>>> {
            Ok(None)
        }
    }

    async fn generic<S: TtlStorage>(s: S) -> bool {
        let key = Key::new("k").unwrap();
        s.insert_if_not_exists(&key, b"v", Ttl::NEVER)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn usable_generically_and_as_dyn() {
        let dynamic: DynTtlStorage = Arc::new(Nothing);
        assert!(generic(dynamic.clone()).await);
        assert!(generic(&*dynamic).await);
        assert!(generic(Box::new(Nothing)).await);
        assert!(generic(Nothing).await);
    }
}
