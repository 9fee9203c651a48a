//! Checks the implementations share: table names and tokens as stored.

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
