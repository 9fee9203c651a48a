//! The scaler's signal: the coordinator's fleet-load gauges
//! (`coordinator_fleet_*` in `/metrics`) and `Registry::fleet_load()`
//! follow the pods' reported loads.

use std::sync::Arc;
use std::time::Duration;

use coordinator::strategy::RoundRobin;
use coordinator::{FleetLoad, Registry, RegistryConfig};

use crate::fleet::env_var;
use crate::{Fleet, Opts, bounded};

/// The value of the unlabelled metric `name` in Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

impl Fleet {
    /// The fleet load the first coordinator exports in `/metrics`.
    async fn exported_fleet_load(&self) -> Option<FleetLoad> {
        let url = format!("{}/metrics", self.coordinator);
        let resp = self.http.get(url.parse().unwrap()).await.ok()?;
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .ok()?;
        let text = String::from_utf8(body.to_bytes().to_vec()).ok()?;
        Some(FleetLoad {
            members: metric(&text, "coordinator_fleet_members")? as usize,
            total: metric(&text, "coordinator_fleet_load_total")? as i64,
            max: metric(&text, "coordinator_fleet_load_max")? as i64,
        })
    }

    /// The fleet load as the pods report it (`GET /pods`).
    async fn reported_fleet_load(&self) -> FleetLoad {
        let loads = self.pod_loads_via(&self.coordinator).await;
        FleetLoad {
            members: loads.len(),
            total: loads.values().sum(),
            max: loads.values().copied().max().unwrap_or(0),
        }
    }

    /// Waits until the exported gauges, the pods' reports and a registry
    /// of the test's own agree on a load that satisfies `want`.
    async fn fleet_load_settles(
        &self,
        registry: &Registry,
        want: impl Fn(&FleetLoad) -> bool,
    ) -> FleetLoad {
        let mut last = None;
        let agreed = self
            .eventually(Duration::from_secs(10), async |f| {
                let reported = f.reported_fleet_load().await;
                let exported = f.exported_fleet_load().await;
                let read = registry.fleet_load().await.unwrap();
                last = Some((reported, exported, read));
                want(&reported) && exported == Some(reported) && read == reported
            })
            .await;
        let (reported, exported, read) = last.unwrap();
        assert!(
            agreed,
            "pods report {reported:?}, /metrics says {exported:?}, fleet_load() {read:?}"
        );
        reported
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn fleet_load_gauge_follows_the_pods_reported_loads() {
    bounded(async {
        let mut f = Fleet::start(Opts {
            pool_size: 8,
            ..Opts::default()
        })
        .await;
        let valkey = coordinator::connect(&env_var("VALKEY_URL"), Duration::from_secs(5))
            .await
            .unwrap();
        let config = RegistryConfig {
            prefix: f.prefix.clone(),
            ..RegistryConfig::default()
        };
        let registry = Registry::new(valkey, config, Arc::new(RoundRobin::new())).unwrap();

        let idle = f.fleet_load_settles(&registry, |l| l.members == 3).await;
        assert_eq!((idle.total, idle.max), (0, 0), "no tenant, no connection");

        // three tenants, one per pod; then one tenant holds 5 transactions
        let owner = f.touch(&f.tenants("load", 3)).await;
        let (heavy, home) = owner.iter().next().unwrap();
        for _ in 0..5 {
            f.begin(heavy).await;
        }
        let busy = f
            .fleet_load_settles(&registry, |l| l.members == 3 && l.max >= 5)
            .await;
        assert!(busy.total >= 7, "{busy:?}");
        assert!(busy.needs_more_pods(1.0), "mean above 1 per pod: {busy:?}");

        // a pod dies: its load leaves the sum with it
        let gone = f.pods.iter().find(|p| *p != home).unwrap().clone();
        f.procs.kill(&gone);
        let after = f.fleet_load_settles(&registry, |l| l.members == 2).await;
        assert!(after.max >= 5, "the busy pod still counts: {after:?}");
        assert!(after.total < busy.total, "{after:?} after {busy:?}");
    })
    .await;
}
