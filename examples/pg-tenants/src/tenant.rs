//! Tenant ids and the PostgreSQL schema each tenant gets.

use std::fmt;

use coordinator::DestinationId;

/// Longest tenant id, in bytes.
pub const MAX_TENANT_LEN: usize = 64;

/// A tenant id was malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tenant ids are 1..=64 characters of A-Z a-z 0-9 _ -")]
pub struct InvalidTenant;

/// A validated tenant id: `^[A-Za-z0-9_-]{1,64}$`.
///
/// The alphabet is a subset of the coordinator's id alphabet, so every
/// tenant id is also a valid [`DestinationId`], and it is safe inside a
/// quoted SQL identifier.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(String);

impl TenantId {
    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidTenant> {
        let id = id.into();
        let ok = (1..=MAX_TENANT_LEN).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok { Ok(Self(id)) } else { Err(InvalidTenant) }
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The coordinator destination of this tenant (the same string; never
    /// fails in practice, the tenant alphabet being a subset).
    pub fn destination(&self) -> coordinator::Result<DestinationId> {
        DestinationId::new(self.0.as_str())
    }

    /// The tenant's schema as a quoted SQL identifier, e.g. `"t_acme"`.
    ///
    /// PostgreSQL truncates identifiers to 63 bytes, so ids longer than 60
    /// bytes keep their first 43 bytes plus a stable 64-bit FNV-1a hash of
    /// the whole id (distinct ids keep distinct schemas).
    pub fn schema(&self) -> String {
        let name = if self.0.len() <= 60 {
            format!("t_{}", self.0)
        } else {
            format!("t_{}_{:016x}", &self.0[..43], fnv1a(self.0.as_bytes()))
        };
        format!("\"{name}\"")
    }
}

/// 64-bit FNV-1a: stable across processes and Rust versions.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({:?})", self.0)
    }
}

impl std::str::FromStr for TenantId {
    type Err = InvalidTenant;
    fn from_str(s: &str) -> Result<Self, InvalidTenant> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_the_alphabet_and_length() {
        for ok in ["a", "Tenant_1-x", &"z".repeat(64)] {
            assert!(TenantId::new(ok).is_ok(), "{ok:?} rejected");
        }
        for bad in ["", "a.b", "a b", "a/b", "é", "a\"b", &"z".repeat(65)] {
            assert_eq!(TenantId::new(bad), Err(InvalidTenant), "{bad:?} accepted");
        }
    }

    #[test]
    fn schemas_fit_postgres_identifiers_and_stay_distinct() {
        let long_a = TenantId::new(format!("{}a", "x".repeat(63))).unwrap();
        let long_b = TenantId::new(format!("{}b", "x".repeat(63))).unwrap();
        for t in [&long_a, &long_b] {
            assert!(t.schema().len() - 2 <= 63, "{}", t.schema());
        }
        assert_ne!(long_a.schema(), long_b.schema());
        assert_eq!(TenantId::new("acme").unwrap().schema(), "\"t_acme\"");
        assert_eq!(
            TenantId::new("acme")
                .unwrap()
                .destination()
                .unwrap()
                .as_str(),
            "acme"
        );
    }
}
