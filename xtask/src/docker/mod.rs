//! `cargo xtask test-drivers --docker`: the same engines, each in a
//! container started through `testcontainers`, setting the same environment
//! variables as its process twin (so the same suites run unchanged).
//!
//! Each engine's image is the official one unless `TTL_IMAGE_<ENGINE>` names
//! another (e.g. `TTL_IMAGE_VALKEY=local/valkey:ci`, built by
//! `.ci/docker.sh`). Ports are published on 127.0.0.1 only, on ports Docker
//! picks. A container is removed when its [`Started`] is dropped, which
//! happens on success, on error and while a panic unwinds; `testcontainers`'
//! watchdog also removes it on SIGINT/SIGTERM. ScyllaDB runs only this way.

mod engines;

use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use testcontainers::{
    Container, GenericImage, ImageExt,
    bollard::models::PortBinding,
    core::{AccessMode, IntoContainerPort, Mount},
    runners::SyncRunner,
};

use crate::engines::{Engine, Started};

/// Label on every container this module starts (besides testcontainers' own).
const LABEL: (&str, &str) = ("ttl-cluster.xtask", "test-drivers");

/// The engines of `engines::all()` (same suites, same default list), each
/// started in a container, plus ScyllaDB, which has only this route. An
/// engine without a container route fails if selected.
pub(crate) fn engines() -> Vec<Engine> {
    let mut out = Vec::new();
    for mut engine in crate::engines::all() {
        let route: Option<fn(&Path) -> anyhow::Result<Started>> = match engine.name {
            "mem-real-time" => Some(engine.start), // in-process, nothing to containerise
            "cassandra" => Some(engines::cassandra),
            "dynamodb" => Some(engines::dynamodb),
            "valkey" => Some(engines::valkey),
            "postgres" => Some(engines::postgres),
            "etcd" => Some(engines::etcd),
            "pg-example" => Some(engines::pg_example),
            // e.g. cassandra-3: a cluster of local processes on 127.0.0.1-3
            _ => None,
        };
        // An engine without a container route is not in the default list
        // here; selected by name, it fails saying so.
        engine.default &= route.is_some();
        engine.start = route.unwrap_or(no_container_route);
        // A degraded round breaks processes we started; none here.
        engine.degraded = None;
        let scylla = (engine.name == "cassandra").then_some(Engine {
            name: "scylla",
            endpoint_var: engine.endpoint_var,
            endpoint_aliases: engine.endpoint_aliases,
            passthrough_vars: engine.passthrough_vars,
            start: engines::scylla,
            suites: engine.suites,
            default: engine.default,
            degraded: None,
        });
        out.push(engine);
        out.extend(scylla);
    }
    out
}

/// For an engine that runs only as local processes: fails, if selected.
fn no_container_route(_work_dir: &Path) -> anyhow::Result<Started> {
    anyhow::bail!("no container route for this engine; run it without --docker")
}

/// What to run: an image (overridable), its ports, environment and command.
struct Spec {
    /// Engine name; `TTL_IMAGE_<NAME>` overrides `image`.
    name: &'static str,
    image: &'static str,
    ports: Vec<u16>,
    env: Vec<(&'static str, String)>,
    entrypoint: Option<&'static str>,
    cmd: Option<Vec<String>>,
    /// Ports published on the same port number of the host (for servers
    /// that tell clients their own port), the others on ports Docker picks.
    same_port: Vec<u16>,
    /// `(host dir, container dir)`, mounted read-only.
    mounts: Vec<(String, String)>,
}

impl Spec {
    fn new(name: &'static str, image: &'static str, ports: &[u16]) -> Self {
        Spec {
            name,
            image,
            ports: ports.to_vec(),
            env: Vec::new(),
            entrypoint: None,
            cmd: None,
            same_port: Vec::new(),
            mounts: Vec::new(),
        }
    }
}

/// A started container and the host ports its ports are published on.
struct Running {
    container: Container<GenericImage>,
    ports: HashMap<u16, u16>,
    image: String,
}

impl Running {
    fn port(&self, container_port: u16) -> anyhow::Result<u16> {
        self.ports
            .get(&container_port)
            .copied()
            .with_context(|| format!("port {container_port} is not published"))
    }

    /// Polls `ready` (a real query against the published ports) every
    /// 500 ms until it holds, the container exits, or `limit` passes; on
    /// failure the error carries the container's last log lines.
    fn wait_ready(&self, limit: Duration, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if ready() {
                println!(
                    "{}: ready after {:.1}s",
                    self.image,
                    started.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            let why = if !self.container.is_running().unwrap_or(false) {
                Some("exited before it was ready".to_string())
            } else if started.elapsed() > limit {
                Some(format!("was not ready after {limit:?}"))
            } else {
                None
            };
            if let Some(why) = why {
                anyhow::bail!("{} {why}; last log lines:\n{}", self.image, self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn log_tail(&self) -> String {
        log_tail(&self.container)
    }

    /// The engine for the suites: `env`, and the container removed on drop.
    fn into_started(self, env: Vec<(String, String)>) -> Started {
        Started::external(env).with_guard(self.container)
    }
}

/// The last lines the container wrote to stdout and stderr.
fn log_tail(container: &Container<GenericImage>) -> String {
    let mut out = String::new();
    for (stream, bytes) in [
        ("stdout", container.stdout_to_vec()),
        ("stderr", container.stderr_to_vec()),
    ] {
        let text = bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
        let text = text.unwrap_or_else(|e| format!("(no logs: {e})"));
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(20);
        out.push_str(&format!("--- {stream}\n{}\n", lines[from..].join("\n")));
    }
    out
}

/// `repo[:tag]` (a registry host's `:port` is not a tag).
fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

/// `TTL_IMAGE_<NAME>`, upper case, `-` as `_`.
fn image_var(name: &str) -> String {
    format!("TTL_IMAGE_{}", name.to_uppercase().replace('-', "_"))
}

/// Starts `spec`'s container (the image must exist locally or be pullable).
fn start(spec: Spec) -> anyhow::Result<Running> {
    let var = image_var(spec.name);
    let image = match std::env::var(&var) {
        Ok(image) if !image.is_empty() => image,
        _ => spec.image.to_string(),
    };
    let (repo, tag) = split_image(&image);
    let mut generic = GenericImage::new(repo, tag);
    for port in &spec.ports {
        generic = generic.with_exposed_port(port.tcp());
    }
    if let Some(entrypoint) = spec.entrypoint {
        generic = generic.with_entrypoint(entrypoint);
    }
    let ports = spec.ports.clone();
    let same_port = spec.same_port.clone();
    let mut request = generic
        .with_label(LABEL.0, LABEL.1)
        .with_startup_timeout(Duration::from_secs(300))
        // Published on the loopback interface only.
        .with_host_config_modifier(move |host| {
            host.publish_all_ports = Some(false);
            host.port_bindings = Some(
                ports
                    .iter()
                    .map(|p| {
                        let binding = PortBinding {
                            host_ip: Some("127.0.0.1".into()),
                            host_port: same_port.contains(p).then(|| p.to_string()),
                        };
                        (format!("{p}/tcp"), Some(vec![binding]))
                    })
                    .collect(),
            );
        });
    for (key, value) in spec.env {
        request = request.with_env_var(key, value);
    }
    for (host, target) in spec.mounts {
        request = request
            .with_mount(Mount::bind_mount(host, target).with_access_mode(AccessMode::ReadOnly));
    }
    if let Some(cmd) = spec.cmd {
        request = request.with_cmd(cmd);
    }
    println!(
        "{}: starting container {image} ({var} overrides)",
        spec.name
    );
    let container = request
        .start()
        .with_context(|| format!("starting a container of {image} (set {var} to another image)"))?;
    let mut published = HashMap::new();
    for port in &spec.ports {
        // (An image whose process exits at once has no ports any more.)
        match container.get_host_port_ipv4(port.tcp()) {
            Ok(host) => published.insert(*port, host),
            Err(err) => anyhow::bail!(
                "{image}: no host port for {port} ({err}); last log lines:\n{}",
                log_tail(&container)
            ),
        };
    }
    Ok(Running {
        container,
        ports: published,
        image,
    })
}

#[cfg(test)]
mod tests {
    use super::{engines, image_var, split_image};

    #[test]
    fn image_names() {
        assert_eq!(split_image("valkey/valkey:8"), ("valkey/valkey", "8"));
        assert_eq!(
            split_image("quay.io/coreos/etcd:v3.5"),
            ("quay.io/coreos/etcd", "v3.5")
        );
        assert_eq!(
            split_image("scylladb/scylla"),
            ("scylladb/scylla", "latest")
        );
        assert_eq!(
            split_image("localhost:5000/pg"),
            ("localhost:5000/pg", "latest")
        );
        assert_eq!(image_var("cassandra-3"), "TTL_IMAGE_CASSANDRA_3");
    }

    #[test]
    fn engines_without_a_container_route_are_not_in_the_default_list() {
        let process_route = crate::engines::all();
        let cluster = process_route.iter().find(|e| e.name == "cassandra-3");
        assert!(cluster.is_some_and(|e| e.default));
        let docker = engines();
        let cluster = docker.iter().find(|e| e.name == "cassandra-3");
        assert!(cluster.is_some_and(|e| !e.default));
        assert!(docker.iter().any(|e| e.name == "scylla" && e.default));
    }
}
