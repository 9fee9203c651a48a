//! The Valkey key layout, shared with the Node `@platformatic/coordinator`
//! library so Rust and Node fleets can use one Valkey.
//!
//! | key | type | TTL |
//! |---|---|---|
//! | `P:members` | set of member ids | none |
//! | `P:member:<id>` | hash `address`, `load` | member TTL, refreshed by heartbeat |
//! | `P:destination:<id>` | set of member ids | none |
//! | `P:lock:<lockId>` | hash `podId`, `destinationId`, metadata... | lock TTL, refreshed while held |
//! | `P:epoch:<id>` | integer: the destination's assignment epoch (Rust only) | none |
//!
//! `P:epoch:<id>` is added by this crate for ownership fencing (the Node
//! library neither reads nor writes it): every change of the set
//! `P:destination:<id>` made by this crate (first touch, failover, bind,
//! fan-out, a member adding or removing itself, a pruned dead member,
//! deregistration) `INCR`s it in the same script or `MULTI`, so it only
//! grows. It outlives a deleted pod set, so a destination bound again gets a
//! newer epoch than any call routed before. A set changed by a Node
//! coordinator leaves the epoch as it was.

use crate::error::{Error, Result};
use crate::ids::{DestinationId, LockId, MemberId};

/// The default key prefix `P`.
pub const DEFAULT_PREFIX: &str = "coordinator";

/// Hash field names, exactly as the Node library writes them.
pub mod fields {
    /// Member hash: the pod's dialable base URL.
    pub const ADDRESS: &str = "address";
    /// Member hash: the pod's integer load metric.
    pub const LOAD: &str = "load";
    /// Lock hash: the owning member id.
    pub const POD_ID: &str = "podId";
    /// Lock hash: the destination the lock belongs to.
    pub const DESTINATION_ID: &str = "destinationId";
}

/// Builds the keys for one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// Validates `prefix`: 1..=128 printable ASCII bytes without spaces.
    /// A hash-tag prefix such as `{coordinator}` keeps every key in one
    /// Valkey Cluster slot.
    pub fn new(prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        if prefix.is_empty() || prefix.len() > 128 {
            return Err(Error::InvalidConfig(format!(
                "key prefix must be 1..=128 bytes, got {}",
                prefix.len()
            )));
        }
        if !prefix.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::InvalidConfig(format!(
                "key prefix {prefix:?} must be printable ASCII without spaces"
            )));
        }
        Ok(Self { prefix })
    }

    /// The prefix `P`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `P:members`.
    pub fn members(&self) -> String {
        format!("{}:members", self.prefix)
    }

    /// `P:member:` (the member keys without the id).
    pub fn member_prefix(&self) -> String {
        format!("{}:member:", self.prefix)
    }

    /// `P:member:<id>`.
    pub fn member(&self, id: &MemberId) -> String {
        format!("{}:member:{id}", self.prefix)
    }

    /// `P:destination:<id>`.
    pub fn destination(&self, id: &DestinationId) -> String {
        format!("{}:destination:{id}", self.prefix)
    }

    /// `P:epoch:<id>`: the assignment epoch of destination `id`.
    pub fn epoch(&self, id: &DestinationId) -> String {
        format!("{}:epoch:{id}", self.prefix)
    }

    /// `P:lock:<lockId>`.
    pub fn lock(&self, id: &LockId) -> String {
        format!("{}:lock:{id}", self.prefix)
    }
}

impl Default for KeySpace {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_node_library() -> Result<()> {
        let k = KeySpace::default();
        assert_eq!(k.members(), "coordinator:members");
        assert_eq!(
            k.member(&MemberId::new("pod-0")?),
            "coordinator:member:pod-0"
        );
        assert_eq!(
            k.destination(&DestinationId::new("t1")?),
            "coordinator:destination:t1"
        );
        assert_eq!(k.lock(&LockId::new("abc")?), "coordinator:lock:abc");
        assert_eq!(k.epoch(&DestinationId::new("t1")?), "coordinator:epoch:t1");
        Ok(())
    }

    #[test]
    fn rejects_bad_prefixes() {
        assert!(KeySpace::new("").is_err());
        assert!(KeySpace::new("a b").is_err());
        assert!(KeySpace::new("x".repeat(129)).is_err());
        assert!(KeySpace::new("{coord}").is_ok());
    }
}
