//! What the command lines of the fleet's programs share.

use std::time::Duration;

use anyhow::Context;

/// The Valkey the pods and the coordinators of a fleet share
/// (`--valkey`, `--prefix`).
#[derive(Debug, Clone, clap::Args)]
pub struct SharedValkey {
    /// Valkey URL (a pod's goes through its own fault proxy; a
    /// coordinator's is direct).
    #[arg(long)]
    pub valkey: String,
    /// Key prefix shared by the pods and the coordinators.
    #[arg(long)]
    pub prefix: String,
}

impl SharedValkey {
    /// A client of it, each command given up after `command_timeout`.
    ///
    /// # Errors
    ///
    /// A bad URL, or no connection.
    pub async fn connect(
        &self,
        command_timeout: Duration,
    ) -> anyhow::Result<coordinator::ValkeyClient> {
        coordinator::connect(&self.valkey, command_timeout)
            .await
            .context("connecting to Valkey")
    }
}
