//! Validated identifiers: members, destinations, locks and requests.
//!
//! Every id that reaches a Valkey key or a URL passes through one of these
//! types, so malformed input is rejected at the boundary (an HTTP handler
//! answers 400 before touching Valkey).

use std::fmt;

use rand::RngCore;

use crate::error::{Error, Result};

/// Longest accepted id, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// Checks that `s` is 1..=[`MAX_ID_LEN`] bytes of RFC 3986 unreserved
/// characters (`A-Z a-z 0-9 - . _ ~`), so it is safe both inside a Valkey key
/// (`prefix:kind:<id>`) and as a URL path segment.
fn validate(kind: &'static str, s: &str) -> Result<()> {
    if s.is_empty() {
        return Err(Error::InvalidId {
            kind,
            reason: "empty",
        });
    }
    if s.len() > MAX_ID_LEN {
        return Err(Error::InvalidId {
            kind,
            reason: "longer than 256 bytes",
        });
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err(Error::InvalidId {
            kind,
            reason: "only A-Z a-z 0-9 - . _ ~ are allowed",
        });
    }
    Ok(())
}

/// 128 random bits from the thread-local CSPRNG, as 32 lowercase hex digits.
fn random_hex128() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let mut out = String::with_capacity(32);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates `id` (see the module docs for the accepted alphabet).
            pub fn new(id: impl Into<String>) -> Result<Self> {
                let id = id.into();
                validate($kind, &id)?;
                Ok(Self(id))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// The id of a resource pod (a member of the fleet).
    MemberId,
    "member"
);
id_type!(
    /// The id of a destination (a tenant, a database, an agent...).
    DestinationId,
    "destination"
);
id_type!(
    /// An opaque lock id minted by a resource pod; see [`LockId::generate`].
    LockId,
    "lock"
);
id_type!(
    /// The id a coordinator attaches to each forwarded call, used to cancel it.
    RequestId,
    "request"
);

impl LockId {
    /// Mints an unguessable lock id: 128 bits from a CSPRNG, hex encoded.
    pub fn generate() -> Self {
        Self(random_hex128())
    }
}

impl RequestId {
    /// Mints a fresh request id: 128 random bits, hex encoded.
    pub fn generate() -> Self {
        Self(random_hex128())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_unreserved_characters() {
        assert!(DestinationId::new("tenant-42.eu_west~1").is_ok());
        assert!(MemberId::new("a").is_ok());
        assert!(MemberId::new("x".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in ["", "a:b", "a b", "a/b", "é", "a\n", "*"] {
            assert!(DestinationId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(MemberId::new("x".repeat(MAX_ID_LEN + 1)).is_err());
    }

    #[test]
    fn generated_ids_are_128_bit_hex_and_distinct() {
        let a = LockId::generate();
        let b = LockId::generate();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(LockId::new(a.as_str()).is_ok());
    }
}
