//! What Valkey holds about members and locks, parsed and validated.

use std::collections::BTreeMap;
use std::fmt;

use http::Uri;

use crate::address_policy::AddressPolicy;
use crate::error::{Error, Result};
use crate::ids::{DestinationId, LockId, MemberId};

/// A member's dialable base URL, `http://host[:port]` or
/// `https://host[:port]`, with no user info, path or query.
///
/// Coordinators forward only to addresses read from member records, and only
/// after they parse as a `MemberAddress` and pass the registry's
/// [`AddressPolicy`](crate::AddressPolicy); a record with anything else is
/// treated as dead.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MemberAddress {
    text: String,
    authority: http::uri::Authority,
    tls: bool,
}

impl MemberAddress {
    /// Parses `address`. Only `http` and `https` are accepted (the Node
    /// coordinator's members may advertise either); user info, paths other
    /// than `/` and queries are refused; a trailing `/` is dropped.
    pub fn parse(address: &str) -> Result<Self> {
        let bad = |reason| Error::InvalidAddress {
            address: address.to_owned(),
            reason,
        };
        let uri: Uri = address.parse().map_err(|_| bad("not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("scheme must be http or https")),
        };
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("user info is not allowed"));
        }
        if authority.host().is_empty() {
            return Err(bad("no host"));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("path and query are not allowed"));
        }
        let scheme = if tls { "https" } else { "http" };
        Ok(Self {
            text: format!("{scheme}://{authority}"),
            authority,
            tls,
        })
    }

    /// The address as written to Valkey, e.g. `http://10.0.0.7:3000`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The `host:port` part.
    pub fn authority(&self) -> &http::uri::Authority {
        &self.authority
    }

    /// Whether the member is reached over TLS (`https`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The port, explicit or the scheme's default (80 / 443).
    pub fn port(&self) -> u16 {
        self.authority
            .port_u16()
            .unwrap_or(if self.tls { 443 } else { 80 })
    }

    /// The URI for `path_and_query` on this member.
    pub(crate) fn uri_for(&self, path_and_query: &str) -> Result<Uri> {
        Uri::builder()
            .scheme(if self.tls { "https" } else { "http" })
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
            .map_err(|_| Error::InvalidAddress {
                address: format!("{}{path_and_query}", self.text),
                reason: "cannot build the upstream URI",
            })
    }
}

impl fmt::Display for MemberAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for MemberAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemberAddress({:?})", self.text)
    }
}

/// A live member as read from `P:member:<id>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member id.
    pub id: MemberId,
    /// Where to forward calls for this member.
    pub address: MemberAddress,
    /// The last load the member published (0 if it published none or garbage).
    pub load: i64,
}

impl MemberRecord {
    /// Builds a record from raw Valkey strings; `None` when the id or the
    /// address is invalid or outside `policy` (such a member is never
    /// forwarded to).
    pub(crate) fn from_raw(
        id: &str,
        address: &str,
        load: &str,
        policy: &AddressPolicy,
    ) -> Option<Self> {
        let Ok(id) = MemberId::new(id) else {
            tracing::warn!(member = ?id, "ignoring member with an invalid id");
            return None;
        };
        let address = match MemberAddress::parse(address) {
            Ok(a) => a,
            Err(err) => {
                tracing::warn!(member = %id, %err, "ignoring member with an invalid address");
                return None;
            }
        };
        if let Err(reason) = policy.check(&address) {
            tracing::warn!(member = %id, %address, reason, "ignoring member outside the address policy");
            return None;
        }
        Some(Self {
            id,
            address,
            load: parse_load(load),
        })
    }
}

/// Parses a `load` field: an integer, or a number the Node library wrote as a
/// float; anything else counts as 0.
pub(crate) fn parse_load(raw: &str) -> i64 {
    raw.parse::<i64>()
        .ok()
        .or_else(|| raw.parse::<f64>().ok().map(|f| f as i64))
        .unwrap_or(0)
}

/// A lock record `P:lock:<lockId>` together with its owner's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
    /// The lock id.
    pub lock_id: LockId,
    /// The member that minted the lock (`podId`).
    pub owner: MemberId,
    /// The destination the lock belongs to (`destinationId`), if valid.
    pub destination: Option<DestinationId>,
    /// The owner's live record, or `None` when the owner is dead: the
    /// pinned resource is gone and the caller must retry at request level.
    pub owner_record: Option<MemberRecord>,
    /// Every other field of the lock hash.
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_http_addresses() -> Result<()> {
        let a = MemberAddress::parse("http://10.0.0.7:3000/")?;
        assert_eq!(a.as_str(), "http://10.0.0.7:3000");
        assert_eq!(
            a.uri_for("/x?y=1")?.to_string(),
            "http://10.0.0.7:3000/x?y=1"
        );
        Ok(())
    }

    #[test]
    fn rejects_other_addresses() {
        let https = MemberAddress::parse("https://pod.internal:8443/").unwrap();
        assert!(https.is_tls());
        assert_eq!(https.as_str(), "https://pod.internal:8443");
        assert_eq!(MemberAddress::parse("https://p").unwrap().port(), 443);
        for bad in [
            "",
            "10.0.0.7:3000",
            "ftp://a:1",
            "https://u@a:1",
            "http://a:1/path",
            "http://a:1/?q",
            "http://u:p@a:1",
            "file:///etc/passwd",
        ] {
            assert!(MemberAddress::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn load_parsing_tolerates_node_numbers() {
        assert_eq!(parse_load("12"), 12);
        assert_eq!(parse_load("3.7"), 3);
        assert_eq!(parse_load("x"), 0);
    }
}
