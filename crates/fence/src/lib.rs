//! # fence
//!
//! A fencing token protects a resource only if the resource checks it. This
//! crate is that check, for the databases the drivers already talk to: a
//! **fenced write** is applied only if its token is at least the highest
//! token the resource has seen, and the comparison and the write are one
//! atomic operation of the database (never a read followed by a write).
//!
//! Every leader gets a token that grows with each new leadership
//! ([`elections::Leadership::fencing_token`], or `VVM_HOST_FENCING_TOKEN`
//! under `vvm-host`). A deposed leader that wakes from a pause and writes
//! with its old token is refused, whatever the timing.
//!
//! | engine | type | atomic check | feature |
//! |---|---|---|---|
//! | Cassandra / ScyllaDB | [`CassandraFence`] | lightweight transaction `UPDATE … IF fence <= ?` (Paxos, SERIAL) | `cassandra` |
//! | DynamoDB | [`DynamoFence`] | `UpdateItem` with `ConditionExpression: attribute_not_exists(fence) OR fence <= :t` | `dynamodb` |
//! | PostgreSQL, Valkey / Redis, etcd | the `fence` module of `storage-postgres`, `storage-valkey`, `storage-etcd` | `INSERT … ON CONFLICT … WHERE token <= $2` / a Lua script / a transaction comparing the stored token | — |
//!
//! Each type stores a *fenced register* per resource id: the highest token
//! seen and the last value written with it. To guard your own rows, copy the
//! condition into your own statement: the column `fence` next to your data,
//! set to the token by every write, and the write's condition
//! [`CassandraFence::CONDITION`] / [`DynamoFence::CONDITION`].
//!
//! ## Fenced logs
//!
//! `append` applies the same check to an append-only log of a resource
//! (a journal of what successive leaders did, where no stale leader's
//! entry can follow a newer one's): the register's fence is checked and
//! raised, and its append counter incremented, in the same atomic step, which
//! returns the entry's sequence number (accept order, from 1); the entry
//! is then put into the log table (`<table>_log`) under that number.
//! [`CassandraFence::log`] / [`DynamoFence::log`] read it back in order.
//! If the process dies between the two steps the log has a gap at that
//! number, never a wrong or misplaced entry.
//!
//! [`elections::Leadership::fencing_token`]: https://docs.rs/elections

#[cfg(feature = "cassandra")]
mod cassandra;
#[cfg(feature = "dynamodb")]
mod dynamodb;
mod error;

#[cfg(feature = "cassandra")]
pub use cassandra::CassandraFence;
#[cfg(feature = "dynamodb")]
pub use dynamodb::DynamoFence;
pub use error::FenceError;

/// What the resource said to one fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Applied: the token was at least the highest seen (it is now the highest).
    Accepted,
    /// Refused: the resource has seen this higher token.
    Rejected {
        /// The highest token the resource has seen.
        highest_seen: u64,
    },
}

impl Verdict {
    /// True if the write was applied.
    pub fn is_accepted(self) -> bool {
        self == Verdict::Accepted
    }
}

/// What the resource said to one fenced append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendVerdict {
    /// Appended: the token was at least the highest seen.
    Appended {
        /// The entry's sequence number: its position in accept order, from 1.
        seq: u64,
    },
    /// Refused: the resource has seen this higher token.
    Rejected {
        /// The highest token the resource has seen.
        highest_seen: u64,
    },
}

/// One entry of a resource's fenced log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in accept order, from 1.
    pub seq: u64,
    /// The fencing token the append carried.
    pub token: u64,
    /// The appended value.
    pub value: Vec<u8>,
}

/// The register of one resource: the highest token seen and the value
/// written with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The highest token the resource has accepted.
    pub token: u64,
    /// The value written by the write that carried it.
    pub value: Vec<u8>,
}

/// Checks a table or resource name: ASCII letters, digits and `_` (and
/// for DynamoDB `-` and `.`), 1 to 48 characters (a table name at most
/// 44, so that its log table `<table>_log` fits).
#[cfg_attr(
    not(any(feature = "cassandra", feature = "dynamodb")),
    allow(dead_code)
)]
fn check_name(name: &str, extra: &[char]) -> Result<(), FenceError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || extra.contains(&c));
    if ok {
        Ok(())
    } else {
        Err(FenceError::InvalidName(name.to_owned()))
    }
}

/// A token as the signed 64-bit integer databases store.
#[cfg_attr(
    not(any(feature = "cassandra", feature = "dynamodb")),
    allow(dead_code)
)]
fn signed(token: u64) -> Result<i64, FenceError> {
    i64::try_from(token).map_err(|_| FenceError::TokenTooLarge(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("fences_1", &[]).is_ok());
        assert!(check_name("a;b", &[]).is_err());
        assert!(check_name("", &[]).is_err());
        assert!(check_name(&"x".repeat(49), &[]).is_err());
        assert!(check_name("app.fences-1", &['-', '.']).is_ok());
        assert!(check_name("app.fences", &[]).is_err());
    }

    #[test]
    fn tokens_fit_a_bigint_or_are_refused() {
        assert_eq!(signed(7).ok(), Some(7));
        assert!(matches!(
            signed(u64::MAX),
            Err(FenceError::TokenTooLarge(_))
        ));
    }
}
