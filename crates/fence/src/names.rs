//! What the implementations share: table names and tokens as stored, and
//! the key names of the key-value stores' fences.

use ttl_storage::{Result, StorageError};

/// Checks a keyspace or table name for an implementation: ASCII letters,
/// digits, `_` and the `extra` characters (DynamoDB allows `-` and `.`),
/// 1 to 48 characters. Check a table's log table `<name>_log` too (so a
/// table name has 44 at most).
///
/// # Errors
///
/// A permanent error naming the table.
pub fn check_name(name: &str, extra: &[char]) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || extra.contains(&c));
    if ok {
        Ok(())
    } else {
        Err(StorageError::permanent(format!(
            "invalid fence keyspace or table name {name:?}: use 1 to 48 ASCII letters, digits or _"
        )))
    }
}

/// The keys a key-value store's fence uses under a key prefix, words
/// joined by `separator` (`/` for etcd, `:` for Valkey): the highest token
/// at `<prefix>fence<sep><resource>`, the register's value at
/// `<prefix>fence-value<sep><resource>`, the log at
/// `<prefix>fence-log<sep><resource>`.
///
/// ```
/// let keys = fence::FenceKeys::new("ttl:", ':');
/// assert_eq!(keys.fence("r"), "ttl:fence:r");
/// assert_eq!(keys.value("r"), "ttl:fence-value:r");
/// assert_eq!(keys.log("r"), "ttl:fence-log:r");
/// assert_eq!(keys.prefix(), "ttl:");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceKeys {
    prefix: String,
    separator: char,
}

impl FenceKeys {
    /// The keys under `prefix`, words joined by `separator`.
    pub fn new(prefix: impl Into<String>, separator: char) -> Self {
        FenceKeys {
            prefix: prefix.into(),
            separator,
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key that holds `resource`'s highest token.
    pub fn fence(&self, resource: &str) -> String {
        self.key("fence", resource)
    }

    /// The key that holds the value of `resource`'s register.
    pub fn value(&self, resource: &str) -> String {
        self.key("fence-value", resource)
    }

    /// The key of `resource`'s log (etcd: the prefix of its entries, with
    /// a separator after it).
    pub fn log(&self, resource: &str) -> String {
        self.key("fence-log", resource)
    }

    fn key(&self, word: &str, resource: &str) -> String {
        format!("{}{word}{}{resource}", self.prefix, self.separator)
    }
}

/// A token as the signed 64-bit integer databases store, for the
/// implementations that store one.
///
/// # Errors
///
/// A permanent error for a token above `i64::MAX`: nothing is sent.
pub fn signed_token(token: u64) -> Result<i64> {
    i64::try_from(token).map_err(|_| {
        StorageError::permanent(format!(
            "fencing token {token} does not fit a signed 64-bit integer"
        ))
    })
}

#[cfg(test)]
mod tests {
    use ttl_storage::ErrorKind;

    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("fences_1", &[]).is_ok());
        assert!(check_name("a;b", &[]).is_err());
        assert!(check_name("", &[]).is_err());
        assert!(check_name(&"x".repeat(48), &[]).is_ok());
        assert!(check_name(&"x".repeat(49), &[]).is_err());
        assert!(check_name("app.fences-1", &['-', '.']).is_ok());
        assert!(check_name("app.fences", &[]).is_err());
    }

    #[test]
    fn tokens_fit_a_bigint_or_are_refused() {
        assert_eq!(signed_token(7).ok(), Some(7));
        assert_eq!(
            signed_token(u64::MAX).map_err(|e| e.kind()),
            Err(ErrorKind::Permanent)
        );
    }
}
