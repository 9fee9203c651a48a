//! Validated storage keys.

use std::{borrow::Borrow, fmt};

use crate::ValidationError;

/// The longest key, in bytes. Fits every driver's key column.
pub const MAX_KEY_LEN: usize = 512;

/// A validated storage key: 1 to [`MAX_KEY_LEN`] bytes of UTF-8 without
/// control characters.
///
/// ```
/// use ttl_storage::Key;
/// let key = Key::new("vvm/leader/1").unwrap();
/// assert_eq!(key.as_str(), "vvm/leader/1");
/// assert!(Key::new("").is_err());
/// assert!(Key::new("a\nb").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// Validates `key`.
    pub fn new(key: impl Into<String>) -> Result<Self, ValidationError> {
        let key = key.into();
        if key.is_empty() {
            return Err(ValidationError::EmptyKey);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(ValidationError::KeyTooLong {
                len: key.len(),
                max: MAX_KEY_LEN,
            });
        }
        if let Some((index, _)) = key.char_indices().find(|(_, c)| c.is_control()) {
            return Err(ValidationError::KeyControlChar { index });
        }
        Ok(Key(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// Consumes the key, returning its text.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Key {
    type Error = ValidationError;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Key::new(value)
    }
}

impl TryFrom<String> for Key {
    type Error = ValidationError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Key::new(value)
    }
}

impl std::str::FromStr for Key {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Key::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_keys() {
        assert_eq!(Key::new(""), Err(ValidationError::EmptyKey));
        assert_eq!(
            Key::new("x".repeat(MAX_KEY_LEN + 1)),
            Err(ValidationError::KeyTooLong {
                len: MAX_KEY_LEN + 1,
                max: MAX_KEY_LEN
            })
        );
        assert_eq!(
            Key::new("ab\0c"),
            Err(ValidationError::KeyControlChar { index: 2 })
        );
        assert!(Key::new("x".repeat(MAX_KEY_LEN)).is_ok());
        assert!(Key::new("ключ/1").is_ok());
    }
}
