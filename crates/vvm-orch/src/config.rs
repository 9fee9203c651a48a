//! [`VvmConfig`]: the VVM's settings, their defaults and their validation.

use std::time::Duration;

use ttl_storage::{Key, Ttl, ValidationError};

/// Default leadership duration (the TTL of the leadership record), as in the design.
pub const DEFAULT_LEADERSHIP_DURATION: Duration = Duration::from_secs(20);

/// Default time the Launcher keeps trying to acquire leadership, as in the design.
pub const DEFAULT_ACQUISITION_DURATION: Duration = Duration::from_secs(120);
/// An acquisition duration that never runs out: the Launcher keeps trying
/// until shutdown, as a standby should (like `consul lock`).
pub const ACQUIRE_FOREVER: Duration = Duration::MAX;

/// Default pause between two acquisition rounds (one round tries every key once).
pub const DEFAULT_ACQUISITION_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Default number of VVMs in the cluster (the number of leadership keys).
pub const DEFAULT_CLUSTER_SIZE: u32 = 1;

/// Default prefix of the leadership keys: keys are `vvm/leader/1`, `vvm/leader/2`, ...
pub const DEFAULT_KEY_PREFIX: &str = "vvm/leader/";

/// The largest cluster size accepted.
pub const MAX_CLUSTER_SIZE: u32 = 1024;

/// The longest address accepted, in bytes (the leadership value adds a suffix).
pub const MAX_ADDRESS_LEN: usize = 256;

/// The settings of one VVM.
///
/// Build it with [`VvmConfig::new`], change fields as needed; it is validated
/// by [`VvmConfig::validate`], which [`crate::Vvm::provide`] calls.
///
/// ```
/// use std::time::Duration;
/// use vvm_orch::VvmConfig;
///
/// let mut config = VvmConfig::new("10.0.0.7");
/// config.cluster_size = 3;
/// config.leadership_duration = Duration::from_secs(10);
/// assert!(config.validate().is_ok());
///
/// config.cluster_size = 0;
/// assert!(config.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VvmConfig {
    /// This VVM's address (IP, host name...). The leadership value is this
    /// address plus a per-process unique suffix.
    pub address: String,
    /// Number of VVMs in the cluster: the Launcher tries keys `1..=cluster_size`.
    pub cluster_size: u32,
    /// Prefix of the leadership keys (the key of index `n` is `{prefix}{n}`).
    /// It may not start with `__` (reserved) nor end with a digit; see
    /// [`crate::keys`] for every key it makes.
    pub key_prefix: String,
    /// The leadership duration: the TTL of the leadership record. A whole
    /// number of seconds, at least 1 s.
    pub leadership_duration: Duration,
    /// How long the Launcher keeps trying before it reports
    /// [`crate::VvmProblem::LeadershipAcquisition`].
    pub acquisition_duration: Duration,
    /// Pause between two acquisition rounds. Cut short when the storage
    /// reports that a key may have been released
    /// ([`ttl_storage::TtlStorage::watch`]), so a graceful handover does not
    /// wait for it; storages without that capability wait the whole pause.
    pub acquisition_retry_pause: Duration,
    /// This VVM's priority as a candidate (0 by default): a free key goes
    /// to the highest priority waiting, and a leader hands over to a
    /// higher-priority candidate that has stood for
    /// [`preempt_after`](Self::preempt_after). Equal priorities never
    /// preempt. See [`elections::Preemption`].
    pub priority: i32,
    /// The hold-down: how long a higher-priority candidate must have stood,
    /// continuously, before the leader hands over to it. `None`: two
    /// leadership durations.
    pub preempt_after: Option<Duration>,
    /// How long a leader leads before any preemption. `None`: the hold-down.
    pub min_tenure: Option<Duration>,
}

/// Why a [`VvmConfig`] is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The address is empty.
    #[error("the address is empty")]
    EmptyAddress,
    /// The address is longer than [`MAX_ADDRESS_LEN`] bytes.
    #[error("the address is {len} bytes long; the limit is {max}")]
    AddressTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The address contains a control character.
    #[error("the address contains a control character")]
    AddressControlChar,
    /// The cluster size is 0 or above [`MAX_CLUSTER_SIZE`].
    #[error("cluster size {size} is out of range 1..={max}")]
    ClusterSize {
        /// The rejected size.
        size: u32,
        /// The limit.
        max: u32,
    },
    /// A leadership key built from the prefix is not a valid storage key.
    #[error("key prefix {prefix:?} makes invalid keys: {source}")]
    KeyPrefix {
        /// The rejected prefix.
        prefix: String,
        /// Why the key is invalid.
        #[source]
        source: ValidationError,
    },
    /// The key prefix lies in the namespace reserved for the library's own
    /// records (it starts with `__`; see [`crate::keys`]).
    #[error(
        "key prefix {0:?} lies in the namespace reserved for the library's records (keys starting with `__`)"
    )]
    ReservedKeyPrefix(String),
    /// The key prefix ends with a digit: `P1` with index 1 and `P` with
    /// index 11 would be the same key.
    #[error(
        "key prefix {0:?} ends with a digit, so its keys could be another prefix's (end it with `/`, say)"
    )]
    KeyPrefixEndsWithDigit(String),
    /// The leadership duration is not a whole number of seconds of at least 1 s.
    #[error("leadership duration {duration:?} is invalid: {source}")]
    LeadershipDuration {
        /// The rejected duration.
        duration: Duration,
        /// Why.
        #[source]
        source: ValidationError,
    },
    /// The acquisition duration is zero.
    #[error("the acquisition duration must be longer than zero")]
    AcquisitionDuration,
    /// The retry pause is zero or longer than the acquisition duration.
    #[error(
        "acquisition retry pause {pause:?} must be longer than zero and at most the acquisition duration {acquisition:?}"
    )]
    RetryPause {
        /// The rejected pause.
        pause: Duration,
        /// The acquisition duration.
        acquisition: Duration,
    },
    /// The hold-down ([`VvmConfig::preempt_after`]) is zero.
    #[error("the hold-down (preempt after) must be longer than zero")]
    PreemptAfter,
}

impl VvmConfig {
    /// A configuration with the given address and every other setting at its default.
    pub fn new(address: impl Into<String>) -> Self {
        VvmConfig {
            address: address.into(),
            cluster_size: DEFAULT_CLUSTER_SIZE,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            leadership_duration: DEFAULT_LEADERSHIP_DURATION,
            acquisition_duration: DEFAULT_ACQUISITION_DURATION,
            acquisition_retry_pause: DEFAULT_ACQUISITION_RETRY_PAUSE,
            priority: 0,
            preempt_after: None,
            min_tenure: None,
        }
    }

    /// The hold-down in effect: [`preempt_after`](Self::preempt_after), or
    /// two leadership durations.
    pub fn hold_down(&self) -> Duration {
        self.preempt_after
            .unwrap_or_else(|| elections::Preemption::default_hold_down(self.leadership_duration))
    }

    /// The minimum tenure in effect: [`min_tenure`](Self::min_tenure), or
    /// the hold-down.
    pub fn tenure(&self) -> Duration {
        self.min_tenure.unwrap_or_else(|| self.hold_down())
    }

    /// Checks every setting.
    ///
    /// # Errors
    ///
    /// The first invalid setting found, as a [`ConfigError`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.address.is_empty() {
            return Err(ConfigError::EmptyAddress);
        }
        if self.address.len() > MAX_ADDRESS_LEN {
            return Err(ConfigError::AddressTooLong {
                len: self.address.len(),
                max: MAX_ADDRESS_LEN,
            });
        }
        if self.address.chars().any(char::is_control) {
            return Err(ConfigError::AddressControlChar);
        }
        if !(1..=MAX_CLUSTER_SIZE).contains(&self.cluster_size) {
            return Err(ConfigError::ClusterSize {
                size: self.cluster_size,
                max: MAX_CLUSTER_SIZE,
            });
        }
        crate::keys::check_prefix(&self.key_prefix, self.cluster_size)?;
        Ttl::expiring(self.leadership_duration).map_err(|source| {
            ConfigError::LeadershipDuration {
                duration: self.leadership_duration,
                source,
            }
        })?;
        if self.acquisition_duration.is_zero() {
            return Err(ConfigError::AcquisitionDuration);
        }
        if self.acquisition_retry_pause.is_zero()
            || self.acquisition_retry_pause > self.acquisition_duration
        {
            return Err(ConfigError::RetryPause {
                pause: self.acquisition_retry_pause,
                acquisition: self.acquisition_duration,
            });
        }
        if self.preempt_after.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::PreemptAfter);
        }
        Ok(())
    }

    /// The leadership key of index `index` (1-based): `{key_prefix}{index}`.
    ///
    /// # Errors
    ///
    /// When the prefix makes an invalid [`Key`].
    pub fn key(&self, index: u32) -> Result<Key, ValidationError> {
        crate::keys::lease(&self.key_prefix, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_designs() {
        let config = VvmConfig::new("10.0.0.1");
        assert_eq!(config.leadership_duration, Duration::from_secs(20));
        assert_eq!(config.acquisition_duration, Duration::from_secs(120));
        assert_eq!(config.cluster_size, 1);
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.key(2).unwrap().as_str(), "vvm/leader/2");
        assert_eq!(config.priority, 0);
        assert_eq!(config.hold_down(), Duration::from_secs(40));
        assert_eq!(config.tenure(), Duration::from_secs(40));
    }

    #[test]
    fn the_hold_down_and_the_tenure() {
        let mut config = VvmConfig::new("10.0.0.1");
        config.leadership_duration = Duration::from_secs(3);
        assert_eq!(config.hold_down(), Duration::from_secs(6));
        config.preempt_after = Some(Duration::from_secs(5));
        assert_eq!(config.tenure(), Duration::from_secs(5));
        config.min_tenure = Some(Duration::ZERO);
        assert_eq!(config.tenure(), Duration::ZERO);
        assert_eq!(config.validate(), Ok(()));
        config.preempt_after = Some(Duration::ZERO);
        assert_eq!(config.validate(), Err(ConfigError::PreemptAfter));
    }

    #[test]
    fn rejects_bad_settings() {
        let base = VvmConfig::new("host");
        let check = |f: &dyn Fn(&mut VvmConfig)| {
            let mut c = base.clone();
            f(&mut c);
            c.validate()
        };
        assert_eq!(
            check(&|c| c.address.clear()),
            Err(ConfigError::EmptyAddress)
        );
        assert_eq!(
            check(&|c| c.address = "a\nb".into()),
            Err(ConfigError::AddressControlChar)
        );
        assert!(matches!(
            check(&|c| c.address = "x".repeat(MAX_ADDRESS_LEN + 1)),
            Err(ConfigError::AddressTooLong { .. })
        ));
        assert_eq!(
            check(&|c| c.cluster_size = 0),
            Err(ConfigError::ClusterSize {
                size: 0,
                max: MAX_CLUSTER_SIZE
            })
        );
        assert!(matches!(
            check(&|c| c.cluster_size = MAX_CLUSTER_SIZE + 1),
            Err(ConfigError::ClusterSize { .. })
        ));
        assert!(matches!(
            check(&|c| c.key_prefix = "bad\u{7}".into()),
            Err(ConfigError::KeyPrefix { .. })
        ));
        assert!(matches!(
            check(&|c| c.key_prefix = "__fencing__/x".into()),
            Err(ConfigError::ReservedKeyPrefix(_))
        ));
        assert!(matches!(
            check(&|c| c.leadership_duration = Duration::from_millis(1500)),
            Err(ConfigError::LeadershipDuration {
                source: ValidationError::TtlFractional(_),
                ..
            })
        ));
        assert!(matches!(
            check(&|c| c.leadership_duration = Duration::ZERO),
            Err(ConfigError::LeadershipDuration {
                source: ValidationError::TtlMustExpire,
                ..
            })
        ));
        assert_eq!(
            check(&|c| c.acquisition_duration = Duration::ZERO),
            Err(ConfigError::AcquisitionDuration)
        );
        assert!(matches!(
            check(&|c| c.acquisition_retry_pause = Duration::ZERO),
            Err(ConfigError::RetryPause { .. })
        ));
        assert!(matches!(
            check(&|c| c.acquisition_retry_pause = Duration::from_secs(121)),
            Err(ConfigError::RetryPause { .. })
        ));
    }
}
