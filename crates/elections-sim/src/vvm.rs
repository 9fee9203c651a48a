//! Whole VVMs as contenders: each process hosts a `vvm_orch::Vvm` whose
//! service pipeline acts as leader while it runs, the way a real service
//! would, and relaunches it when the VVM reports a problem (or, now and
//! then, to restart gracefully).

use std::{convert::Infallible, sync::Arc, time::Duration};

use tokio::time::sleep;
use vvm_orch::{ServiceContext, ServicePipeline, Vvm, VvmConfig};

use crate::{
    groups::Group,
    history::{EndCause, Who},
    preemptions::PreemptionBug,
    world::{SimKiller, SimStorage, World},
};

/// Acts from the moment it starts until it has stopped after its
/// shutdown signal (which takes a random while, possibly past the killer
/// deadline).
struct SimPipeline {
    world: Arc<World>,
    who: Who,
    group: Group,
}

impl ServicePipeline for SimPipeline {
    type Error = Infallible;

    fn run(&self, ctx: ServiceContext) -> impl Future<Output = Result<(), Infallible>> + Send {
        let (world, who, group) = (self.world.clone(), self.who, self.group);
        async move {
            world.wait_runnable(who.contender, false).await;
            if !ctx.is_shutdown_requested() {
                world.begin_interval(who, ctx.key().as_str(), ctx.fencing_token(), Some(group));
            }
            ctx.shutdown_requested().await;
            world.wait_runnable(who.contender, false).await;
            let stop = world
                .lock()
                .rng
                .between(Duration::ZERO, world.lease * 3 / 10);
            sleep(stop).await;
            world.end_interval(who, EndCause::Stopped);
            Ok(())
        }
    }
}

/// The host process of one incarnation: launch, wait for a problem (or a
/// planned restart), shut down, launch again. Its lock's keys are
/// `prefix1..`, its cluster size `group.size`.
///
/// With `priority` (seeds with priorities): its priority and minimum
/// tenure; the hold-down is the default (two leases). `bug`: a negative
/// control (its VVM preempts before the hold-down or within its tenure).
pub(crate) async fn vvm_host(
    world: Arc<World>,
    prefix: String,
    group: Group,
    who: Who,
    priority: Option<(i32, Duration)>,
    bug: Option<PreemptionBug>,
) {
    let d = world.lease;
    loop {
        world.wait_runnable(who.contender, false).await;
        let mut config = VvmConfig::new(format!("c{}-i{}", who.contender, who.incarnation));
        config.cluster_size = group.size;
        config.key_prefix.clone_from(&prefix);
        config.leadership_duration = d;
        config.acquisition_duration = d * 100;
        config.acquisition_retry_pause = d / 20;
        if let Some((priority, min_tenure)) = priority {
            config.priority = priority;
            config.min_tenure = Some(min_tenure);
            // Negative controls: what the request checker must catch.
            match bug {
                Some(PreemptionBug::NoHoldDown) => config.preempt_after = Some(d / 20),
                Some(PreemptionBug::NoMinTenure) => config.min_tenure = Some(Duration::ZERO),
                _ => {}
            }
        }
        let storage = SimStorage {
            world: world.clone(),
            who,
        };
        let pipeline = SimPipeline {
            world: world.clone(),
            who,
            group,
        };
        let vvm = match Vvm::provide(config, storage, pipeline) {
            Ok(vvm) => vvm.with_killer(Arc::new(SimKiller {
                world: world.clone(),
                who,
            })),
            Err(err) => {
                tracing::error!(%err, "bad simulated VVM config");
                return;
            }
        };
        let (launched, problem) = vvm.launch();
        let hold = world.lock().rng.between(d * 2, d * 10);
        tokio::select! {
            biased;
            () = problem.raised() => {}
            () = sleep(hold) => {}
        }
        world.wait_runnable(who.contender, false).await;
        if launched.shutdown().await.is_err() {
            // A supervisor restarts a failed host after a pause (a node of
            // another cluster size is refused at once, again and again).
            let pause = world.lock().rng.between(d / 20, d / 2);
            sleep(pause).await;
        }
    }
}
