//! Who ran services when: a pipeline that records each run of its
//! services (start, and the end of its stop), for checks that two groups
//! never ran at once.
#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::time::Instant;
use vvm_orch::{ServiceContext, ServicePipeline, service_fn};

use super::Error;

/// One run of a node's services.
#[derive(Debug, Clone)]
pub struct Run {
    pub who: String,
    /// The group (cluster size) the node was started with.
    pub group: u32,
    pub start: Instant,
    /// When its stop finished; `None` while running.
    pub end: Option<Instant>,
}

/// The runs of every node of a test.
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<Vec<Run>>>);

/// Called when a node's services are told to stop (to inject a fault at
/// that moment).
pub type OnStop = Arc<dyn Fn() + Send + Sync>;

impl Ledger {
    /// Services that run until told to stop, then take `stop` to stop.
    pub fn pipeline(&self, who: &str, group: u32, stop: Duration) -> impl ServicePipeline {
        self.pipeline_with(who, group, stop, Arc::new(|| {}))
    }

    /// As [`pipeline`](Self::pipeline), calling `on_stop` when told to stop.
    pub fn pipeline_with(
        &self,
        who: &str,
        group: u32,
        stop: Duration,
        on_stop: OnStop,
    ) -> impl ServicePipeline {
        let (ledger, who) = (self.clone(), who.to_owned());
        service_fn(move |ctx: ServiceContext| {
            let (ledger, who, on_stop) = (ledger.clone(), who.clone(), on_stop.clone());
            async move {
                let index = {
                    let mut runs = ledger.0.lock().unwrap();
                    runs.push(Run {
                        who,
                        group,
                        start: Instant::now(),
                        end: None,
                    });
                    runs.len() - 1
                };
                ctx.shutdown_requested().await;
                on_stop();
                tokio::time::sleep(stop).await;
                ledger.0.lock().unwrap()[index].end = Some(Instant::now());
                Ok::<_, Error>(())
            }
        })
    }

    pub fn runs(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    /// The nodes that started services, in order.
    pub fn leaders(&self) -> Vec<String> {
        self.runs().into_iter().map(|r| r.who).collect()
    }

    /// True while `who` runs services.
    pub fn running(&self, who: &str) -> bool {
        self.runs().iter().any(|r| r.who == who && r.end.is_none())
    }

    /// Pairs of runs of different groups that overlapped in time.
    pub fn overlaps_between_groups(&self) -> Vec<(Run, Run)> {
        let runs = self.runs();
        let mut found = Vec::new();
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let a_end = a.end.unwrap_or(Instant::now());
                let b_end = b.end.unwrap_or(Instant::now());
                if a.group != b.group && a.start < b_end && b.start < a_end {
                    found.push((a.clone(), b.clone()));
                }
            }
        }
        found
    }
}
