//! A member's dialable address, parsed and validated.

use std::fmt;

use http::Uri;

use crate::error::{Error, Result};

/// A member's dialable base URL, `http://host[:port]` or
/// `https://host[:port]`, with no user info, path or query.
///
/// Coordinators forward only to addresses read from member records, and only
/// after they parse as a `MemberAddress` and pass the registry's
/// [`AddressPolicy`](crate::AddressPolicy); a record with anything else is
/// never forwarded to (nor picked), but its member is not removed from any
/// pod set while the record exists: another coordinator, with another
/// policy, may route to it.
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
}
