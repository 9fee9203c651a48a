//! The coordinator's HTTP side: what it holds. Its routes are in
//! [`routes`](super::routes), one file per route; the forwarding step they
//! share (and its one retry) in [`call`](super::call).

use std::sync::Arc;

use super::config::CoordinatorConfig;
use super::forward::Forwarder;
use super::hook::ResultHook;
use crate::registry::Registry;

/// Routes calls by destination or lock and forwards them to the owning pod.
/// Cheap to clone.
///
/// The coordinator's own answers are JSON `{"error", "code"}` bodies
/// ([`ApiError`](super::ApiError)); the table of every route and status is
/// `docs/coordinator-http.md`. Which pod serves a call is the
/// [`Registry`]'s decision; the handlers ask it and forward.
#[derive(Clone)]
pub struct Coordinator {
    pub(super) registry: Registry,
    pub(super) forwarder: Forwarder,
    pub(super) config: CoordinatorConfig,
    pub(super) hooks: Arc<[Arc<dyn ResultHook>]>,
}

/// The coordinator as the routes' axum state.
pub(super) type Shared = axum::extract::State<Coordinator>;

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("registry", &self.registry)
            .field("forwarder", &self.forwarder)
            .field("config", &self.config)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

impl Coordinator {
    /// A coordinator over `registry`, forwarding with `forwarder`.
    pub fn new(registry: Registry, forwarder: Forwarder, config: CoordinatorConfig) -> Self {
        Self {
            registry,
            forwarder,
            config,
            hooks: Arc::new([]),
        }
    }

    /// Adds a [`ResultHook`] that sees every forwarding attempt's result
    /// (after the hooks added before it).
    pub fn with_result_hook(mut self, hook: Arc<dyn ResultHook>) -> Self {
        let mut hooks = self.hooks.to_vec();
        hooks.push(hook);
        self.hooks = hooks.into();
        self
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The forwarder.
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }
}
