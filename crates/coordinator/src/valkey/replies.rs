//! Parsing the scripts' replies: every reply is untrusted input, checked
//! for shape (an error, never a panic) and for valid ids and addresses.

use std::collections::BTreeMap;

use crate::address_policy::AddressPolicy;
use crate::error::{Error, Result};
use crate::ids::{DestinationId, LockId, MemberId};
use crate::keys::fields;
use crate::record::{LockRecord, MemberRecord};

/// The parsed reply of [`RESOLVE`].
pub(crate) struct ResolveReply {
    /// Size of the set before pruning.
    pub(crate) total: usize,
    /// The destination's epoch after the script (pruning bumps it).
    pub(crate) epoch: u64,
    /// Members whose record is gone.
    pub(crate) dead: Vec<String>,
    /// Members whose record is present and valid, sorted by id.
    pub(crate) live: Vec<MemberRecord>,
    /// Members whose record is present but not usable (an address outside
    /// the policy, a malformed record): never routed to by this
    /// coordinator, never removed from the set either.
    pub(crate) rejected: Vec<String>,
}

fn count(raw: Option<&String>) -> Result<usize> {
    raw.and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Protocol("script reply without a count".into()))
}

pub(crate) fn parse_triples(raw: &[String], policy: &AddressPolicy) -> Result<Vec<MemberRecord>> {
    if !raw.len().is_multiple_of(3) {
        return Err(Error::Protocol(
            "member list is not (id, address, load)".into(),
        ));
    }
    let mut out: Vec<MemberRecord> = raw
        .chunks_exact(3)
        .filter_map(|c| MemberRecord::from_raw(&c[0], &c[1], &c[2], policy))
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

pub(crate) fn parse_resolve(raw: Vec<String>, policy: &AddressPolicy) -> Result<ResolveReply> {
    let total = count(raw.first())?;
    let ndead = count(raw.get(1))?;
    let epoch = raw
        .get(2)
        .and_then(|e| e.parse::<u64>().ok())
        .ok_or_else(|| Error::Protocol("malformed epoch in resolve reply".into()))?;
    let dead_end = 3 + ndead;
    let dead = raw
        .get(3..dead_end)
        .ok_or_else(|| Error::Protocol("short resolve reply".into()))?
        .to_vec();
    let live = parse_triples(&raw[dead_end..], policy)?;
    let rejected = raw[dead_end..]
        .iter()
        .step_by(3)
        .filter(|id| !live.iter().any(|m| m.id.as_str() == id.as_str()))
        .cloned()
        .collect();
    Ok(ResolveReply {
        total,
        epoch,
        dead,
        live,
        rejected,
    })
}

pub(crate) fn parse_live_members(
    raw: Vec<String>,
    policy: &AddressPolicy,
) -> Result<(usize, Vec<MemberRecord>)> {
    let pruned = count(raw.first())?;
    Ok((pruned, parse_triples(&raw[1..], policy)?))
}

/// Parses the reply of the lock script: `[]` or
/// `[owner address or '', owner load, field, value, ...]`.
pub(crate) fn parse_lock(
    lock: &LockId,
    raw: Vec<String>,
    policy: &AddressPolicy,
) -> Result<Option<LockRecord>> {
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.len() < 2 || !raw.len().is_multiple_of(2) {
        return Err(Error::Protocol("malformed lock reply".into()));
    }
    let mut metadata: BTreeMap<String, String> = raw[2..]
        .chunks_exact(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect();
    let Some(owner) = metadata
        .remove(fields::POD_ID)
        .and_then(|p| MemberId::new(p).ok())
    else {
        tracing::warn!(lock = %lock, "lock record without a valid podId");
        return Ok(None);
    };
    let destination = metadata
        .remove(fields::DESTINATION_ID)
        .and_then(|d| DestinationId::new(d).ok());
    let owner_record = if raw[0].is_empty() {
        None
    } else {
        MemberRecord::from_raw(owner.as_str(), &raw[0], &raw[1], policy)
    };
    Ok(Some(LockRecord {
        lock_id: lock.clone(),
        owner,
        destination,
        owner_record,
        metadata,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn resolve_reply_parses() {
        let r = parse_resolve(
            s(&[
                "3",
                "1",
                "9",
                "dead",
                "b",
                "http://127.0.0.1:2",
                "4",
                "a",
                "http://127.0.0.1:1",
                "7",
            ]),
            &AddressPolicy::default(),
        )
        .unwrap();
        assert_eq!(r.total, 3);
        assert_eq!(r.epoch, 9);
        assert_eq!(r.dead, ["dead"]);
        let ids: Vec<_> = r.live.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "sorted by id");
        assert_eq!(r.live[0].load, 7);
    }

    #[test]
    fn members_with_bad_addresses_are_skipped() {
        let (_, live) = parse_live_members(
            s(&["0", "a", "ftp://x", "1", "b", "http://h:1", "2"]),
            &AddressPolicy::default(),
        )
        .unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].id.as_str(), "b");
    }

    #[test]
    fn malformed_replies_are_errors() {
        let p = AddressPolicy::default();
        assert!(parse_resolve(s(&[]), &p).is_err());
        assert!(parse_resolve(s(&["1", "5"]), &p).is_err());
        assert!(parse_live_members(s(&["0", "a", "b"]), &p).is_err());
    }

    #[test]
    fn lock_replies_parse() {
        let lock = LockId::new("l1").unwrap();
        let p = AddressPolicy::default();
        assert!(parse_lock(&lock, vec![], &p).unwrap().is_none());

        let live = parse_lock(
            &lock,
            s(&[
                "http://h:1",
                "3",
                "podId",
                "p",
                "destinationId",
                "d",
                "kind",
                "tx",
            ]),
            &p,
        )
        .unwrap()
        .unwrap();
        assert_eq!(live.owner.as_str(), "p");
        assert_eq!(live.destination.unwrap().as_str(), "d");
        assert_eq!(live.owner_record.unwrap().load, 3);
        assert_eq!(live.metadata.get("kind").map(String::as_str), Some("tx"));

        let dead = parse_lock(&lock, s(&["", "0", "podId", "p"]), &p)
            .unwrap()
            .unwrap();
        assert!(dead.owner_record.is_none());

        assert!(
            parse_lock(&lock, s(&["", "0", "kind", "tx"]), &p)
                .unwrap()
                .is_none()
        );
        assert!(parse_lock(&lock, s(&["", "0", "podId"]), &p).is_err());
    }
}
