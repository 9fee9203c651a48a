//! The key layout: which keys elections derives from a lease key, and the
//! namespace no lease key may enter.
//!
//! For a lease key `K` elections uses exactly these keys:
//!
//! | record | key | written by |
//! |---|---|---|
//! | the lease | `K` | the leader |
//! | the fencing counter | `__fencing__/K` ([`crate::fencing::FENCING_PREFIX`]) | each new leader |
//! | candidate slot `n` (0..16) | `__candidates__/NN/K`, `NN` two digits ([`crate::candidates::CANDIDATE_PREFIX`]) | waiting candidates |
//!
//! **Every key that starts with [`RESERVED`] (`__`) is reserved** for the
//! library's own records (these, and those of `vvm-orch`: see
//! `docs/architecture.md`, "The key layout"): no lease key may start with
//! it ([`crate::ElectionsError::ReservedKey`]). So the layout is
//! injective: a lease key never equals a record key, the record namespaces
//! (`__fencing__/`, `__candidates__/`, ...) are prefix-free, and within one
//! namespace the lease key is the suffix after a fixed-length prefix. No
//! lease key, whatever characters it holds (`/`, digits, unicode), produces
//! another lease's key or records.
//!
//! [`check`] builds every derived key of a lease key, so a key too long for
//! its longest record (a candidate slot: 18 bytes more) is refused before
//! anything is written, instead of silently having no candidates.

use ttl_storage::{Key, ValidationError};

use crate::{candidates, fencing};

/// The prefix of every key reserved for the library's records.
pub const RESERVED: &str = "__";

/// True when `key` lies in the reserved namespace (it starts with
/// [`RESERVED`]): no leadership may use it.
pub fn is_reserved(key: &Key) -> bool {
    key.as_str().starts_with(RESERVED)
}

/// Checks that every key elections derives from the lease key `key` (its
/// fencing counter and every candidate slot) is a valid key.
///
/// # Errors
///
/// The first derived key that is not valid (too long, in practice).
pub fn check(key: &Key) -> Result<(), ValidationError> {
    fencing::counter_key(key)?;
    for slot in 0..candidates::MAX_CANDIDATES {
        candidates::slot_key(key, slot)?;
    }
    Ok(())
}

/// Every key elections derives from the lease key `key`, the lease first
/// (for tests and documentation of the layout).
///
/// # Errors
///
/// As [`check`].
pub fn derived(key: &Key) -> Result<Vec<Key>, ValidationError> {
    let mut keys = vec![key.clone(), fencing::counter_key(key)?];
    for slot in 0..candidates::MAX_CANDIDATES {
        keys.push(candidates::slot_key(key, slot)?);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use ttl_storage::MAX_KEY_LEN;

    use super::*;

    /// Lease keys built to collide under a layout that appends suffixes.
    fn adversarial() -> Vec<String> {
        let mut names = vec![
            "a".to_owned(),
            "a/1".to_owned(),
            "a/1/1".to_owned(),
            "a/handover-bell".to_owned(),
            "a/handover-bell/1".to_owned(),
            "a/handover/1".to_owned(),
            "a/size".to_owned(),
            "a/".to_owned(),
            "/a".to_owned(),
            "01/a".to_owned(),
            "1/a".to_owned(),
            "_a".to_owned(),
            "fencing__/a".to_owned(),
            "candidates__/01/a".to_owned(),
            "ключ/1".to_owned(),
            "🔒/1".to_owned(),
            "a b/1".to_owned(),
        ];
        // The longest lease key the layout allows.
        let longest = MAX_KEY_LEN - "__candidates__/00/".len();
        names.push("x".repeat(longest));
        names.push(format!("{}é", "y".repeat(longest - 2)));
        names
    }

    #[test]
    fn no_two_lease_keys_share_a_key_and_records_never_look_like_leases() {
        let mut owner: HashMap<Key, String> = HashMap::new();
        for name in adversarial() {
            let key = Key::new(name.clone()).unwrap();
            assert!(!is_reserved(&key), "{name}");
            for (i, derived) in derived(&key).unwrap().into_iter().enumerate() {
                if i > 0 {
                    assert!(is_reserved(&derived), "{derived} is not reserved");
                }
                if let Some(other) = owner.insert(derived.clone(), name.clone()) {
                    panic!("{derived} belongs to both {other:?} and {name:?}");
                }
            }
        }
    }

    #[test]
    fn a_key_too_long_for_its_records_is_refused_up_front() {
        let longest = MAX_KEY_LEN - "__candidates__/00/".len();
        assert!(check(&Key::new("x".repeat(longest)).unwrap()).is_ok());
        let too_long = Key::new("x".repeat(longest + 1)).unwrap();
        assert!(matches!(
            check(&too_long),
            Err(ValidationError::KeyTooLong { .. })
        ));
    }

    #[test]
    fn the_record_namespaces_are_reserved_and_prefix_free() {
        let namespaces = [fencing::FENCING_PREFIX, candidates::CANDIDATE_PREFIX];
        for a in namespaces {
            assert!(a.starts_with(RESERVED) && a.ends_with('/'), "{a}");
            for b in namespaces {
                assert!(a == b || !b.starts_with(a), "{a} is a prefix of {b}");
            }
        }
    }
}
