//! [`KubeStorage`]: the four operations on Leases, each a read and one
//! write conditioned on the `resourceVersion` it read.

use std::{future::Future, time::Instant};

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{DeleteParams, PostParams, Preconditions},
    core::Status,
};
use ttl_storage::{
    Entry, Key, Result, StorageError, Ttl, TtlStorage, Watch, WatchUnsupported, kit::Op,
};

use crate::{
    KubeConfig,
    client::client,
    error::{storage_error, timed_out},
    names::record_name,
    record::{self, Write},
    sightings::{Sightings, live_until},
};

/// How many times an operation reads again after its write met a newer
/// `resourceVersion` (another writer got in between) before it gives up
/// with a transient error.
const MAX_ROUNDS: usize = 16;

/// A [`TtlStorage`] on the Leases of one Kubernetes namespace.
///
/// Every write is a `create`, `replace` or `delete` of one Lease,
/// conditioned by the API server on the `resourceVersion` the operation
/// read (a `create` on the name being free): a write that meets a newer
/// version changes nothing (`409`), and the operation reads again and
/// decides again. See the crate's documentation for the guarantees and
/// the clock assumption.
#[derive(Clone)]
pub struct KubeStorage {
    pub(crate) api: Api<Lease>,
    config: KubeConfig,
    /// When this storage first saw each version of each Lease.
    pub(crate) sightings: Sightings,
}

impl std::fmt::Debug for KubeStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStorage")
            .field("namespace", &self.config.namespace)
            .finish_non_exhaustive()
    }
}

/// What a write request answered that the operations handle: the name
/// was taken or the version moved on (`409`), or the Lease is gone (`404`).
pub(crate) enum Refused {
    /// `409`.
    Conflict,
    /// `404`.
    NotFound,
}

impl KubeStorage {
    /// Connects with `config` and checks that this identity may list the
    /// namespace's Leases (a wrong token or a missing role is a permanent
    /// error here, not at the first election).
    ///
    /// # Errors
    ///
    /// [`ttl_storage::ErrorKind::Permanent`] for credentials, a kubeconfig
    /// or a server that cannot be used (an `http://` server: this driver
    /// talks TLS only) and refusals; transient when the API server cannot
    /// be reached.
    pub async fn connect(config: KubeConfig) -> Result<Self> {
        let client = client(&config).await?;
        let storage = KubeStorage {
            api: Api::namespaced(client, &config.namespace),
            config,
            sightings: Sightings::default(),
        };
        let list = kube::api::ListParams::default().limit(1);
        storage
            .call(Op::Read, "listing Leases", storage.api.list_metadata(&list))
            .await?
            .map_err(|_| StorageError::permanent("listing Leases: not found"))?;
        Ok(storage)
    }

    /// Connects to the URL's API server ([`KubeConfig::from_url`]).
    ///
    /// # Errors
    ///
    /// A bad URL is permanent; otherwise as [`KubeStorage::connect`].
    pub async fn from_url(url: &str) -> Result<Self> {
        let config = KubeConfig::from_url(url).map_err(|err| {
            StorageError::with_source(ttl_storage::ErrorKind::Permanent, "bad kube:// URL", err)
        })?;
        Self::connect(config).await
    }

    /// The configuration it was connected with.
    pub fn config(&self) -> &KubeConfig {
        &self.config
    }

    /// The name of the Lease that holds `key` (see the crate docs).
    pub fn lease_name(&self, key: &Key) -> String {
        record_name(key.as_str())
    }

    /// Runs one request within the request timeout; `409` and `404` are
    /// answers ([`Refused`]), any other failure an error.
    pub(crate) async fn call<T>(
        &self,
        op: Op,
        what: &str,
        request: impl Future<Output = std::result::Result<T, kube::Error>>,
    ) -> Result<std::result::Result<T, Refused>> {
        let timeout = self.config.request_timeout();
        match tokio::time::timeout(timeout, request).await {
            Ok(Ok(answer)) => Ok(Ok(answer)),
            Ok(Err(kube::Error::Api(status))) if refused(&status).is_some() => {
                Ok(Err(refused(&status).unwrap_or(Refused::Conflict)))
            }
            Ok(Err(err)) => Err(storage_error(err, op, what)),
            Err(_) => Err(timed_out(op, what, timeout)),
        }
    }

    /// The Lease named `name`, `None` if there is none.
    pub(crate) async fn read_lease(&self, name: &str) -> Result<Option<Lease>> {
        let what = format!("GET Lease {name}");
        let lease = self.call(Op::Read, &what, self.api.get(name)).await?.ok();
        if lease.is_none() {
            self.sightings.forget(name);
        }
        Ok(lease)
    }

    /// Creates `lease`: `Ok(false)` if the name is taken.
    pub(crate) async fn create(&self, lease: &Lease) -> Result<bool> {
        let name = lease.metadata.name.as_deref().unwrap_or("?");
        let what = format!("POST Lease {name}");
        let pp = PostParams::default();
        let sent = Instant::now();
        let written = self
            .call(Op::Write, &what, self.api.create(&pp, lease))
            .await?;
        Ok(self.wrote(name, written.ok(), sent))
    }

    /// Replaces the Lease with `lease` if it is still at `lease`'s
    /// `resourceVersion`: `Ok(false)` if it moved on or is gone.
    pub(crate) async fn replace(&self, lease: &Lease) -> Result<bool> {
        let name = lease.metadata.name.as_deref().unwrap_or("?");
        let what = format!("PUT Lease {name}");
        let pp = PostParams::default();
        let sent = Instant::now();
        let written = self
            .call(Op::Write, &what, self.api.replace(name, &pp, lease))
            .await?;
        Ok(self.wrote(name, written.ok(), sent))
    }

    /// Notes this storage's own write of `name` (sent at `sent`), if it
    /// was applied: its lease counts from the send.
    fn wrote(&self, name: &str, written: Option<Lease>, sent: Instant) -> bool {
        let Some(written) = written else {
            return false;
        };
        if let Some(version) = written.metadata.resource_version.as_deref() {
            self.sightings.wrote(name, version, sent);
        }
        true
    }

    /// Deletes the Lease if it is still at `lease`'s `resourceVersion`:
    /// `Ok(false)` if it moved on or is gone.
    pub(crate) async fn delete(&self, lease: &Lease) -> Result<bool> {
        let name = lease.metadata.name.as_deref().unwrap_or("?");
        let what = format!("DELETE Lease {name}");
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: lease.metadata.resource_version.clone(),
                uid: lease.metadata.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        let deleted = self
            .call(Op::Write, &what, self.api.delete(name, &dp))
            .await?
            .is_ok();
        if deleted {
            self.sightings.forget(name);
        }
        Ok(deleted)
    }

    /// The Lease of `key` and the live record it holds, read after the
    /// answer arrived.
    async fn live(&self, key: &Key) -> Result<(Option<Lease>, Option<Live>)> {
        let lease = self.read_lease(&record_name(key.as_str())).await?;
        let live = match &lease {
            Some(lease) => self.live_record(lease, key, Instant::now())?,
            None => None,
        };
        Ok((lease, live))
    }

    /// The live record `lease` holds for `key` at `now` (an instant after
    /// the answer showing it arrived), if any: a version this storage has
    /// seen unchanged for a whole lease is expired (see `sightings.rs`).
    pub(crate) fn live_record(
        &self,
        lease: &Lease,
        key: &Key,
        now: Instant,
    ) -> Result<Option<Live>> {
        let Some(record) = record::read(lease, key)? else {
            return Ok(None);
        };
        let name = record_name(key.as_str());
        let version = lease.metadata.resource_version.as_deref().unwrap_or("");
        let until = live_until(self.sightings.since(&name, version, now), record.lease);
        Ok(until
            .is_none_or(|until| now < until)
            .then_some(Live { record, until }))
    }
}

fn refused(status: &Status) -> Option<Refused> {
    match status.code {
        409 => Some(Refused::Conflict),
        404 => Some(Refused::NotFound),
        _ => None,
    }
}

/// A live record and until when it is live for this storage.
pub(crate) struct Live {
    pub(crate) record: record::Record,
    /// `None`: never expires.
    pub(crate) until: Option<Instant>,
}

/// The error of an operation whose writes met a newer version
/// [`MAX_ROUNDS`] times in a row.
fn contended(what: &str, key: &Key) -> StorageError {
    StorageError::transient(format!(
        "{what} of {:?}: the Lease changed under each of {MAX_ROUNDS} attempts",
        key.as_str()
    ))
}

#[async_trait]
impl TtlStorage for KubeStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        record::check_value(value)?;
        let name = record_name(key.as_str());
        for _ in 0..MAX_ROUNDS {
            let (lease, live) = self.live(key).await?;
            if live.is_some() {
                return Ok(false);
            }
            let write = Write {
                key,
                value,
                ttl,
                now: record::now_micros()?,
            };
            let written = match &lease {
                None => {
                    self.create(&record::lease(None, &name, &write, false))
                        .await?
                }
                // Expired or released: take it over at the version read.
                Some(old) => {
                    self.replace(&record::lease(Some(old), &name, &write, false))
                        .await?
                }
            };
            if written {
                return Ok(true);
            }
        }
        Err(contended("insert", key))
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        record::check_value(new)?;
        let name = record_name(key.as_str());
        for _ in 0..MAX_ROUNDS {
            let (lease, live) = self.live(key).await?;
            let (Some(lease), Some(live)) = (lease, live) else {
                return Ok(false);
            };
            if live.record.value != old {
                return Ok(false);
            }
            let write = Write {
                key,
                value: new,
                ttl,
                now: record::now_micros()?,
            };
            let same_holder = old == new;
            if self
                .replace(&record::lease(Some(&lease), &name, &write, same_holder))
                .await?
            {
                return Ok(true);
            }
        }
        Err(contended("compare-and-swap", key))
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        for _ in 0..MAX_ROUNDS {
            let (lease, live) = self.live(key).await?;
            let (Some(lease), Some(live)) = (lease, live) else {
                return Ok(false);
            };
            if live.record.value != value {
                return Ok(false);
            }
            if self.delete(&lease).await? {
                return Ok(true);
            }
        }
        Err(contended("compare-and-delete", key))
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        Ok(self.live(key).await?.1.map(|live| live.record.value))
    }

    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        let (_, live) = self.live(key).await?;
        Ok(live.map(|live| live.record.entry(live.until, Instant::now())))
    }

    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        Ok(Box::pin(crate::watch::removed(self.clone(), key.clone())))
    }
}
