//! The key layout of a VVM's records, beside the leases and the records
//! elections keeps ([`elections::keys`]). `docs/architecture.md` ("The key
//! layout") is the one table of every key; this module builds them.
//!
//! With key prefix `P` (`NAME/` for `vvm-host`) and index `i` in
//! `1..=cluster_size`, the lease key is `K = P{i}`, and:
//!
//! | record | key |
//! |---|---|
//! | the lease of index `i` | `P{i}` |
//! | the cluster-size claim (one per prefix) | `__vvm__/size/P` |
//! | the hand-over request of index `i` | `__vvm__/handover/K` |
//! | the hand-over bell of index `i` | `__vvm__/bell/K` |
//! | elections' fencing counter and candidate slots | `__fencing__/K`, `__candidates__/NN/K` |
//!
//! Why no name can reach another lock's keys: every record lies in the
//! reserved namespace `__` (which no lease key and no prefix may enter), the
//! record namespaces are prefix-free (each ends with `/` and none is a
//! prefix of another), and within a namespace the lease key or prefix is
//! the whole rest of the key. The lease keys themselves are injective in
//! `(P, i)` because a prefix may not end with a digit: the digits at the end
//! of `K` are exactly `i`.

use ttl_storage::{Key, ValidationError};

use crate::config::ConfigError;

/// The namespace of the VVM's own records (inside elections' reserved `__`).
pub const VVM_PREFIX: &str = "__vvm__/";

const SIZE: &str = "__vvm__/size/";
const REQUEST: &str = "__vvm__/handover/";
const BELL: &str = "__vvm__/bell/";

/// The lease key of index `index`: `{prefix}{index}`.
pub(crate) fn lease(prefix: &str, index: u32) -> Result<Key, ValidationError> {
    Key::new(format!("{prefix}{index}"))
}

/// The cluster-size claim of the keys of `prefix`.
pub(crate) fn size(prefix: &str) -> Result<Key, ValidationError> {
    Key::new(format!("{SIZE}{prefix}"))
}

/// The hand-over request record of lease key `lease`.
pub(crate) fn request(lease: &Key) -> Result<Key, ValidationError> {
    Key::new(format!("{REQUEST}{lease}"))
}

/// The hand-over bell of lease key `lease`.
pub(crate) fn bell(lease: &Key) -> Result<Key, ValidationError> {
    Key::new(format!("{BELL}{lease}"))
}

/// Every key of the keys `prefix` 1..=`cluster_size` makes, the leases
/// first, then per index the records, then the size claim. For tests and
/// checks.
///
/// # Errors
///
/// The first key that is not valid.
pub fn all(prefix: &str, cluster_size: u32) -> Result<Vec<Key>, ValidationError> {
    let mut keys = Vec::new();
    for index in 1..=cluster_size {
        let lease = lease(prefix, index)?;
        keys.extend(elections::keys::derived(&lease)?);
        keys.push(request(&lease)?);
        keys.push(bell(&lease)?);
    }
    keys.push(size(prefix)?);
    Ok(keys)
}

/// Checks a key prefix for `cluster_size` keys: outside the reserved
/// namespace, not ending with a digit, and every key it makes valid (the
/// largest index has the longest keys).
///
/// # Errors
///
/// [`ConfigError::ReservedKeyPrefix`], [`ConfigError::KeyPrefixEndsWithDigit`]
/// or [`ConfigError::KeyPrefix`].
pub fn check_prefix(prefix: &str, cluster_size: u32) -> Result<(), ConfigError> {
    if prefix.starts_with(elections::keys::RESERVED) {
        return Err(ConfigError::ReservedKeyPrefix(prefix.to_owned()));
    }
    if prefix.ends_with(|c: char| c.is_ascii_digit()) {
        return Err(ConfigError::KeyPrefixEndsWithDigit(prefix.to_owned()));
    }
    let invalid = |source| ConfigError::KeyPrefix {
        prefix: prefix.to_owned(),
        source,
    };
    let lease = lease(prefix, cluster_size.max(1)).map_err(invalid)?;
    elections::keys::check(&lease).map_err(invalid)?;
    request(&lease).map_err(invalid)?;
    bell(&lease).map_err(invalid)?;
    size(prefix).map_err(invalid)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;
    use crate::MAX_CLUSTER_SIZE;

    /// Lock names (prefix `NAME/`) built to collide under the old layout
    /// (`NAME/handover/i`, `NAME/handover-bell/i`, `NAME/size`).
    fn names() -> Vec<String> {
        let mut names: Vec<String> = [
            "a",
            "a/1",
            "a/handover",
            "a/handover-bell",
            "a/handover/1",
            "a/size",
            "a/size/1",
            "web",
            "web/handover-bell",
            "b/__vvm__",
            "ключ",
            "🔒 lock",
            "a b",
        ]
        .map(str::to_owned)
        .to_vec();
        names.push(longest_name());
        names
    }

    /// The longest lock name `vvm-host` accepts with the largest cluster.
    fn longest_name() -> String {
        let mut name = "n".repeat(600);
        while check_prefix(&format!("{name}/"), MAX_CLUSTER_SIZE).is_err() {
            name.pop();
        }
        name
    }

    #[test]
    fn no_two_locks_share_a_key() {
        let mut owner: HashMap<Key, (String, u32)> = HashMap::new();
        for name in names() {
            let prefix = format!("{name}/");
            check_prefix(&prefix, 3).unwrap();
            for size in 1..=3 {
                for key in all(&prefix, size).unwrap() {
                    match owner.get(&key) {
                        // The same lock with another size shares its keys.
                        Some((other, _)) if *other == name => {}
                        Some(other) => panic!("{key} belongs to {other:?} and {name:?}"),
                        None => {
                            owner.insert(key, (name.clone(), size));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_longest_name_works_with_the_largest_cluster_and_one_more_byte_is_refused() {
        let name = longest_name();
        assert!(all(&format!("{name}/"), MAX_CLUSTER_SIZE).is_ok());
        assert!(matches!(
            check_prefix(&format!("{name}n/"), MAX_CLUSTER_SIZE),
            Err(ConfigError::KeyPrefix { .. })
        ));
    }

    #[test]
    fn prefixes_in_the_reserved_namespace_or_ending_with_a_digit_are_refused() {
        for prefix in ["__vvm__/", "__fencing__/x/", "__x"] {
            assert!(matches!(
                check_prefix(prefix, 1),
                Err(ConfigError::ReservedKeyPrefix(_))
            ));
        }
        // `a/1` with index 1 and `a/` with index 11 would share `a/11`.
        assert!(matches!(
            check_prefix("a/1", 1),
            Err(ConfigError::KeyPrefixEndsWithDigit(_))
        ));
        assert!(check_prefix("a/", 11).is_ok());
        assert!(check_prefix("a1/", 11).is_ok());
    }
}
