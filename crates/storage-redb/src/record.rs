//! How a record is stored: its absolute expiry and its value, and the clock
//! the expiry is measured on.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ttl_storage::{Entry, TimeLeft, Ttl};

/// The stored expiry of a record that never expires.
pub(crate) const NEVER: u64 = 0;

/// Bytes of the expiry prefix in front of every stored value.
const EXPIRY_LEN: usize = 8;

/// Milliseconds since the Unix epoch on the wall clock (`SystemTime`).
pub(crate) fn now_millis() -> Result<u64, redb::Error> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|err| redb::Error::Io(std::io::Error::other(err)))?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// The absolute expiry (Unix millis) of a record written at `now` with `ttl`;
/// [`NEVER`] for [`Ttl::NEVER`].
pub(crate) fn expiry_for(now: u64, ttl: Ttl) -> u64 {
    match ttl.duration() {
        None => NEVER,
        Some(ttl) => {
            let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
            now.saturating_add(ttl).max(1)
        }
    }
}

/// True when a record expiring at `expires_at` is live at `now`.
pub(crate) fn is_live(expires_at: u64, now: u64) -> bool {
    expires_at == NEVER || now < expires_at
}

/// A live record read back as an [`Entry`], its time left measured on this
/// process's wall clock.
pub(crate) fn entry(expires_at: u64, value: Vec<u8>) -> Entry {
    let time_left = if expires_at == NEVER {
        TimeLeft::Never
    } else {
        match now_millis() {
            Ok(now) => TimeLeft::About(Duration::from_millis(expires_at.saturating_sub(now))),
            Err(_) => TimeLeft::Unknown,
        }
    };
    Entry { value, time_left }
}

/// Encodes a record as stored: the big-endian expiry, then the value.
pub(crate) fn encode(expires_at: u64, value: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(EXPIRY_LEN + value.len());
    bytes.extend_from_slice(&expires_at.to_be_bytes());
    bytes.extend_from_slice(value);
    bytes
}

/// Splits a stored record into its expiry and its value.
pub(crate) fn decode(bytes: &[u8]) -> Result<(u64, &[u8]), redb::Error> {
    match bytes.split_first_chunk::<EXPIRY_LEN>() {
        Some((expiry, value)) => Ok((u64::from_be_bytes(*expiry), value)),
        None => Err(redb::Error::Corrupted(format!(
            "stored record is {} bytes long, shorter than its {EXPIRY_LEN}-byte expiry",
            bytes.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_values_and_expiry() {
        for value in [&b""[..], b"\0", b"leader 10.0.0.7", &[0xff; 300]] {
            let bytes = encode(1_700_000_000_123, value);
            let (expiry, decoded) = decode(&bytes).unwrap();
            assert_eq!(expiry, 1_700_000_000_123);
            assert_eq!(decoded, value);
        }
    }

    #[test]
    fn short_records_are_corruption() {
        assert!(matches!(decode(b"1234567"), Err(redb::Error::Corrupted(_))));
    }

    #[test]
    fn expiry_and_liveness() {
        let ttl = Ttl::from_secs(3).unwrap();
        assert_eq!(expiry_for(1_000, ttl), 4_000);
        assert_eq!(expiry_for(1_000, Ttl::NEVER), NEVER);
        assert!(is_live(4_000, 3_999));
        assert!(!is_live(4_000, 4_000));
        assert!(is_live(NEVER, u64::MAX));
    }

    #[test]
    fn clock_is_after_2020() {
        assert!(now_millis().unwrap() > 1_577_836_800_000);
    }
}
