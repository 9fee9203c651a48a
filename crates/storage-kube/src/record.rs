//! What a Lease holds, as this driver reads it, and the Lease it writes.
//!
//! A record's Lease: the value in the [`VALUE`] annotation (base64), the
//! key in [`KEY`], and the fields client-go reads: `holderIdentity` (the
//! value when it is short printable text, else `ttl-storage:` and a hash),
//! `renewTime` (the writer's wall clock, read just before the request is
//! sent, rounded up to the microsecond: for client-go and for people; no
//! decision here reads it), `leaseDurationSeconds` (the TTL;
//! [`i32::MAX`] for a record that never expires, which also carries
//! [`NEVER`]), `acquireTime` and `leaseTransitions` (set when the holder
//! changes).
//!
//! A Lease without the [`VALUE`] annotation was written by someone else
//! (a client-go elector): its value is its `holderIdentity`, and it is
//! released when that is empty (client-go's release).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant, SystemTime},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use sha2::{Digest, Sha256};
use ttl_storage::{Entry, Key, Result, StorageError, TimeLeft, Ttl, ValidationError};

use crate::names::{FENCE, KEY, NEVER, VALUE};

/// The longest value this driver stores: its base64 form and the other
/// annotations stay under the API server's 256 KiB limit on a Lease's
/// annotations.
pub const MAX_VALUE_LEN: usize = 180 * 1024;

/// The longest `holderIdentity` that shows the value itself.
const READABLE_HOLDER: usize = 128;

/// A record's Lease as read: its value and its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The value (a foreign Lease's `holderIdentity`).
    pub(crate) value: Vec<u8>,
    /// `leaseDurationSeconds`, `None` for a record that never expires.
    pub(crate) lease: Option<Duration>,
}

impl Record {
    /// The record as an [`Entry`] read at `now`, live until `until`
    /// (`None`: never).
    pub(crate) fn entry(self, until: Option<Instant>, now: Instant) -> Entry {
        let time_left = match until {
            None => TimeLeft::Never,
            Some(until) => TimeLeft::About(until.saturating_duration_since(now)),
        };
        Entry {
            value: self.value,
            time_left,
        }
    }
}

/// The record `lease` holds for `key`: `None` when it is released (a
/// foreign Lease with no holder); an error when the Lease is another
/// key's or a fence's (a name clash) or cannot be read.
pub(crate) fn read(lease: &Lease, key: &Key) -> Result<Option<Record>> {
    let annotations = lease.metadata.annotations.as_ref();
    let annotation = |name: &str| annotations.and_then(|a| a.get(name));
    if let Some(resource) = annotation(FENCE) {
        return Err(clash(lease, key, &format!("the fence of {resource:?}")));
    }
    let spec = lease.spec.as_ref();
    let value = match annotation(VALUE) {
        Some(encoded) => {
            match annotation(KEY) {
                Some(owner) if owner == key.as_str() => {}
                Some(owner) => return Err(clash(lease, key, &format!("key {owner:?}"))),
                None => return Err(clash(lease, key, "a record without its key")),
            }
            STANDARD.decode(encoded).map_err(|err| {
                StorageError::with_source(
                    ttl_storage::ErrorKind::Permanent,
                    format!("Lease {}: its value is not base64", name(lease)),
                    err,
                )
            })?
        }
        None => match spec.and_then(|s| s.holder_identity.as_deref()) {
            Some(holder) if !holder.is_empty() => holder.as_bytes().to_vec(),
            // Released, or never held.
            _ => return Ok(None),
        },
    };
    let lease = if annotation(NEVER).is_some() {
        None
    } else {
        // No duration: a Lease that does not say how long it lasts is
        // never taken over (an operator deletes it).
        spec.and_then(|s| s.lease_duration_seconds)
            .map(|secs| Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
    };
    Ok(Some(Record { value, lease }))
}

fn name(lease: &Lease) -> &str {
    lease.metadata.name.as_deref().unwrap_or("?")
}

fn clash(lease: &Lease, key: &Key, holds: &str) -> StorageError {
    StorageError::permanent(format!(
        "Lease {} is {holds}, not key {:?}: two names meet at one Lease (rename one)",
        name(lease),
        key.as_str()
    ))
}

/// Refuses values this driver cannot store ([`MAX_VALUE_LEN`], below the
/// contract's limit).
pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    ttl_storage::check_value(value)?;
    if value.len() > MAX_VALUE_LEN {
        return Err(ValidationError::ValueTooLong {
            len: value.len(),
            max: MAX_VALUE_LEN,
        }
        .into());
    }
    Ok(())
}

/// The writer's wall clock now, rounded up to the microsecond (the
/// precision of `renewTime`), so that the stored instant is never before
/// the call started.
pub(crate) fn now_micros() -> Result<Timestamp> {
    let now = Timestamp::try_from(SystemTime::now()).map_err(|err| {
        StorageError::with_source(
            ttl_storage::ErrorKind::Transient,
            "reading the wall clock",
            err,
        )
    })?;
    let micros = now.as_microsecond() + i64::from(now.subsec_nanosecond() % 1_000 != 0);
    Timestamp::from_microsecond(micros).map_err(|err| {
        StorageError::with_source(
            ttl_storage::ErrorKind::Transient,
            "reading the wall clock",
            err,
        )
    })
}

/// What a write puts in a record's Lease.
pub(crate) struct Write<'a> {
    pub(crate) key: &'a Key,
    pub(crate) value: &'a [u8],
    pub(crate) ttl: Ttl,
    /// The writer's clock, read just before sending.
    pub(crate) now: Timestamp,
}

/// The Lease `write` makes from `base` (the Lease it replaces, with its
/// `resourceVersion`, or a new one named `name`). The holder changes
/// (`acquireTime` now, `leaseTransitions` one more) unless `base` is live
/// with the same value.
pub(crate) fn lease(
    base: Option<&Lease>,
    name: &str,
    write: &Write<'_>,
    same_holder: bool,
) -> Lease {
    let mut lease = base.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(KEY.to_owned(), write.key.as_str().to_owned());
    annotations.insert(VALUE.to_owned(), STANDARD.encode(write.value));
    if write.ttl.is_never() {
        annotations.insert(NEVER.to_owned(), "true".to_owned());
    } else {
        annotations.remove(NEVER);
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let now = MicroTime(write.now);
    if !same_holder || spec.acquire_time.is_none() {
        spec.acquire_time = Some(now.clone());
        if base.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        } else {
            spec.lease_transitions = Some(0);
        }
    }
    spec.holder_identity = Some(holder_identity(write.value));
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(match write.ttl.duration() {
        Some(ttl) => i32::try_from(ttl.as_secs()).unwrap_or(i32::MAX),
        None => i32::MAX,
    });
    lease
}

/// The `holderIdentity` of a record holding `value`: the value itself
/// when it is non-empty printable text of at most 128 bytes, otherwise
/// `ttl-storage:` and 16 hex digits of its SHA-256. Never empty (an empty
/// holder means "released" to client-go).
pub(crate) fn holder_identity(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(text)
            if !text.is_empty()
                && text.len() <= READABLE_HOLDER
                && !text.chars().any(char::is_control) =>
        {
            text.to_owned()
        }
        _ => {
            let digest = Sha256::digest(value);
            let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("ttl-storage:{hash}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    fn written(value: &[u8], ttl: Ttl) -> Lease {
        let k = key("k");
        let write = Write {
            key: &k,
            value,
            ttl,
            now: now_micros().unwrap(),
        };
        lease(None, "k", &write, false)
    }

    #[test]
    fn a_written_record_reads_back_with_its_ttl() {
        let lease = written(b"\0v\xff", Ttl::from_secs(10).unwrap());
        let record = read(&lease, &key("k")).unwrap().unwrap();
        assert_eq!(record.value, b"\0v\xff");
        assert_eq!(record.lease, Some(Duration::from_secs(10)));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.lease_duration_seconds, Some(10));
        assert!(spec.holder_identity.unwrap().starts_with("ttl-storage:"));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn never_expiring_records_look_held_for_ever_to_client_go_too() {
        let lease = written(b"v", Ttl::NEVER);
        let record = read(&lease, &key("k")).unwrap().unwrap();
        assert_eq!(record.lease, None);
        assert_eq!(lease.spec.unwrap().lease_duration_seconds, Some(i32::MAX));
    }

    #[test]
    fn a_foreign_lease_holds_its_holder_identity_and_is_released_when_empty() {
        let mut lease = Lease::default();
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some("pod-a".into());
        spec.lease_duration_seconds = Some(15);
        spec.renew_time = Some(MicroTime(now_micros().unwrap()));
        let record = read(&lease, &key("k")).unwrap().unwrap();
        assert_eq!(record.value, b"pod-a");
        assert_eq!(record.lease, Some(Duration::from_secs(15)));
        lease.spec.as_mut().unwrap().holder_identity = Some(String::new());
        assert_eq!(read(&lease, &key("k")).unwrap(), None);
        // No leaseDurationSeconds: never taken over.
        let mut lease = Lease::default();
        lease
            .spec
            .get_or_insert_with(LeaseSpec::default)
            .holder_identity = Some("x".into());
        assert_eq!(read(&lease, &key("k")).unwrap().unwrap().lease, None);
    }

    #[test]
    fn another_keys_lease_is_a_clash_not_a_record() {
        let lease = written(b"v", Ttl::from_secs(10).unwrap());
        let err = read(&lease, &key("other")).unwrap_err();
        assert_eq!(err.kind(), ttl_storage::ErrorKind::Permanent);
        assert!(err.to_string().contains("two names meet"), "{err}");
    }

    #[test]
    fn holder_identities() {
        assert_eq!(holder_identity(b"node-1"), "node-1");
        assert!(holder_identity(b"").starts_with("ttl-storage:"));
        assert!(holder_identity(b"a\nb").starts_with("ttl-storage:"));
        assert!(holder_identity(&[b'a'; 129]).starts_with("ttl-storage:"));
        assert_ne!(holder_identity(b""), holder_identity(b"\0"));
    }

    #[test]
    fn the_clock_is_rounded_up_to_the_microsecond() {
        let now = SystemTime::now();
        let stamp = SystemTime::from(now_micros().unwrap());
        assert!(stamp >= now);
        assert_eq!(now_micros().unwrap().subsec_nanosecond() % 1_000, 0);
    }

    #[test]
    fn values_over_the_drivers_limit_are_refused() {
        assert!(check_value(&vec![0; MAX_VALUE_LEN]).is_ok());
        let err = check_value(&vec![0; MAX_VALUE_LEN + 1]).unwrap_err();
        assert!(matches!(
            err,
            StorageError::Invalid(ValidationError::ValueTooLong { .. })
        ));
    }
}
