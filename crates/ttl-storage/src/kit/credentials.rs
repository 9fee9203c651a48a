//! [`Credentials`]: a user name and a password whose `Debug` never shows
//! the password.

use std::fmt;

/// A user name and a password, as a driver keeps them: `Debug` (and so any
/// configuration that derives it) shows `<redacted>` for the password.
/// `U` is the user name's type: `String`, or `Option<String>` where the
/// user name is optional (Valkey's `AUTH`).
///
/// ```
/// use ttl_storage::kit::Credentials;
///
/// let c = Credentials { user: "app".to_string(), password: "s3cret".to_string() };
/// assert!(!format!("{c:?}").contains("s3cret"));
/// assert!(format!("{c:?}").contains("app"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials<U = String> {
    /// The user name.
    pub user: U,
    /// The password.
    pub password: String,
}

impl<U: fmt::Debug> fmt::Debug for Credentials<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}
