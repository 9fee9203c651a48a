//! Validated time-to-live.

use std::{fmt, time::Duration};

use crate::ValidationError;

/// The longest TTL: 20 years, Cassandra's limit.
pub const MAX_TTL: Duration = Duration::from_secs(20 * 365 * 24 * 3600);

/// A validated time-to-live: either [`Ttl::NEVER`] (the record never
/// expires) or a whole number of seconds from 1 s to [`MAX_TTL`].
///
/// Whole seconds because the stores keep TTLs in seconds; sub-second and
/// fractional values are rejected rather than silently rounded.
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::Ttl;
///
/// let ttl = Ttl::new(Duration::from_secs(20)).unwrap();
/// assert_eq!(ttl.duration(), Some(Duration::from_secs(20)));
/// assert!(Ttl::new(Duration::ZERO).unwrap().is_never());
/// assert!(Ttl::new(Duration::from_millis(500)).is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ttl(u64);

impl Ttl {
    /// The record never expires (fencing counters). Written as `Duration::ZERO`.
    pub const NEVER: Ttl = Ttl(0);

    /// Validates `ttl`. `Duration::ZERO` means [`Ttl::NEVER`].
    pub fn new(ttl: Duration) -> Result<Self, ValidationError> {
        if ttl.is_zero() {
            return Ok(Ttl::NEVER);
        }
        if ttl < Duration::from_secs(1) {
            return Err(ValidationError::TtlTooShort(ttl));
        }
        if ttl > MAX_TTL {
            return Err(ValidationError::TtlTooLong { ttl, max: MAX_TTL });
        }
        if ttl.subsec_nanos() != 0 {
            return Err(ValidationError::TtlFractional(ttl));
        }
        Ok(Ttl(ttl.as_secs()))
    }

    /// Like [`Ttl::new`], but rejects [`Ttl::NEVER`]: for leases, which must expire.
    pub fn expiring(ttl: Duration) -> Result<Self, ValidationError> {
        match Ttl::new(ttl)? {
            Ttl::NEVER => Err(ValidationError::TtlMustExpire),
            ttl => Ok(ttl),
        }
    }

    /// A TTL of `secs` seconds; 0 means [`Ttl::NEVER`].
    pub fn from_secs(secs: u64) -> Result<Self, ValidationError> {
        Ttl::new(Duration::from_secs(secs))
    }

    /// True for [`Ttl::NEVER`].
    pub fn is_never(self) -> bool {
        self.0 == 0
    }

    /// The TTL as a duration, or `None` for [`Ttl::NEVER`].
    pub fn duration(self) -> Option<Duration> {
        (!self.is_never()).then(|| Duration::from_secs(self.0))
    }

    /// The TTL in whole seconds; 0 for [`Ttl::NEVER`].
    pub fn as_secs(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_never() {
            f.write_str("Ttl::NEVER")
        } else {
            write!(f, "Ttl({}s)", self.0)
        }
    }
}

impl TryFrom<Duration> for Ttl {
    type Error = ValidationError;
    fn try_from(value: Duration) -> Result<Self, Self::Error> {
        Ttl::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert_eq!(Ttl::new(Duration::ZERO), Ok(Ttl::NEVER));
        assert_eq!(
            Ttl::new(Duration::from_millis(999)),
            Err(ValidationError::TtlTooShort(Duration::from_millis(999)))
        );
        assert_eq!(
            Ttl::new(Duration::from_millis(1500)),
            Err(ValidationError::TtlFractional(Duration::from_millis(1500)))
        );
        assert!(matches!(
            Ttl::new(MAX_TTL + Duration::from_secs(1)),
            Err(ValidationError::TtlTooLong { .. })
        ));
        assert_eq!(Ttl::new(MAX_TTL).map(Ttl::as_secs), Ok(MAX_TTL.as_secs()));
        assert_eq!(
            Ttl::expiring(Duration::ZERO),
            Err(ValidationError::TtlMustExpire)
        );
        assert_eq!(
            Ttl::from_secs(3).map(Ttl::duration),
            Ok(Some(Duration::from_secs(3)))
        );
        assert_eq!(Ttl::NEVER.duration(), None);
    }
}
