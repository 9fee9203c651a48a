//! The handlers' settings: first touch, failover and the request body limit.

use crate::registry::ResolveOptions;

/// Behaviour of the handlers; built with [`CoordinatorConfig::builder`].
///
/// Defaults follow the design: a call to a destination nobody owns yet
/// claims a live member (*first touch*), and a destination whose members
/// are all dead is reassigned (*failover*).
///
/// ```
/// use coordinator::http::CoordinatorConfig;
///
/// // opt out of first touch: unbound destinations answer 404 until a
/// // `PUT /destinations/{d}` binds them
/// let config = CoordinatorConfig::builder().claim_on_miss(false).build();
/// assert!(!config.lookup().claim_on_miss);
/// assert!(CoordinatorConfig::default().lookup().claim_on_miss);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoordinatorConfig {
    lookup: ResolveOptions,
    max_request_body: Option<u64>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl CoordinatorConfig {
    /// A builder starting from the defaults (first touch and failover on).
    pub fn builder() -> CoordinatorConfigBuilder {
        CoordinatorConfigBuilder {
            lookup: ResolveOptions {
                claim_on_miss: true,
                reassign_orphans: true,
            },
            max_request_body: None,
        }
    }

    /// The resolution used by *lookup and proxy*.
    pub fn lookup(&self) -> ResolveOptions {
        self.lookup
    }

    /// The largest request body forwarded, if limited.
    pub fn max_request_body(&self) -> Option<u64> {
        self.max_request_body
    }
}

/// Builds a [`CoordinatorConfig`].
#[derive(Clone, Copy, Debug)]
pub struct CoordinatorConfigBuilder {
    lookup: ResolveOptions,
    max_request_body: Option<u64>,
}

impl CoordinatorConfigBuilder {
    /// First touch (default on): a call to an unbound destination claims a
    /// live member with the strategy. Off: such calls answer 404
    /// `unknown_destination` until `PUT /destinations/{d}` binds one.
    pub fn claim_on_miss(mut self, on: bool) -> Self {
        self.lookup.claim_on_miss = on;
        self
    }

    /// Failover (default on): a destination whose members are all dead gets
    /// a fresh live member. Off: such calls answer 503 `no_live_member`.
    pub fn reassign_orphans(mut self, on: bool) -> Self {
        self.lookup.reassign_orphans = on;
        self
    }

    /// Largest request body to forward (default: unlimited, bodies are
    /// streamed). A larger `content-length` answers 413 `payload_too_large`
    /// before anything is forwarded; a streamed body that grows past it is
    /// cut off and answers 413 too.
    pub fn max_request_body(mut self, bytes: u64) -> Self {
        self.max_request_body = Some(bytes);
        self
    }

    /// The configuration.
    pub fn build(self) -> CoordinatorConfig {
        CoordinatorConfig {
            lookup: self.lookup,
            max_request_body: self.max_request_body,
        }
    }
}
