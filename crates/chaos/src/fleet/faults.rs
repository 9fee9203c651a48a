//! The faults of a fleet run, in turn, and the reply delays of the first
//! coordinator all along.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use coordinator::DestinationId;

use super::{delay_proxy::DelayProxy, run::Fleet};

/// Switches the first coordinator's reply delays on and off for the whole
/// run: on for `ttl` (each reply 100-800 ms late: its reads and the scripts
/// it runs on them are seconds apart, heartbeats and record expiries in
/// between), off for half of it.
pub(super) async fn delay_windows(proxy: Arc<DelayProxy>, ttl: Duration, windows: Arc<AtomicU64>) {
    let range = (Duration::from_millis(100), Duration::from_millis(800));
    loop {
        proxy.delay_replies(Some(range));
        windows.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(ttl).await;
        proxy.delay_replies(None);
        tokio::time::sleep(ttl / 2).await;
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Cut,
    KillPod,
    Pause,
    KillCoordinator,
    Deregister,
}

/// `DELETE`s in one deregistration round.
const DEREGISTRATIONS_PER_ROUND: usize = 4;

impl Fleet<'_> {
    pub(super) async fn faults_loop(&mut self) -> anyhow::Result<()> {
        let ttl = self.config.ttl;
        let hold = ttl * 3 / 2;
        let end = tokio::time::Instant::now() + self.config.duration;
        let plan = [
            Fault::Cut,
            Fault::KillPod,
            Fault::Pause,
            Fault::KillCoordinator,
            Fault::Deregister,
        ];
        // let first touch bind the destinations
        self.pass(ttl).await?;
        let mut round = 0usize;
        while tokio::time::Instant::now() < end {
            let fault = plan[round % plan.len()];
            let pod = (round / plan.len() + round) % self.pods.len();
            round += 1;
            match fault {
                Fault::Cut => {
                    let slot = &self.pods[pod];
                    let name = slot.proc.as_ref().map_or("-".into(), |p| p.name.clone());
                    slot.proxy.cut().await;
                    self.faults.cuts += 1;
                    self.note(&format!("cut pod {name} from Valkey"));
                    self.pass(hold).await?;
                    self.pods[pod].proxy.restore();
                    self.note(&format!("restored pod {name}'s path to Valkey"));
                }
                Fault::KillPod => {
                    // every other kill restarts the pod under the same id
                    let same_id = self.faults.pod_kills % 2 == 1;
                    if same_id {
                        // a pod that hangs and is then restarted (a liveness
                        // probe, a fixed POD_ID): while it is stopped its
                        // record expires and its destinations move, but the
                        // calls routed to it hang instead of being refused,
                        // so coordinators keep its routes cached; the new
                        // process gets them at the old address
                        if let Some(proc) = self.pods[pod].proc.as_ref() {
                            let name = proc.name.clone();
                            proc.signal("STOP").await?;
                            self.note(&format!(
                                "SIGSTOPped pod {name} (to restart it under its id)"
                            ));
                            self.pass(hold).await?;
                        }
                    }
                    if let Some(mut proc) = self.pods[pod].proc.take() {
                        proc.kill().await;
                        self.faults.pod_kills += 1;
                        self.note(&format!("SIGKILLed pod {}", proc.name));
                    }
                    self.start_pod(pod, same_id).await?;
                    if same_id {
                        self.faults.same_id_restarts += 1;
                        self.note("(restarted under the same id)");
                    }
                }
                Fault::Pause => {
                    if let Some(proc) = self.pods[pod].proc.as_ref() {
                        let name = proc.name.clone();
                        proc.signal("STOP").await?;
                        self.faults.pauses += 1;
                        self.note(&format!("SIGSTOPped pod {name}"));
                        self.pass(hold).await?;
                        if let Some(proc) = self.pods[pod].proc.as_ref() {
                            proc.signal("CONT").await?;
                        }
                        self.note(&format!("SIGCONTed pod {name}"));
                    }
                }
                Fault::KillCoordinator => {
                    let index = round % self.coordinators.len();
                    self.set_address(index, None);
                    if let Some(mut proc) = self.coordinators[index].proc.take() {
                        proc.kill().await;
                        self.faults.coordinator_kills += 1;
                        self.note(&format!("SIGKILLed coordinator {}", proc.name));
                    }
                    self.start_coordinator(index).await?;
                }
                Fault::Deregister => {
                    // a burst on distinct destinations, through the first
                    // coordinator (whose Valkey replies are delayed in
                    // windows): each `UNBIND` may land after the load's
                    // next call has claimed the destination again
                    for n in 0..DEREGISTRATIONS_PER_ROUND {
                        self.deregister(round * DEREGISTRATIONS_PER_ROUND + n).await;
                        tokio::time::sleep(ttl / 4).await;
                    }
                }
            }
            self.pass(ttl).await?;
        }
        Ok(())
    }

    /// `DELETE /destinations/d<n>` through the first coordinator: its pod
    /// tears it down and leaves it, the set is deleted; the load's next call
    /// claims it again, while the other coordinator may still have the old
    /// route cached.
    async fn deregister(&mut self, round: usize) {
        let Some(base) = self
            .addresses
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .first()
            .cloned()
            .flatten()
        else {
            return;
        };
        let name = format!("d{}", round % self.config.destinations.max(1));
        let (Ok(dest), Ok(client)) = (
            DestinationId::new(name.clone()),
            coordinator::client::CoordinatorClient::new(&base),
        ) else {
            return;
        };
        match client.call(&dest, http::Method::DELETE, "", "").await {
            Ok(resp) => {
                if resp.status.is_success() {
                    self.faults.deregistrations += 1;
                }
                self.note(&format!("DELETE /destinations/{name}: {}", resp.status));
            }
            Err(err) => self.note(&format!("DELETE /destinations/{name} failed: {err}")),
        }
    }
}
