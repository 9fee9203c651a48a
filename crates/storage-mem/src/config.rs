//! [`MemConfig`]: the options of a [`MemStorage`](crate::MemStorage).

use crate::ConfigError;

/// Options of a [`MemStorage`](crate::MemStorage), validated when set.
///
/// ```
/// use storage_mem::{MemConfig, MemStorage};
///
/// let storage = MemStorage::with_config(MemConfig::new().with_max_records(10_000)?);
/// assert_eq!(storage.config().max_records(), Some(10_000));
/// # Ok::<(), storage_mem::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemConfig {
    max_records: Option<usize>,
}

impl MemConfig {
    /// The defaults: no limit on the number of records.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `max` records (live, or expired and not yet reclaimed: the
    /// expired ones are reclaimed before a write is refused). An insert of
    /// a new key beyond it fails with a permanent error and writes nothing;
    /// swaps and deletes of existing keys still work. Zero is refused.
    pub fn with_max_records(mut self, max: usize) -> Result<Self, ConfigError> {
        if max == 0 {
            return Err(ConfigError::ZeroMaxRecords);
        }
        self.max_records = Some(max);
        Ok(self)
    }

    /// The record limit, if any.
    pub fn max_records(&self) -> Option<usize> {
        self.max_records
    }
}
