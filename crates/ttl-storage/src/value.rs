//! Value limits.

use crate::ValidationError;

/// The largest value, in bytes: 256 KiB, under DynamoDB's 400 KB item limit
/// and far above what leadership records need.
pub const MAX_VALUE_LEN: usize = 256 * 1024;

/// Checks a value against [`MAX_VALUE_LEN`]. Values are otherwise arbitrary
/// bytes: empty values and NUL bytes are allowed.
///
/// Every driver calls this on every value it is given, before any I/O.
pub fn check_value(value: &[u8]) -> Result<(), ValidationError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(ValidationError::ValueTooLong {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(check_value(b"").is_ok());
        assert!(check_value(&[0u8; MAX_VALUE_LEN]).is_ok());
        assert!(matches!(
            check_value(&vec![0u8; MAX_VALUE_LEN + 1]),
            Err(ValidationError::ValueTooLong { .. })
        ));
    }
}
