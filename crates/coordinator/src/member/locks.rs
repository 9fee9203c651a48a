//! Lock records: `P:lock:<lockId>` hashes owned by the pod that minted them.

use fred::prelude::*;

use super::{Member, millis};
use crate::error::{Error, Result};
use crate::ids::{DestinationId, LockId, MemberId};
use crate::keys::fields;

/// What the pod remembers of a lock it holds, to refresh or re-create it.
#[derive(Clone, Debug)]
pub(super) struct HeldLock {
    destination: DestinationId,
    metadata: Vec<(String, String)>,
}

impl HeldLock {
    /// The hash fields: `podId`, `destinationId`, then the metadata.
    pub(super) fn fields(&self, owner: &MemberId) -> Vec<(String, String)> {
        let mut out = Vec::with_capacity(self.metadata.len() + 2);
        out.push((fields::POD_ID.to_owned(), owner.as_str().to_owned()));
        out.push((
            fields::DESTINATION_ID.to_owned(),
            self.destination.as_str().to_owned(),
        ));
        out.extend(self.metadata.iter().cloned());
        out
    }
}

fn check_metadata(metadata: &[(String, String)]) -> Result<()> {
    for (k, _) in metadata {
        if k.is_empty() || k == fields::POD_ID || k == fields::DESTINATION_ID {
            return Err(Error::InvalidConfig(format!(
                "lock metadata field {k:?} is empty or reserved"
            )));
        }
    }
    Ok(())
}

impl Member {
    /// Mints an unguessable lock id (128 random bits) for `dest`, registers
    /// it and returns it.
    pub async fn new_lock(
        &self,
        dest: &DestinationId,
        metadata: impl IntoIterator<Item = (String, String)>,
    ) -> Result<LockId> {
        let id = LockId::generate();
        self.register_lock(&id, dest, metadata).await?;
        Ok(id)
    }

    /// Writes `P:lock:<lock_id>` = {`podId`, `destinationId`, metadata...}
    /// with the lock TTL, and keeps refreshing it on every heartbeat until
    /// [`Member::unregister_lock`]. If the pod dies the record expires within
    /// the lock TTL. Use ids from [`LockId::generate`] so they stay
    /// unguessable. Fails with [`Error::LockTaken`] if another member owns
    /// `lock_id`; re-registering an own lock replaces its fields.
    pub async fn register_lock(
        &self,
        lock_id: &LockId,
        dest: &DestinationId,
        metadata: impl IntoIterator<Item = (String, String)>,
    ) -> Result<()> {
        let metadata: Vec<(String, String)> = metadata.into_iter().collect();
        check_metadata(&metadata)?;
        let held = HeldLock {
            destination: dest.clone(),
            metadata,
        };
        let i = &self.inner;
        let _gate = i.write_gate.lock().await;
        let mut args = vec![
            i.config.id.as_str().to_owned(),
            millis(i.config.lock_ttl).to_string(),
        ];
        for (k, v) in held.fields(&i.config.id) {
            args.push(k);
            args.push(v);
        }
        let (written, _): (i64, u64) = i
            .scripts
            .register_lock
            .run_counted(&i.client, i.keys.lock(lock_id), args)
            .await?;
        if written != 1 {
            return Err(Error::LockTaken(lock_id.as_str().to_owned()));
        }
        i.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(lock_id.clone(), held);
        Ok(())
    }

    /// Deletes a lock this pod holds; `false` (and no Valkey write) if this
    /// pod does not hold `lock_id`.
    pub async fn unregister_lock(&self, lock_id: &LockId) -> Result<bool> {
        let i = &self.inner;
        let _gate = i.write_gate.lock().await;
        let held = i
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(lock_id)
            .is_some();
        if held {
            let _: i64 = i.client.del(i.keys.lock(lock_id)).await?;
        }
        Ok(held)
    }

    /// Whether this pod holds `lock_id`.
    pub fn holds_lock(&self, lock_id: &LockId) -> bool {
        self.inner
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(lock_id)
    }
}
