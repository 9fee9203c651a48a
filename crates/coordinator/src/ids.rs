//! Validated identifiers: members, destinations, locks and requests.
//!
//! Every id that reaches a Valkey key or a URL passes through one of these
//! types, so malformed input is rejected at the boundary (an HTTP handler
//! answers 400 before touching Valkey).
//!
//! Member, destination and lock ids accept what the Node coordinator writes
//! (`node:pod:3`, `user@x`, UUIDs...): 1..=256 bytes, never `.` or `..`,
//! never `/`, `\` or a control character. Request ids, which this crate
//! mints and puts in URL paths, are limited to `A-Z a-z 0-9 - . _ ~`.

use std::fmt;

use rand::RngCore;

use crate::error::{Error, Result};

/// Longest accepted id, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// Checks that `s` is an id both this crate and the Node coordinator can
/// use: 1..=[`MAX_ID_LEN`] bytes of UTF-8, not `.` or `..`, and without `/`,
/// `\` or control characters.
///
/// Everything the Node library writes in practice is accepted (`node:pod:3`,
/// `user@x`, UUIDs); what is refused is what could change the meaning of a
/// URL path (`/`, dot segments) or of a log line (control characters).
fn validate(kind: &'static str, s: &str) -> Result<()> {
    let bad = |reason| Err(Error::InvalidId { kind, reason });
    if s.is_empty() {
        return bad("empty");
    }
    if s.len() > MAX_ID_LEN {
        return bad("longer than 256 bytes");
    }
    if s == "." || s == ".." {
        return bad("`.` and `..` are not ids");
    }
    if s.contains(['/', '\\']) {
        return bad("`/` and `\\` are not allowed");
    }
    if s.chars().any(char::is_control) {
        return bad("control characters are not allowed");
    }
    Ok(())
}

/// The stricter alphabet of ids this crate mints and puts in URLs (request
/// ids): RFC 3986 unreserved characters only.
fn validate_unreserved(kind: &'static str, s: &str) -> Result<()> {
    validate(kind, s)?;
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
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(32);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        id_type!($(#[$doc])* $name, $kind, validate);
    };
    ($(#[$doc:meta])* $name:ident, $kind:literal, $check:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates `id` (see the module docs for the accepted alphabet).
            pub fn new(id: impl Into<String>) -> Result<Self> {
                let id = id.into();
                $check($kind, &id)?;
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
    "request",
    validate_unreserved
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
    fn accepts_unreserved_characters_and_node_ids() {
        assert!(DestinationId::new("tenant-42.eu_west~1").is_ok());
        for node in ["node:pod:3", "user@x", "a b", "é", "*", "..x", "x.."] {
            assert!(MemberId::new(node).is_ok(), "{node:?} refused");
            assert!(DestinationId::new(node).is_ok(), "{node:?} refused");
        }
        assert!(MemberId::new("a").is_ok());
        assert!(MemberId::new("x".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in [
            "", ".", "..", "a/b", "/", "a\\b", "a\n", "\0", "a\u{7f}", "\u{85}",
        ] {
            assert!(DestinationId::new(bad).is_err(), "{bad:?} accepted");
            assert!(MemberId::new(bad).is_err(), "{bad:?} accepted");
            assert!(LockId::new(bad).is_err(), "{bad:?} accepted");
        }
        for bad in ["a:b", "a@b", "a b"] {
            assert!(RequestId::new(bad).is_err(), "{bad:?} accepted");
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
