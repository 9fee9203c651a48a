//! Which member addresses a coordinator may forward to.
//!
//! Member records come from Valkey, and whoever can write Valkey can point a
//! record at any address. [`MemberAddress`] already refuses anything but
//! `http(s)://host[:port]` without user info; an [`AddressPolicy`] narrows
//! that further to address ranges and ports, so a forged record cannot make
//! the coordinator call an internal service outside the pod network.

use std::net::IpAddr;
use std::ops::RangeInclusive;

use crate::address::MemberAddress;
use crate::error::{Error, Result};

/// An IP network in CIDR notation, e.g. `10.0.0.0/8` or `fd00::/8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Parses `a.b.c.d/n` or `v6::/n`; a bare address is a single host.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::InvalidConfig(format!("{text:?} is not a CIDR range"));
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.trim().parse::<u8>().map_err(|_| bad())?,
            None => max,
        };
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }

    /// Whether `ip` lies inside this network (IPv4-mapped IPv6 addresses
    /// are compared as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Limits on member addresses, checked on every record read from Valkey.
///
/// The default allows every `http(s)://host[:port]`. Adding a range makes
/// the policy an allow-list: the host must then be an IP literal inside one
/// of the ranges (host names are refused, since their resolution can change
/// after the check) unless it is listed with [`AddressPolicy::allow_host`].
/// Adding a port range limits ports the same way.
///
/// ```
/// use coordinator::{AddressPolicy, MemberAddress};
///
/// let policy = AddressPolicy::default()
///     .allow_cidr("10.0.0.0/8")?
///     .allow_ports(3000..=3999);
/// assert!(policy.check(&MemberAddress::parse("http://10.1.2.3:3000")?).is_ok());
/// assert!(policy.check(&MemberAddress::parse("http://169.254.169.254:3000")?).is_err());
/// assert!(policy.check(&MemberAddress::parse("http://10.1.2.3:6379")?).is_err());
/// # Ok::<(), coordinator::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    ranges: Vec<IpNet>,
    hosts: Vec<String>,
    ports: Vec<RangeInclusive<u16>>,
    deny_https: bool,
}

impl AddressPolicy {
    /// Allows members inside `cidr` (e.g. `10.0.0.0/8`).
    pub fn allow_cidr(mut self, cidr: &str) -> Result<Self> {
        self.ranges.push(IpNet::parse(cidr)?);
        Ok(self)
    }

    /// Allows members whose host is exactly `host` (a DNS name, compared
    /// case-insensitively).
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into().to_ascii_lowercase());
        self
    }

    /// Allows members on a port inside `ports`.
    pub fn allow_ports(mut self, ports: RangeInclusive<u16>) -> Self {
        self.ports.push(ports);
        self
    }

    /// Refuses `https` members (for fleets that only run cleartext pods).
    pub fn deny_https(mut self) -> Self {
        self.deny_https = true;
        self
    }

    /// Whether the policy restricts hosts (an allow-list is configured).
    pub fn restricts_hosts(&self) -> bool {
        !self.ranges.is_empty() || !self.hosts.is_empty()
    }

    /// `Ok` if `address` may be forwarded to, else why not.
    pub fn check(&self, address: &MemberAddress) -> Result<(), &'static str> {
        if self.deny_https && address.is_tls() {
            return Err("https members are not allowed");
        }
        if !self.ports.is_empty() && !self.ports.iter().any(|r| r.contains(&address.port())) {
            return Err("port is not in the allow-list");
        }
        if !self.restricts_hosts() {
            return Ok(());
        }
        let host = address.authority().host();
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return if self.ranges.iter().any(|n| n.contains(ip)) {
                Ok(())
            } else {
                Err("address is not in the allow-list")
            };
        }
        if self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            Ok(())
        } else {
            Err("host name is not in the allow-list")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> MemberAddress {
        MemberAddress::parse(s).unwrap()
    }

    #[test]
    fn cidr_ranges_match_v4_and_v6() {
        let net = IpNet::parse("10.0.0.0/8").unwrap();
        assert!(net.contains("10.255.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        let all = IpNet::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        let v6 = IpNet::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "x/8", "::/129", ""] {
            assert!(IpNet::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn default_allows_any_http_or_https_member() {
        let p = AddressPolicy::default();
        assert!(p.check(&addr("http://anything:1")).is_ok());
        assert!(p.check(&addr("https://10.0.0.1")).is_ok());
        assert!(
            p.clone()
                .deny_https()
                .check(&addr("https://10.0.0.1"))
                .is_err()
        );
    }

    #[test]
    fn allow_list_limits_hosts_and_ports() {
        let p = AddressPolicy::default()
            .allow_cidr("127.0.0.0/8")
            .unwrap()
            .allow_cidr("fd00::/8")
            .unwrap()
            .allow_host("pod.internal")
            .allow_ports(3000..=3999)
            .allow_ports(443..=443);
        assert!(p.check(&addr("http://127.0.0.1:3000")).is_ok());
        assert!(p.check(&addr("http://[fd00::1]:3001")).is_ok());
        assert!(p.check(&addr("https://POD.internal")).is_ok());
        assert!(p.check(&addr("http://127.0.0.1:6379")).is_err());
        assert!(p.check(&addr("http://169.254.169.254:3000")).is_err());
        assert!(
            p.check(&addr("http://metadata.google.internal:3000"))
                .is_err()
        );
        assert!(p.check(&addr("http://pod.internal")).is_err(), "port 80");
    }
}
