//! [`KubeFence`]: fenced registers and logs in Leases of their own.
//!
//! Each resource has one Lease (named `fence-` and the escaped resource,
//! see [`crate::KubeStorage::lease_name`]) whose annotations hold the highest token, the
//! register's value and the log. A write or an append reads the Lease,
//! compares the token, and replaces the Lease conditioned on the
//! `resourceVersion` it read (or creates it, if the name is free): the
//! comparison and the write are one atomic step of the API server, and a
//! write that meets a newer version reads again. Tokens are stored as
//! decimal text: exact up to `u64::MAX`.
//!
//! The whole register and log live in one object, so a log is bounded by
//! the API server's 256 KiB of annotations per object (base64 values):
//! an append that would pass it is refused by the server (a permanent
//! error) and changes nothing. Use the fence's log for a few thousand
//! small entries at most, or another driver.

use std::collections::BTreeMap;

use async_trait::async_trait;
use base64::{Engine, engine::general_purpose::STANDARD};
use fence::{AppendOutcome, Fence, FenceOutcome, Fenced, LogEntry, Numbering};
use k8s_openapi::{api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use ttl_storage::{Result, StorageError};

use crate::{
    KubeStorage,
    names::{FENCE, VALUE, fence_name},
};

/// The annotation that holds the highest token.
const TOKEN: &str = "ttl-storage.io/token";
/// The annotation that holds the log: a JSON array of `[seq, token, value]`.
const LOG: &str = "ttl-storage.io/log";

/// How many times a write reads again after meeting a newer version.
const MAX_ROUNDS: usize = 32;

/// The fence of a [`KubeStorage`]'s namespace.
#[derive(Debug, Clone)]
pub struct KubeFence {
    storage: KubeStorage,
}

/// One resource's state as read.
#[derive(Debug, Default)]
struct State {
    token: u64,
    value: Vec<u8>,
    log: Vec<(u64, u64, String)>,
}

impl KubeFence {
    /// The fence of the namespace `storage` works in.
    pub fn new(storage: &KubeStorage) -> Self {
        KubeFence {
            storage: storage.clone(),
        }
    }

    /// The Lease of `resource` and its state, `None` if it has none.
    async fn load(&self, resource: &str) -> Result<Option<(Lease, State)>> {
        let Some(lease) = self.storage.read_lease(&fence_name(resource)).await? else {
            return Ok(None);
        };
        let state = parse(&lease, resource)?;
        Ok(Some((lease, state)))
    }

    /// Reads, lets `change` decide (`Err(highest)`: refused), writes at
    /// the version read; again on a newer version.
    async fn update<T>(
        &self,
        resource: &str,
        token: u64,
        mut change: impl FnMut(&mut State) -> T,
    ) -> Result<Result<T, u64>> {
        let name = fence_name(resource);
        for _ in 0..MAX_ROUNDS {
            let loaded = self.load(resource).await?;
            let (base, mut state) = match loaded {
                Some((lease, state)) => (Some(lease), state),
                None => (None, State::default()),
            };
            if base.is_some() && token < state.token {
                return Ok(Err(state.token));
            }
            state.token = token;
            let answer = change(&mut state);
            let lease = render(base.as_ref(), &name, resource, &state)?;
            let written = match base {
                None => self.storage.create(&lease).await?,
                Some(_) => self.storage.replace(&lease).await?,
            };
            if written {
                return Ok(Ok(answer));
            }
        }
        Err(StorageError::transient(format!(
            "fence {resource:?}: its Lease changed under each of {MAX_ROUNDS} attempts"
        )))
    }
}

fn parse(lease: &Lease, resource: &str) -> Result<State> {
    let name = lease.metadata.name.as_deref().unwrap_or("?");
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    if annotations.get(FENCE).map(String::as_str) != Some(resource) {
        return Err(StorageError::permanent(format!(
            "Lease {name} is not the fence of {resource:?}: two names meet at one Lease"
        )));
    }
    let bad = |what: &str| StorageError::permanent(format!("fence Lease {name}: bad {what}"));
    let token = match annotations.get(TOKEN) {
        Some(t) => t.parse().map_err(|_| bad("token"))?,
        None => 0,
    };
    let value = match annotations.get(VALUE) {
        Some(v) => STANDARD.decode(v).map_err(|_| bad("value"))?,
        None => Vec::new(),
    };
    let log = match annotations.get(LOG) {
        Some(log) => serde_json::from_str(log).map_err(|_| bad("log"))?,
        None => Vec::new(),
    };
    Ok(State { token, value, log })
}

fn render(base: Option<&Lease>, name: &str, resource: &str, state: &State) -> Result<Lease> {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let log = serde_json::to_string(&state.log)
        .map_err(|err| StorageError::permanent(format!("fence {resource:?}: {err}")))?;
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(FENCE.to_owned(), resource.to_owned());
    annotations.insert(TOKEN.to_owned(), state.token.to_string());
    annotations.insert(VALUE.to_owned(), STANDARD.encode(&state.value));
    annotations.insert(LOG.to_owned(), log);
    Ok(lease)
}

#[async_trait]
impl Fence for KubeFence {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<FenceOutcome> {
        let answer = self
            .update(resource, token, |state| state.value = value.to_vec())
            .await?;
        Ok(match answer {
            Ok(()) => FenceOutcome::Accepted,
            Err(highest) => FenceOutcome::Rejected { highest },
        })
    }

    async fn read(&self, resource: &str) -> Result<Option<Fenced>> {
        Ok(self.load(resource).await?.map(|(_, state)| Fenced {
            token: state.token,
            value: state.value,
        }))
    }

    async fn append(&self, resource: &str, token: u64, value: &[u8]) -> Result<AppendOutcome> {
        let encoded = STANDARD.encode(value);
        let answer = self
            .update(resource, token, |state| {
                let seq = state.log.last().map_or(1, |(seq, _, _)| seq + 1);
                state.log.push((seq, token, encoded.clone()));
                seq
            })
            .await?;
        Ok(match answer {
            Ok(seq) => AppendOutcome::Appended { seq },
            Err(highest) => AppendOutcome::Rejected { highest },
        })
    }

    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>> {
        let Some((_, state)) = self.load(resource).await? else {
            return Ok(Vec::new());
        };
        state
            .log
            .into_iter()
            .map(|(seq, token, value)| {
                let value = STANDARD.decode(value).map_err(|_| {
                    StorageError::permanent(format!(
                        "fence {resource:?}: a log entry is not base64"
                    ))
                })?;
                Ok(LogEntry { seq, token, value })
            })
            .collect()
    }

    fn numbering(&self) -> Numbering {
        Numbering::Contiguous
    }
}

/// Opens the fence of `config`'s namespace (the table of `options` is not
/// used: fences are Leases of the namespace).
pub(crate) async fn open(
    config: crate::KubeConfig,
    options: &fence::OpenOptions,
) -> Result<fence::DynFence> {
    let _ = options;
    let storage = KubeStorage::connect(config).await?;
    Ok(std::sync::Arc::new(KubeFence::new(&storage)))
}
