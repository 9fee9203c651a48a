//! The built-in demo service: logs the key it leads once a second.

use std::{convert::Infallible, time::Duration};

use vvm_orch::{ServiceContext, ServicePipeline};

/// Logs the key it leads, once a second, until asked to stop.
pub(crate) struct DemoPipeline;

impl ServicePipeline for DemoPipeline {
    type Error = Infallible;

    async fn run(&self, ctx: ServiceContext) -> Result<(), Infallible> {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut beats: u64 = 0;
        loop {
            tokio::select! {
                () = ctx.shutdown_requested() => break,
                _ = tick.tick() => {
                    beats += 1;
                    tracing::info!(key = %ctx.key(), fencing_token = ctx.fencing_token(), beats, "demo service: leading");
                }
            }
        }
        tracing::info!(key = %ctx.key(), "demo service stopped");
        Ok(())
    }
}
