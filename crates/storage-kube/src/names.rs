//! Lease names: how a key (or a fence's resource) names its Lease, and the
//! annotations that say which key a Lease holds.
//!
//! A key that is already a valid Lease name (a DNS-1123 subdomain: at most
//! 253 lowercase letters, digits, `-` and `.`, each dot-separated label
//! starting and ending with a letter or digit) names its Lease **as is**,
//! so a Lease a client-go elector holds under that name is the same record
//! (see the crate's interoperation notes). Any other key is escaped: its
//! letters and digits lowercased, every other character a `-`, cut to 200
//! bytes, then `-` and 16 hex digits of the key's SHA-256
//! (`leader/Cluster_1` becomes `leader-cluster-1-` and the hash). A fence's
//! resource is always escaped that way, under `fence-`.
//!
//! Two keys can still meet at one name (a verbatim key that looks like
//! another key's escaped name, or a 64-bit hash collision). It never goes
//! unnoticed: every Lease this driver writes carries its key (or fence
//! resource) in an annotation, and an operation that finds another key's
//! Lease under its name fails with a permanent error naming both, and
//! writes nothing.

use sha2::{Digest, Sha256};

/// The annotation that holds the key a record's Lease stands for.
pub(crate) const KEY: &str = "ttl-storage.io/key";
/// The annotation that holds the record's value, base64 (standard, padded).
pub(crate) const VALUE: &str = "ttl-storage.io/value";
/// The annotation that marks a record written with `Ttl::NEVER`.
pub(crate) const NEVER: &str = "ttl-storage.io/never";
/// The annotation that holds the resource a fence's Lease stands for.
pub(crate) const FENCE: &str = "ttl-storage.io/fence";

/// The longest readable part of an escaped name.
const READABLE: usize = 200;

/// True when `name` is a DNS-1123 subdomain, as Kubernetes validates the
/// name of a Lease.
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    is_alnum(*first)
                        && is_alnum(*last)
                        && bytes.iter().all(|b| is_alnum(*b) || *b == b'-')
                }
                _ => false,
            }
        })
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// The Lease name of the record under `key`.
pub(crate) fn record_name(key: &str) -> String {
    if is_valid_name(key) {
        key.to_owned()
    } else {
        escaped("", key, key.as_bytes())
    }
}

/// The Lease name of the fence of `resource`.
pub(crate) fn fence_name(resource: &str) -> String {
    let mut hashed = b"fence\0".to_vec();
    hashed.extend_from_slice(resource.as_bytes());
    escaped("fence-", resource, &hashed)
}

/// `prefix`, the readable part of `text`, `-` and 16 hex digits of the
/// SHA-256 of `hashed`.
fn escaped(prefix: &str, text: &str, hashed: &[u8]) -> String {
    let mut readable: String = text
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(READABLE)
        .collect();
    while readable.ends_with('-') {
        readable.pop();
    }
    let readable = readable.trim_start_matches('-');
    let digest = Sha256::digest(hashed);
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    match (prefix, readable) {
        ("", "") => format!("k-{hash}"),
        (prefix, "") => format!("{prefix}{hash}"),
        (prefix, readable) => format!("{prefix}{readable}-{hash}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept_as_they_are() {
        for key in ["leader", "my-controller", "kube-system.lock", "a", "0"] {
            assert_eq!(record_name(key), key);
        }
    }

    #[test]
    fn other_keys_are_escaped_valid_and_distinct() {
        let keys = [
            "leader/cluster-1",
            "Leader",
            "leader/Cluster_1",
            "leader/cluster_1",
            "-x",
            "x-",
            "a..b",
            "",
            "/",
            "é",
            &"x/".repeat(256),
        ];
        let mut names = std::collections::HashSet::new();
        for key in keys {
            let name = record_name(key);
            assert!(is_valid_name(&name), "{key:?} -> {name:?}");
            assert!(name.len() <= 253, "{name}");
            assert!(names.insert(name.clone()), "{key:?} -> {name:?} twice");
        }
        assert!(record_name("leader/cluster-1").starts_with("leader-cluster-1-"));
        assert_eq!(record_name("Leader"), record_name("Leader"));
    }

    #[test]
    fn fence_names_never_equal_the_records_of_the_same_text() {
        for text in ["r", "leader", "leader/cluster-1", ""] {
            let name = fence_name(text);
            assert!(is_valid_name(&name), "{name}");
            assert!(name.starts_with("fence-"), "{name}");
            assert_ne!(name, record_name(text));
        }
    }

    #[test]
    fn name_rules() {
        for bad in [
            "",
            "A",
            "a_b",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            &"a".repeat(254),
        ] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
        assert!(is_valid_name(&"a".repeat(253)));
        assert!(is_valid_name("a-b.c-d.0"));
    }
}
