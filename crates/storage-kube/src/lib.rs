//! # storage-kube
//!
//! A [`ttl_storage::TtlStorage`] driver on Kubernetes Leases
//! (`coordination.k8s.io/v1`), so a service that already runs on
//! Kubernetes gets elections with fencing tokens, the killer, hand-over
//! and `vvm-host` without another database.
//!
//! ```no_run
//! use storage_kube::KubeStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // In a pod: its service account; elsewhere: the kubeconfig.
//! let storage = KubeStorage::from_url("kube://default").await?;
//! let key = Key::new("my-service-leader")?;
//! if storage.insert_if_not_exists(&key, b"pod-7", Ttl::from_secs(20)?).await? {
//!     // we lead for 20 s unless we renew
//!     storage.compare_and_swap(&key, b"pod-7", b"pod-7", Ttl::from_secs(20)?).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! ## One Lease per key
//!
//! A key that is a valid Lease name (`my-service-leader`) is the Lease's
//! name; any other key (`leader/cluster-1`) is escaped to one (see
//! [`KubeStorage::lease_name`]; readable part and a hash). The Lease
//! carries the key and the value (base64) in annotations
//! (`ttl-storage.io/key`, `ttl-storage.io/value`); a Lease found under a
//! key's name that holds another key is a permanent error, never shared.
//! Values are limited to [`MAX_VALUE_LEN`] (180 KiB: the API server allows
//! 256 KiB of annotations per object).
//!
//! ## Guarantees
//!
//! Every operation reads the Lease and then makes **one** write that the
//! API server applies only if the Lease is still at the `resourceVersion`
//! read (its optimistic concurrency, linearizable through etcd); a write
//! that meets a newer version (`409`) changes nothing, and the operation
//! reads and decides again (at most 16 times, then a transient error):
//!
//! | operation | write | applied only if |
//! |---|---|---|
//! | `insert_if_not_exists` | `create` (name free) or `replace` (expired or released record) | the name is free / the version read |
//! | `compare_and_swap` | `replace` | the version read, which held `old`, live |
//! | `compare_and_delete` | `delete` with `preconditions.resourceVersion` and `uid` | the version read, which held the value, live |
//! | `get` | none (a `GET`) | |
//!
//! - **No late write lands.** A write carries the version it read, so one
//!   delayed on the way (a retried renewal's first attempt) can apply only
//!   if nothing was written since its read: it never replaces a later
//!   write, and never shortens one.
//! - **Expiry** is decided by each reader by observed time (below); an
//!   expired record is invisible to that reader's every operation, and its
//!   next insert replaces it.
//! - **Watch**: a standby's [`ttl_storage::TtlStorage::watch`] reads the Lease and
//!   watches its name from that `resourceVersion` (the Lease watch API):
//!   it wakes on the Lease's deletion, on a write that leaves no live
//!   record, and at the record's expiry as last seen. The feed of writes
//!   ([`ttl_storage::TtlStorage::changes`]) is not implemented: observers poll.
//! - **Fencing**: elections keep their token counter in a Lease of its own
//!   (a record that never expires, advanced by compare-and-swap);
//!   [`fence::KubeFence`] keeps fenced registers and logs in Leases.
//! - **Errors**: `409` and `404` are handled; `429` is transient; a `5xx`
//!   or an answer lost after a write was sent (the request timeout, a
//!   dropped connection) is
//!   [`OutcomeUnknown`](ttl_storage::ErrorKind::OutcomeUnknown) for a
//!   write (a `504` is sent while the write may still be applied) and
//!   transient for a read; a connection that could not be opened is
//!   transient; `401`, `403`, `422` and bad configurations are
//!   [`Permanent`](ttl_storage::ErrorKind::Permanent). kube's own retries
//!   are off: a retried write that had been applied would meet its own
//!   version and be taken for another writer's.
//!
//! ## Which clock decides expiry: each reader's, by observed time
//!
//! The API server never expires a Lease, and comparing wall clocks across
//! machines would make every contender's clock step a risk. So expiry is
//! **observed**, as client-go's elector and the DynamoDB driver's
//! `observed_lease` mode do it: a Lease's `resourceVersion` changes with
//! every write (a renewal writes a new `renewTime`), and a storage takes a
//! record as expired once it has seen the **same version** for a whole
//! `leaseDurationSeconds` on its own monotonic clock, counted from when
//! the answer showing that version arrived (after the write was applied;
//! for its own write, from just before sending). A takeover is a write at
//! the version watched expire, so a renewal that lands first makes it fail
//! (`409`). Only clock *rates* matter (the elections' 20 % margin), never
//! offsets or steps. The cost: a storage that first looks at a record
//! late waits a full lease from that look (a takeover can take up to two
//! TTLs after the holder's last renewal for a process that just started),
//! and two storages may disagree about an expiring record in `get`.
//! `renewTime` is still written (the writer's wall clock, rounded up to
//! the microsecond) for client-go and for people reading the Lease.
//!
//! ## Interoperation with client-go
//!
//! A Lease held by a client-go elector (`leaderelection.LeaseLock`) under
//! a key's name is a live record holding its `holderIdentity`, expiring
//! once unchanged for `leaseDurationSeconds`; an empty `holderIdentity`
//! (client-go's release) is no record. Our records are Leases client-go
//! reads as held: `holderIdentity` is never empty (the value when it is
//! short printable text), `leaseDurationSeconds` is the TTL (`i32::MAX`
//! for `Ttl::NEVER`), and every renewal writes a new `renewTime`, which is
//! the change client-go's observed-time rule waits for: both sides count
//! the same way.
//!
//! ## Configuration
//!
//! See [`KubeConfig::from_url`]. The identity needs `get`, `list`,
//! `watch`, `create`, `update` and `delete` on `leases` in the namespace
//! (a `Role` and a `RoleBinding`; `vvm-host`'s README has one).

mod client;
mod config;
mod driver;
mod error;
pub mod fence;
mod names;
mod record;
mod sightings;
mod storage;
mod watch;

pub use config::{ConfigError, KubeConfig, Source};
pub use record::MAX_VALUE_LEN;
pub use storage::KubeStorage;

/// This driver, for registries such as `storage-url`: the URL is parsed
/// once, and the parsed configuration is what gets opened.
///
/// ```
/// let parsed = (storage_kube::DRIVER.parse)("kube://default?server=https://127.0.0.1:6443")?;
/// assert_eq!((storage_kube::DRIVER.endpoint)(&parsed).as_deref(), Some("127.0.0.1:6443"));
/// # Ok::<(), ttl_storage::BoxError>(())
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<KubeConfig>(
    "kube",
    &["kube"],
    "kube://NAMESPACE[?kubeconfig=PATH&context=NAME | ?server=https://HOST:PORT&ca_file=PATH&token_file=PATH] (Kubernetes Leases)",
    None,
)
.with_fence::<KubeConfig>();
