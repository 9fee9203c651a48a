//! What Valkey holds about members and locks, parsed and validated.

use std::collections::BTreeMap;

use crate::address::MemberAddress;
use crate::address_policy::AddressPolicy;
use crate::ids::{DestinationId, LockId, MemberId};

/// A live member as read from `P:member:<id>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member id.
    pub id: MemberId,
    /// Where to forward calls for this member.
    pub address: MemberAddress,
    /// The last load the member published (0 if it published none or garbage).
    pub load: i64,
}

impl MemberRecord {
    /// Builds a record from raw Valkey strings; `None` when the id or the
    /// address is invalid or outside `policy` (such a member is never
    /// forwarded to).
    pub(crate) fn from_raw(
        id: &str,
        address: &str,
        load: &str,
        policy: &AddressPolicy,
    ) -> Option<Self> {
        let Ok(id) = MemberId::new(id) else {
            tracing::warn!(member = ?id, "ignoring member with an invalid id");
            return None;
        };
        let address = match MemberAddress::parse(address) {
            Ok(a) => a,
            Err(err) => {
                tracing::warn!(member = %id, %err, "ignoring member with an invalid address");
                return None;
            }
        };
        if let Err(reason) = policy.check(&address) {
            tracing::warn!(member = %id, %address, reason, "ignoring member outside the address policy");
            return None;
        }
        Some(Self {
            id,
            address,
            load: parse_load(load),
        })
    }
}

/// Parses a `load` field: an integer, or a number the Node library wrote as a
/// float; anything else counts as 0.
pub(crate) fn parse_load(raw: &str) -> i64 {
    raw.parse::<i64>()
        .ok()
        .or_else(|| raw.parse::<f64>().ok().map(|f| f as i64))
        .unwrap_or(0)
}

/// A live member `id` at a loopback address with `load`, for unit tests.
#[cfg(test)]
pub(crate) fn test_member(id: &str, load: i64) -> MemberRecord {
    MemberRecord {
        id: MemberId::new(id).unwrap(),
        address: MemberAddress::parse("http://127.0.0.1:1").unwrap(),
        load,
    }
}

/// A lock record `P:lock:<lockId>` together with its owner's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
    /// The lock id.
    pub lock_id: LockId,
    /// The member that minted the lock (`podId`).
    pub owner: MemberId,
    /// The destination the lock belongs to (`destinationId`), if valid.
    pub destination: Option<DestinationId>,
    /// The owner's live record, or `None` when the owner is dead: the
    /// pinned resource is gone and the caller must retry at request level.
    pub owner_record: Option<MemberRecord>,
    /// Every other field of the lock hash.
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_parsing_tolerates_node_numbers() {
        assert_eq!(parse_load("12"), 12);
        assert_eq!(parse_load("3.7"), 3);
        assert_eq!(parse_load("x"), 0);
    }
}
