//! The calls a forwarder runs, by request id, for cancellation by id.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

use crate::address::MemberAddress;
use crate::ids::RequestId;

/// Shards of the in-flight map: forwarded calls register and unregister on
/// every request, so one lock would be contended by every worker thread.
const IN_FLIGHT_SHARDS: usize = 16;

/// FNV-1a: request ids are minted here from a CSPRNG (or chosen by trusted
/// in-process callers), so a cheap hash is enough; network input only
/// looks ids up.
#[derive(Clone, Copy, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

/// The calls this forwarder runs, by request id, with the pod address.
pub(super) struct InFlightCalls {
    shards: Vec<Mutex<HashMap<RequestId, MemberAddress, FnvBuild>>>,
    hasher: FnvBuild,
}

impl InFlightCalls {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..IN_FLIGHT_SHARDS).map(|_| Mutex::default()).collect(),
            hasher: FnvBuild::default(),
        }
    }

    fn shard(
        &self,
        id: &RequestId,
    ) -> std::sync::MutexGuard<'_, HashMap<RequestId, MemberAddress, FnvBuild>> {
        let index = (self.hasher.hash_one(id) as usize) % self.shards.len();
        self.shards[index].lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn insert(&self, id: RequestId, address: MemberAddress) {
        self.shard(&id).insert(id, address);
    }

    pub(super) fn get(&self, id: &RequestId) -> Option<MemberAddress> {
        self.shard(id).get(id).cloned()
    }

    pub(super) fn remove(&self, id: &RequestId) {
        self.shard(id).remove(id);
    }
}
