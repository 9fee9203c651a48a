//! Replication and consistency settings: how a created keyspace is
//! replicated, and the consistency levels of writes and serial reads.

use std::str::FromStr;

use crate::ConfigError;

/// How a keyspace created by this driver is replicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// `SimpleStrategy` with this replication factor (one data center only).
    Simple(u16),
    /// `NetworkTopologyStrategy` with a replication factor per data center.
    NetworkTopology(Vec<(String, u16)>),
}

impl Replication {
    /// The CQL map literal for `CREATE KEYSPACE ... WITH replication = ...`.
    pub(crate) fn to_cql(&self) -> String {
        match self {
            Replication::Simple(rf) => {
                format!("{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}")
            }
            Replication::NetworkTopology(dcs) => {
                let mut out = String::from("{'class': 'NetworkTopologyStrategy'");
                for (dc, rf) in dcs {
                    out.push_str(&format!(", '{dc}': {rf}"));
                }
                out.push('}');
                out
            }
        }
    }
}

impl FromStr for Replication {
    type Err = ConfigError;

    /// Parses `simple:<rf>` (or `SimpleStrategy:<rf>`) and `<dc>:<rf>[,<dc>:<rf>...]`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::BadReplication(s.to_string());
        let parse_rf = |rf: &str| match rf.trim().parse::<u16>() {
            Ok(rf) if rf >= 1 => Ok(rf),
            _ => Err(bad()),
        };
        let mut dcs = Vec::new();
        for part in s.split(',') {
            let (name, rf) = part.split_once(':').ok_or_else(bad)?;
            let name = name.trim();
            let rf = parse_rf(rf)?;
            if name.eq_ignore_ascii_case("simple") || name.eq_ignore_ascii_case("simplestrategy") {
                if s.contains(',') {
                    return Err(bad());
                }
                return Ok(Replication::Simple(rf));
            }
            let valid_dc = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid_dc || dcs.iter().any(|(dc, _)| dc == name) {
                return Err(bad());
            }
            dcs.push((name.to_string(), rf));
        }
        Ok(Replication::NetworkTopology(dcs))
    }
}

/// Consistency of the commit phase of every lightweight transaction.
///
/// The Paxos phases themselves always run at the [`SerialConsistency`];
/// this level only says how many replicas must have the committed value
/// before the write returns. Reads go through Paxos, so they are
/// linearizable whatever this level is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WriteConsistency {
    /// One replica.
    One,
    /// Two replicas.
    Two,
    /// Three replicas.
    Three,
    /// A majority of all replicas.
    #[default]
    Quorum,
    /// Every replica.
    All,
    /// A majority of the replicas in the coordinator's data center.
    LocalQuorum,
    /// A majority in every data center.
    EachQuorum,
    /// One replica in the coordinator's data center.
    LocalOne,
}

impl WriteConsistency {
    pub(crate) fn to_driver(self) -> scylla::statement::Consistency {
        use scylla::statement::Consistency as C;
        match self {
            WriteConsistency::One => C::One,
            WriteConsistency::Two => C::Two,
            WriteConsistency::Three => C::Three,
            WriteConsistency::Quorum => C::Quorum,
            WriteConsistency::All => C::All,
            WriteConsistency::LocalQuorum => C::LocalQuorum,
            WriteConsistency::EachQuorum => C::EachQuorum,
            WriteConsistency::LocalOne => C::LocalOne,
        }
    }
}

impl FromStr for WriteConsistency {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "ONE" => WriteConsistency::One,
            "TWO" => WriteConsistency::Two,
            "THREE" => WriteConsistency::Three,
            "QUORUM" => WriteConsistency::Quorum,
            "ALL" => WriteConsistency::All,
            "LOCAL_QUORUM" => WriteConsistency::LocalQuorum,
            "EACH_QUORUM" => WriteConsistency::EachQuorum,
            "LOCAL_ONE" => WriteConsistency::LocalOne,
            _ => return Err(ConfigError::BadConsistency(s.to_string())),
        })
    }
}

/// Consistency of the Paxos phases of every operation, reads included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SerialConsistency {
    /// Paxos across every data center: linearizable cluster-wide.
    #[default]
    Serial,
    /// Paxos within the coordinator's data center only: linearizable only if
    /// every client of a key uses the same data center.
    LocalSerial,
}

impl SerialConsistency {
    pub(crate) fn to_driver(self) -> scylla::statement::SerialConsistency {
        match self {
            SerialConsistency::Serial => scylla::statement::SerialConsistency::Serial,
            SerialConsistency::LocalSerial => scylla::statement::SerialConsistency::LocalSerial,
        }
    }

    /// The same level as a read consistency (a read at SERIAL runs Paxos).
    pub(crate) fn as_read_consistency(self) -> scylla::statement::Consistency {
        match self {
            SerialConsistency::Serial => scylla::statement::Consistency::Serial,
            SerialConsistency::LocalSerial => scylla::statement::Consistency::LocalSerial,
        }
    }
}

impl FromStr for SerialConsistency {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "SERIAL" => Ok(SerialConsistency::Serial),
            "LOCAL_SERIAL" => Ok(SerialConsistency::LocalSerial),
            _ => Err(ConfigError::BadSerialConsistency(s.to_string())),
        }
    }
}
