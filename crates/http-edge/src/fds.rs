//! The process's file-descriptor limit, and the connection cap it allows.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Descriptors [`serve`](crate::serve) leaves for everything but client
/// connections: standard streams, the listener, the runtime's epoll and
/// wake-up descriptors, log files, the application's store connections
/// (Valkey, a database) and connections closing within their grace period.
pub const RESERVED_FDS: usize = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as mature servers do
/// at start, and returns the soft limit now in force (`None` if it cannot
/// be read). Idempotent; [`serve`](crate::serve) calls it itself.
///
/// ```
/// let limit = http_edge::raise_fd_limit();
/// assert!(limit.is_none_or(|n| n > 0));
/// ```
pub fn raise_fd_limit() -> Option<u64> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(err) => {
            tracing::warn!(%err, "cannot read the file-descriptor limit");
            return None;
        }
    };
    if soft >= hard {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = hard, "raised the file-descriptor limit");
            Some(hard)
        }
        Err(err) => {
            tracing::warn!(%err, soft, hard, "cannot raise the file-descriptor limit");
            Some(soft)
        }
    }
}

/// The connection cap [`serve`](crate::serve) enforces: `configured`, but
/// never more than half the descriptors left after [`RESERVED_FDS`] (the
/// other half is for the upstream connection each proxied request may
/// open), and at least 1.
pub(crate) fn connection_cap(configured: usize, fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return configured;
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let by_fds = (limit.saturating_sub(RESERVED_FDS) / 2).max(1);
    configured.min(by_fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_follows_the_descriptor_limit() {
        assert_eq!(connection_cap(1024, Some(256)), 96);
        assert_eq!(connection_cap(1024, Some(1_048_576)), 1024);
        assert_eq!(connection_cap(50, Some(256)), 50);
        assert_eq!(connection_cap(1024, Some(10)), 1);
        assert_eq!(connection_cap(1024, None), 1024);
    }
}
