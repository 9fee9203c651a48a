//! The [`TtlStorage`] trait.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{
    Entry, Key, Result, Ttl, Watch, WatchUnsupported,
    changes::{Changes, ChangesUnsupported},
    counted::{Counted, CountedWrite},
};

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
/// - **A write applied late never moves the expiry earlier than a write
///   already acknowledged.** A write can reach the store after a later one
///   was acknowledged: the first attempt of a retried renewal (its answer
///   lost) landing after the retry, two requests of one client reordered on
///   the way. Such a write never shortens the record it lands on: a driver
///   counts its TTL from an instant no earlier than the one the replaced
///   record counts from (the store's clock when it applies the write), or
///   refuses it when it was prepared before that record was written (or
///   would shorten a record anchored after it). So of two writes with the
///   same TTL, the one applied last never expires first, and a lease
///   counted from the start of the acknowledged call that wrote it holds
///   whatever arrives late. A renewal (`compare_and_swap(k, v, v, t)`)
///   refused that way answers `Ok(true)`: the record holds `v` and already
///   lives longer. Deletes are not ordered: a late `compare_and_delete`
///   still removes a record holding its value, so a caller never writes a
///   value again after asking to delete it (elections' records carry a
///   fresh nonce per acquisition).
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
    /// lease: idempotent, so safe to retry (an earlier attempt that lands
    /// after the retry never shortens it: see the trait's semantics).
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool>;

    /// Deletes the live record if it holds exactly `value`.
    ///
    /// Returns `Ok(false)` when the record is absent, expired or holds
    /// another value.
    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool>;

    /// Reads the live record's value, `None` when absent or expired.
    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>>;

    /// Reads the live record with what the store knows of its remaining
    /// life ([`crate::TimeLeft`]), `None` when absent or expired. For reports
    /// only (`vvm-host status`): the time left is the store's estimate at the
    /// read and nothing may rely on it for safety.
    ///
    /// The default reads [`TtlStorage::get`] and answers
    /// [`crate::TimeLeft::Unknown`]; drivers that store the expiry override
    /// it.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        Ok(self.get(key).await?.map(Entry::unknown_time_left))
    }

    /// Optional capability: a conditional write and the advance of a
    /// counter as **one** durable write ([`CountedWrite`]): the record is
    /// written (as [`TtlStorage::insert_if_not_exists`] when
    /// `expected` is `None`, as [`TtlStorage::compare_and_swap`] from
    /// `expected` otherwise) and, in the same atomic step, the counter
    /// (never expiring, a decimal `u64`) is set to
    /// [`next_count`](crate::counted::next_count) of its value. Elections
    /// take a lease and its fencing token this way in one round trip.
    ///
    /// A driver that implements it promises, beyond the plain writes'
    /// semantics (the record's TTL counts from an instant at or after the
    /// call's start):
    ///
    /// - **All or nothing**: [`Counted::Written`] with the counter's new
    ///   value when both were applied; [`Counted::Refused`] when the
    ///   record's condition failed, and then neither was written; a counter
    ///   that cannot advance (not a number, past `max`) is a
    ///   [`crate::ErrorKind::Permanent`] error and nothing is written.
    /// - **Unknown outcomes** are [`crate::ErrorKind::OutcomeUnknown`] as
    ///   usual: both were applied or neither.
    ///
    /// The default answers [`Counted::Unsupported`] without touching the
    /// store: the caller then does the steps with the plain writes.
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        let _ = write;
        Ok(Counted::Unsupported)
    }

    /// Optional capability: a [`Watch`] future that completes when the
    /// record under `key` may have been **removed** (deleted, or expired)
    /// after this call, so that a waiter can wake at once instead of polling.
    ///
    /// The default answers [`WatchUnsupported`]: the caller then polls, as it
    /// always may. A driver that supports it promises:
    ///
    /// - **Armed at the call.** The watch is registered before `watch`
    ///   returns (or the future re-reads the record after registering), so a
    ///   removal that happens after the call is never missed, even if the
    ///   future is first polled later.
    /// - **No live record, no wait.** If the key holds no live record when
    ///   the watch is armed, the future completes promptly.
    /// - **Expiry counts as removal.** The future completes at the latest
    ///   shortly after the record's expiry (as the driver knew it when the
    ///   watch was armed; the driver's expiry granularity applies).
    /// - **Spurious wake-ups are allowed**: after any write to the key (a
    ///   renewal), or to other keys, or for no reason. A waiter always
    ///   re-checks the record (or retries its conditional write) and watches
    ///   again. Errors of the watch (a lost subscription) complete the future
    ///   too: the waiter's re-check then reports them.
    ///
    /// The method itself is cheap and does no I/O beyond registering: it is
    /// not `async`, so the trait stays object safe and the registration
    /// happens in the call.
    ///
    /// # How the network drivers implement it
    ///
    /// - **Valkey / Redis** (`storage-valkey`): the compare-and-delete
    ///   script `PUBLISH`es the deleted key on one channel per prefix, a
    ///   second connection is subscribed to it (proven by a probe), and a
    ///   timer runs to the key's `PTTL`; no server configuration (keyspace
    ///   notifications) is needed. `WatchUnsupported` while the
    ///   subscription is not live.
    /// - **PostgreSQL** (`storage-postgres`): compare-and-delete calls
    ///   `pg_notify` in its own statement (sent at commit), one extra
    ///   connection `LISTEN`s, and a timer runs to `expires_at - now()` as
    ///   the server computes it (rows do not expire by themselves).
    ///   `WatchUnsupported` while not listening.
    /// - **etcd** (`storage-etcd`): a watch on the key from the revision of a
    ///   `get`, completing on a `DELETE` event; leases that expire delete
    ///   their keys, which the same watch reports.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttl_storage::{Key, TtlStorage};
    ///
    /// /// Waits until `key` may be free, at most `pause`.
    /// async fn wait_for_release(storage: &dyn TtlStorage, key: &Key, pause: Duration) {
    ///     match storage.watch(key) {
    ///         Ok(watch) => {
    ///             tokio::select! {
    ///                 () = watch => {}
    ///                 () = tokio::time::sleep(pause) => {}
    ///             }
    ///         }
    ///         // Not supported: poll.
    ///         Err(_) => tokio::time::sleep(pause).await,
    ///     }
    /// }
    /// ```
    fn watch(&self, key: &Key) -> Result<Watch, WatchUnsupported> {
        let _ = key;
        Err(WatchUnsupported)
    }

    /// Optional capability: the writes of the record under `key` as they
    /// happen ([`Changes`]), so that a follower sees every value the record
    /// takes, even one that is replaced before any read could see it.
    /// `counter` names the counter that counted writes to this record
    /// advance ([`TtlStorage::write_counted`]); a driver that cannot tell a
    /// write's count from the write itself may read it there.
    ///
    /// The default answers [`ChangesUnsupported`]: the caller polls. A
    /// driver that supports it promises:
    ///
    /// - **Armed, then complete.** The stream's first item is
    ///   [`Change::Armed`](crate::changes::Change::Armed), once the feed is
    ///   live; from then on every change of the record's value and every
    ///   delete is reported, in the store's order, until an
    ///   [`Interrupted`](crate::changes::Change::Interrupted) (then again
    ///   from the next `Armed`).
    /// - **Values, not renewals.** A write that keeps the value may be left
    ///   out; expiry is reported only where the store deletes expired
    ///   records itself (say which in the driver's docs).
    ///
    /// Like [`TtlStorage::watch`] it is not `async`: the subscription is
    /// made in the call or by a task it starts (needs a Tokio runtime).
    ///
    /// # How the network drivers implement it
    ///
    /// - **Valkey / Redis**: the scripts that write a new value `PUBLISH`
    ///   the key, the count and the value on one channel per prefix, read by
    ///   the watch's subscriber connection.
    /// - **PostgreSQL**: the statements that write a new value call
    ///   `pg_notify` with the key, the count and the value (sent at commit).
    /// - **etcd**: an etcd watch of the key, resumed from the last revision
    ///   seen after a lost stream; a write's count is the counter read at
    ///   the write's revision. Expiry is reported (leases delete keys).
    fn changes(&self, key: &Key, counter: Option<&Key>) -> Result<Changes, ChangesUnsupported> {
        let _ = (key, counter);
        Err(ChangesUnsupported)
    }
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
            async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
                (**self).get_entry(key).await
            }
            async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
                (**self).write_counted(write).await
            }
            fn watch(&self, key: &Key) -> Result<Watch, WatchUnsupported> {
                (**self).watch(key)
            }
            fn changes(&self, key: &Key, counter: Option<&Key>) -> Result<Changes, ChangesUnsupported> {
                (**self).changes(key, counter)
            }
        }
    )*};
}

forward_impl!(Arc<S>, Box<S>, &S);

#[cfg(test)]
mod tests {
    use super::*;

    /// A test storage whose four required operations answer the same way
    /// every time, with the extra methods given.
    macro_rules! fixed_answers {
        ($ty:ident { $($extra:item)* }) => {
            struct $ty;

            #[async_trait]
            impl TtlStorage for $ty {
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
                $($extra)*
            }
        };
    }

    // Keeps the default `watch`.
    fixed_answers!(Nothing {});
    fixed_answers!(Watching {
        fn watch(&self, _: &Key) -> Result<Watch, WatchUnsupported> {
            Ok(Box::pin(async {}))
        }
    });

    async fn generic<S: TtlStorage>(s: S) -> bool {
        let key = Key::new("k").unwrap();
        s.insert_if_not_exists(&key, b"v", Ttl::NEVER)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn watch_defaults_to_unsupported_and_is_forwarded() {
        let key = Key::new("k").unwrap();
        let plain: DynTtlStorage = Arc::new(Nothing);
        assert_eq!(plain.watch(&key).err(), Some(WatchUnsupported));
        assert!(WatchUnsupported.to_string().contains("poll"));
        let watching: DynTtlStorage = Arc::new(Watching);
        watching.watch(&key).unwrap().await;
        let by_ref: &dyn TtlStorage = &*watching;
        <&dyn TtlStorage as TtlStorage>::watch(&by_ref, &key)
            .unwrap()
            .await;
        Box::new(Watching).watch(&key).unwrap().await;
        let nested: Arc<DynTtlStorage> = Arc::new(watching.clone());
        nested.watch(&key).unwrap().await;
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
