//! Apache Cassandra 5.0 as a local process: the jars come from Maven
//! Central (`org.apache.cassandra:cassandra-all` and its runtime
//! dependencies, fetched once with `mvn dependency:copy-dependencies` and
//! cached under the work dir), the node is a single-node cluster on the
//! loopback interface with free ports, a small heap and fresh data each run;
//! clients log in (`PasswordAuthenticator`, the default superuser), so the
//! suite shows a wrong password failing plainly.

use std::{
    fs,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};

use super::{Started, free_port, wait_ready};

/// The Cassandra release started by `test-drivers`.
const CASSANDRA_VERSION: &str = "5.0.9";
/// How long the node may take to answer CQL.
const READY_LIMIT: Duration = Duration::from_secs(180);
/// Keyspace the suites use on the local node.
pub(crate) const KEYSPACE: &str = "ttl_suite";

/// JVM options from Cassandra's `conf/jvm17-server.options` (JPMS opens and
/// exports, Netty settings) plus a small fixed heap.
pub(crate) const JVM_OPTIONS: &[&str] = &[
    "-Xss256k",
    "-XX:+UseG1GC",
    "-XX:+ParallelRefProcEnabled",
    "-XX:MaxTenuringThreshold=1",
    "-XX:G1HeapRegionSize=16m",
    "-XX:MaxGCPauseMillis=300",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports",
    "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports",
    "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports",
    "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports",
    "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports",
    "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports",
    "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens",
    "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
    "-Dcassandra-foreground=yes",
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
];

/// Provisions Cassandra under `work_dir` and starts one node; `SCYLLA_URI`
/// points at it.
pub(crate) fn start(work_dir: &Path) -> anyhow::Result<Started> {
    let lib = fetch_jars(work_dir)?;
    let run = work_dir.join("run");
    if run.exists() {
        fs::remove_dir_all(&run).with_context(|| format!("removing {}", run.display()))?;
    }
    fs::create_dir_all(&run)?;
    let native_port = free_port()?;
    let storage_port = free_port()?;
    let node = Node::local(native_port, storage_port);
    let mut child = spawn_node(&lib, &run, &node)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], native_port));
    // Ready once the superuser can log in (the role is made at start-up).
    let waited = wait_ready("cassandra", &mut child, READY_LIMIT, || {
        cql_ping(addr, Some(SUPERUSER)).is_ok()
    });
    let (user, password) = SUPERUSER;
    let started = Started::local(
        child,
        vec![(
            "SCYLLA_URI".into(),
            format!(
                "scylla://{user}:{password}@127.0.0.1:{native_port}/{KEYSPACE}?replication=simple:1&create_schema=true"
            ),
        )],
    );
    match waited {
        Ok(took) => {
            println!("cassandra: answered CQL after {:.1}s", took.as_secs_f64());
            Ok(started)
        }
        Err(err) => {
            drop(started); // kills the JVM
            let tail = log_tail(&run.join("system.log"), &run.join("console.log"));
            Err(err.context(format!("cassandra did not start; last log lines:\n{tail}")))
        }
    }
}

/// One Cassandra node: where it listens and how it is tuned.
pub(crate) struct Node {
    /// Listen, RPC and CQL address (a loopback address).
    pub(crate) address: &'static str,
    /// CQL port.
    pub(crate) native_port: u16,
    /// Inter-node port (every node of a cluster uses the same one).
    pub(crate) storage_port: u16,
    /// The seed's address.
    pub(crate) seed: &'static str,
    /// `initial_token` (with `num_tokens: 1`), for a balanced ring.
    pub(crate) initial_token: Option<&'static str>,
    /// Memory-lean settings for several nodes on one small machine: 512 MiB
    /// heap, small caches and thread pools, a 5 s ring delay.
    pub(crate) lean: bool,
    /// Local JMX port (for nodetool); it always binds 127.0.0.1, so nodes of
    /// one machine need distinct ones. `None`: Cassandra's default.
    pub(crate) jmx_port: Option<u16>,
    /// A node joining a running cluster: it streams its ranges first
    /// (`auto_bootstrap: true`); the nodes of a fresh cluster, and a lean
    /// node restarted on its data, do not.
    pub(crate) bootstrap: bool,
    /// The address of a dead node this one replaces (it takes over its
    /// tokens and streams their data: `-Dcassandra.replace_address_first_boot`).
    pub(crate) replaces: Option<&'static str>,
    /// Clients log in (`PasswordAuthenticator`; the default superuser,
    /// [`SUPERUSER`], made at once and hashed cheaply); otherwise anyone
    /// may connect (`AllowAllAuthenticator`).
    pub(crate) password_auth: bool,
}

/// The superuser Cassandra makes on first start under
/// `PasswordAuthenticator` (user, password).
pub(crate) const SUPERUSER: (&str, &str) = ("cassandra", "cassandra");

impl Node {
    /// A lone node on 127.0.0.1 (its own seed) with Cassandra's defaults,
    /// clients logging in as [`SUPERUSER`] (so a wrong password can be
    /// shown to fail plainly).
    pub(crate) fn local(native_port: u16, storage_port: u16) -> Node {
        Node {
            address: "127.0.0.1",
            native_port,
            storage_port,
            seed: "127.0.0.1",
            initial_token: None,
            lean: false,
            jmx_port: None,
            bootstrap: false,
            replaces: None,
            password_auth: true,
        }
    }
}

/// Writes `run`'s configuration for `node` and starts its JVM, logging to
/// `run/console.log` and `run/system.log`. Without `CAP_IPC_LOCK` (dropped
/// with `setpriv` when we are root and it is installed) Cassandra cannot
/// mlock its heap, which keeps its resident memory small.
pub(crate) fn spawn_node(lib: &Path, run: &Path, node: &Node) -> anyhow::Result<Child> {
    let yaml = run.join("cassandra.yaml");
    fs::write(&yaml, cassandra_yaml(run, node))?;
    let logback = run.join("logback.xml");
    fs::write(&logback, logback_xml(&run.join("system.log")))?;
    let jamm = find_jar(lib, "jamm-")?;
    let console = run.join("console.log");
    let out = fs::File::create(&console)?;

    let mut cmd = if node.lean && has_setpriv() {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--bounding-set", "-ipc_lock", "java"]);
        cmd
    } else {
        Command::new("java")
    };
    let heap = if node.lean { "512m" } else { "1G" };
    cmd.arg(format!("-Xms{heap}"))
        .arg(format!("-Xmx{heap}"))
        .args(JVM_OPTIONS)
        .arg(format!(
            "-Dcassandra.ring_delay_ms={}",
            if node.lean { 5000 } else { 0 }
        ));
    if let Some(port) = node.jmx_port {
        cmd.arg(format!("-Dcassandra.jmx.local.port={port}"));
    }
    if let Some(dead) = node.replaces {
        cmd.arg(format!("-Dcassandra.replace_address_first_boot={dead}"));
    }
    if node.password_auth {
        // The superuser at once (not after 10 s), its password hashed with
        // bcrypt's fewest rounds: a login costs the suite no time.
        cmd.arg("-Dcassandra.superuser_setup_delay_ms=0")
            .arg("-Dcassandra.auth_bcrypt_gensalt_log2_rounds=4");
    }
    cmd.arg(format!("-javaagent:{}", jamm.display()))
        .arg(format!("-Dcassandra.config=file://{}", yaml.display()))
        .arg(format!(
            "-Dcassandra.storagedir={}",
            run.join("data").display()
        ))
        .arg(format!("-Dcassandra.logdir={}", run.display()))
        .arg(format!("-Dlogback.configurationFile={}", logback.display()))
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg("org.apache.cassandra.service.CassandraDaemon")
        .current_dir(run)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    println!(
        "cassandra {CASSANDRA_VERSION}: starting {}:{}, logs in {}",
        node.address,
        node.native_port,
        run.display()
    );
    cmd.spawn()
        .context("starting `java` (Cassandra 5 needs a JDK 11 or 17 on PATH)")
}

/// Whether we run as root and `setpriv` can drop `CAP_IPC_LOCK` for a child.
fn has_setpriv() -> bool {
    let root = fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    root && Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fetches `cassandra-all` and its runtime dependencies into `work_dir/lib`,
/// once: a marker file records a complete download.
pub(crate) fn fetch_jars(work_dir: &Path) -> anyhow::Result<PathBuf> {
    let lib = work_dir.join(format!("lib-{CASSANDRA_VERSION}"));
    let marker = lib.join(".complete");
    if marker.exists() {
        return Ok(lib);
    }
    let maven = work_dir.join("maven");
    fs::create_dir_all(&maven)?;
    fs::write(maven.join("pom.xml"), pom_xml())?;
    println!(
        "cassandra {CASSANDRA_VERSION}: fetching jars from Maven Central into {}",
        lib.display()
    );
    let status = Command::new("mvn")
        .args([
            "-q",
            "-B",
            "-Dstyle.color=never",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
        ])
        .arg(format!("-DoutputDirectory={}", lib.display()))
        .current_dir(&maven)
        .status()
        .context("running `mvn` (Maven is needed to fetch Cassandra's jars)")?;
    if !status.success() {
        bail!("mvn dependency:copy-dependencies failed ({status})");
    }
    find_jar(&lib, "cassandra-all-")?;
    fs::write(&marker, CASSANDRA_VERSION)?;
    Ok(lib)
}

fn find_jar(lib: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    for entry in fs::read_dir(lib).with_context(|| format!("reading {}", lib.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(prefix) && name.ends_with(".jar") {
            return Ok(path);
        }
    }
    bail!("no {prefix}*.jar in {}", lib.display())
}

fn pom_xml() -> String {
    format!(
        r#"<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.xtask</groupId>
  <artifactId>cassandra-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>{CASSANDRA_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"#
    )
}

/// A node's configuration: loopback only, no auth, Paxos v2, timeouts
/// generous enough for a busy 2-core machine; small caches and pools when
/// `node.lean`.
fn cassandra_yaml(run: &Path, node: &Node) -> String {
    let data = run.join("data");
    let d = |sub: &str| data.join(sub).display().to_string();
    let mut yaml = format!(
        r#"cluster_name: xtask
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: org.apache.cassandra.locator.SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seed}:{storage_port}"
listen_address: {address}
rpc_address: {address}
storage_port: {storage_port}
start_native_transport: true
native_transport_port: {native_port}
authenticator: {authenticator}
authorizer: AllowAllAuthorizer
data_file_directories:
  - {data_dir}
commitlog_directory: {commitlog}
hints_directory: {hints}
saved_caches_directory: {caches}
cdc_raw_directory: {cdc}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
disk_access_mode: mmap_index_only
concurrent_compactors: 1
paxos_variant: v2
cas_contention_timeout: 5000ms
write_request_timeout: 5000ms
read_request_timeout: 5000ms
range_request_timeout: 10000ms
request_timeout: 10000ms
"#,
        seed = node.seed,
        address = node.address,
        storage_port = node.storage_port,
        native_port = node.native_port,
        authenticator = if node.password_auth {
            "PasswordAuthenticator"
        } else {
            "AllowAllAuthenticator"
        },
        data_dir = d("data"),
        commitlog = d("commitlog"),
        hints = d("hints"),
        caches = d("saved_caches"),
        cdc = d("cdc_raw"),
    );
    if let Some(token) = node.initial_token {
        yaml.push_str(&format!("initial_token: {token}\n"));
    }
    if node.lean && !node.bootstrap {
        yaml.push_str("auto_bootstrap: false\n");
    }
    if node.lean {
        yaml.push_str(
            "auto_snapshot: false
concurrent_reads: 4
concurrent_writes: 4
concurrent_counter_writes: 2
concurrent_materialized_view_writes: 2
memtable_flush_writers: 1
native_transport_max_threads: 32
max_hints_delivery_threads: 1
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
key_cache_size: 8MiB
counter_cache_size: 0MiB
file_cache_size: 32MiB
networking_cache_size: 16MiB
index_summary_capacity: 8MiB
",
        );
    } else {
        yaml.push_str("concurrent_reads: 8\nconcurrent_writes: 16\n");
    }
    yaml
}

fn logback_xml(log: &Path) -> String {
    format!(
        r#"<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{}</file>
    <encoder><pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"#,
        log.display()
    )
}

pub(crate) fn log_tail(system_log: &Path, console: &Path) -> String {
    let mut out = String::new();
    for path in [system_log, console] {
        if let Ok(text) = fs::read_to_string(path) {
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(15);
            out.push_str(&format!(
                "--- {}\n{}\n",
                path.display(),
                lines[from..].join("\n")
            ));
        }
    }
    out
}

/// A real CQL round trip over the native protocol (v4): STARTUP (and, when
/// the node asks for it, a login as `login`: SASL PLAIN), then
/// `SELECT release_version FROM system.local`, expecting a RESULT.
pub(crate) fn cql_ping(addr: SocketAddr, login: Option<(&str, &str)>) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;

    let mut startup = Vec::new();
    startup.extend_from_slice(&1u16.to_be_bytes());
    put_string(&mut startup, "CQL_VERSION");
    put_string(&mut startup, "3.0.0");
    let (opcode, _) = request(&mut stream, 1, OPCODE_STARTUP, &startup)?;
    match (opcode, login) {
        (OPCODE_READY, _) => {}
        (OPCODE_AUTHENTICATE, Some((user, password))) => {
            let token = format!("\0{user}\0{password}");
            let mut body = Vec::new();
            body.extend_from_slice(&u32::try_from(token.len())?.to_be_bytes());
            body.extend_from_slice(token.as_bytes());
            let (opcode, answer) = request(&mut stream, 2, OPCODE_AUTH_RESPONSE, &body)?;
            if opcode != OPCODE_AUTH_SUCCESS {
                bail!(
                    "login as {user} answered with opcode {opcode:#x}: {}",
                    String::from_utf8_lossy(&answer)
                );
            }
        }
        (OPCODE_AUTHENTICATE, None) => bail!("the node asks for a login"),
        (opcode, _) => bail!("STARTUP answered with opcode {opcode:#x}"),
    }

    let query = "SELECT release_version FROM system.local";
    let mut body = Vec::new();
    body.extend_from_slice(&u32::try_from(query.len())?.to_be_bytes());
    body.extend_from_slice(query.as_bytes());
    body.extend_from_slice(&1u16.to_be_bytes()); // consistency ONE
    body.push(0); // no flags
    let (opcode, answer) = request(&mut stream, 3, OPCODE_QUERY, &body)?;
    if opcode != OPCODE_RESULT {
        bail!(
            "QUERY answered with opcode {opcode:#x}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    Ok(())
}

const OPCODE_STARTUP: u8 = 0x01;
const OPCODE_READY: u8 = 0x02;
const OPCODE_AUTHENTICATE: u8 = 0x03;
const OPCODE_AUTH_RESPONSE: u8 = 0x0f;
const OPCODE_AUTH_SUCCESS: u8 = 0x10;
const OPCODE_QUERY: u8 = 0x07;
const OPCODE_RESULT: u8 = 0x08;

fn put_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u16).to_be_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Sends one protocol-v4 frame and reads the answer: `(opcode, body)`.
fn request(
    stream: &mut TcpStream,
    id: i16,
    opcode: u8,
    body: &[u8],
) -> anyhow::Result<(u8, Vec<u8>)> {
    let mut frame = vec![0x04, 0x00];
    frame.extend_from_slice(&id.to_be_bytes());
    frame.push(opcode);
    frame.extend_from_slice(&u32::try_from(body.len())?.to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame)?;
    let mut header = [0u8; 9];
    stream.read_exact(&mut header)?;
    let len = u32::from_be_bytes([header[5], header[6], header[7], header[8]]);
    if len > 1 << 20 {
        bail!("answer frame too long ({len} bytes)");
    }
    let mut answer = vec![0u8; len as usize];
    stream.read_exact(&mut answer)?;
    Ok((header[4], answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_uses_the_given_ports_and_dirs() {
        let node = Node::local(1111, 2222);
        let yaml = cassandra_yaml(Path::new("/w/run"), &node);
        assert!(yaml.contains("native_transport_port: 1111\n"));
        assert!(yaml.contains("storage_port: 2222\n"));
        assert!(yaml.contains("seeds: \"127.0.0.1:2222\""));
        assert!(yaml.contains("  - /w/run/data/data\n"));
        assert!(yaml.contains("commitlog_directory: /w/run/data/commitlog\n"));
        assert!(pom_xml().contains(&format!("<version>{CASSANDRA_VERSION}</version>")));
    }

    #[test]
    fn ping_fails_without_a_server() {
        let port = free_port().unwrap();
        assert!(cql_ping(SocketAddr::from(([127, 0, 0, 1], port)), None).is_err());
    }
}
