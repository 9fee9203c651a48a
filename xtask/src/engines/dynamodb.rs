//! DynamoDB Local from Maven Central, run as a local JVM.
//!
//! Provisioning (cached under the work dir, done once): a generated pom
//! depending on `com.amazonaws:DynamoDBLocal`, resolved with
//! `mvn dependency:copy-dependencies` into `lib/`, which also brings the
//! sqlite4java native libraries; the linux amd64 one is copied to `native-VERSION/`
//! under the name sqlite4java looks for. The server runs in memory with a
//! shared database, and is ready when a `ListTables` call answers.

use std::{
    fs,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::Context;

use super::{Started, free_port, kill_tree, wait_ready};

/// The newest 2.x on Maven Central when this was written.
const VERSION: &str = "2.6.1";
/// The server's main class (the jar's `Main-Class`).
const MAIN_CLASS: &str = "com.amazonaws.services.dynamodbv2.local.main.ServerRunner";
/// The native library sqlite4java loads on linux amd64.
const NATIVE_LIB: &str = "libsqlite4java-linux-amd64";
/// How long the JVM may take to answer its first `ListTables`.
const READY_LIMIT: Duration = Duration::from_secs(90);

/// Provisions DynamoDB Local under `work_dir` and starts it on a free port.
pub(crate) fn start(work_dir: &Path) -> anyhow::Result<Started> {
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        anyhow::bail!(
            "local DynamoDB provisioning supports linux x86_64 only; \
             start DynamoDB Local yourself (docker compose up dynamodb) and set DYNAMODB_ENDPOINT"
        );
    }
    fs::create_dir_all(work_dir).with_context(|| format!("creating {}", work_dir.display()))?;
    let lib = provision(work_dir)?;
    let native = native_dir(work_dir, &lib)?;

    let port = free_port()?;
    let log_path = work_dir.join("dynamodb-local.log");
    let log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let native_arg = native.display().to_string();
    let mut child = Command::new("java")
        .current_dir(work_dir)
        .arg("-Xms64m")
        .arg("-Xmx384m")
        // A small, short-lived server on a busy machine: one GC thread, and
        // the quick C1 compiler only (C2 would compete with the tests for CPU).
        .arg("-XX:+UseSerialGC")
        .arg("-XX:TieredStopAtLevel=1")
        .arg(format!("-Djava.library.path={native_arg}"))
        .arg(format!("-Dsqlite4java.library.path={native_arg}"))
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg(MAIN_CLASS)
        .args(["-inMemory", "-sharedDb", "-port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting java (is a JDK 17+ installed?)")?;
    println!(
        "dynamodb: DynamoDB Local {VERSION} on port {port}, log {}",
        log_path.display()
    );

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    match wait_ready("DynamoDB Local", &mut child, READY_LIMIT, || {
        list_tables(addr).is_ok()
    }) {
        Ok(_) => Ok(Started::local(
            child,
            vec![(
                "DYNAMODB_ENDPOINT".into(),
                format!("http://127.0.0.1:{port}"),
            )],
        )),
        Err(err) => {
            kill_tree(&mut child);
            Err(err.context(format!("see {}", log_path.display())))
        }
    }
}

/// Resolves DynamoDB Local and its dependencies into `work_dir/lib-VERSION`
/// with Maven, once.
fn provision(work_dir: &Path) -> anyhow::Result<PathBuf> {
    let lib = work_dir.join(format!("lib-{VERSION}"));
    let done = lib.join(".complete");
    if done.exists() {
        return Ok(lib);
    }
    println!("dynamodb: fetching com.amazonaws:DynamoDBLocal:{VERSION} from Maven Central");
    let staging = work_dir.join(format!("lib-{VERSION}.partial"));
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    let pom_dir = work_dir.join("provision");
    fs::create_dir_all(&pom_dir)?;
    let pom = pom_dir.join("pom.xml");
    fs::write(&pom, pom_xml())?;
    let output = Command::new("mvn")
        .args(["-q", "-B", "-f"])
        .arg(&pom)
        .arg("dependency:copy-dependencies")
        .arg("-DincludeScope=runtime")
        .arg(format!("-DoutputDirectory={}", staging.display()))
        .output()
        .context("running mvn (is Maven installed?)")?;
    if !output.status.success() {
        let text = String::from_utf8_lossy(&output.stdout);
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        anyhow::bail!(
            "mvn could not fetch DynamoDB Local ({}):\n{}",
            output.status,
            tail.join("\n")
        );
    }
    fs::write(staging.join(".complete"), VERSION)?;
    if lib.exists() {
        fs::remove_dir_all(&lib)?;
    }
    fs::rename(&staging, &lib)?;
    Ok(lib)
}

/// Copies the sqlite4java linux amd64 library (`libsqlite4java-linux-amd64-<v>.so`
/// in `lib`) to `work_dir/native-VERSION/libsqlite4java-linux-amd64.so`.
fn native_dir(work_dir: &Path, lib: &Path) -> anyhow::Result<PathBuf> {
    let native = work_dir.join(format!("native-{VERSION}"));
    let target = native.join(format!("{NATIVE_LIB}.so"));
    if target.exists() {
        return Ok(native);
    }
    let source = fs::read_dir(lib)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(NATIVE_LIB) && n.ends_with(".so"))
        })
        .with_context(|| format!("no {NATIVE_LIB}*.so in {}", lib.display()))?;
    fs::create_dir_all(&native)?;
    fs::copy(&source, &target)
        .with_context(|| format!("copying {} to {}", source.display(), target.display()))?;
    Ok(native)
}

fn pom_xml() -> String {
    format!(
        r#"<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.xtask</groupId>
  <artifactId>dynamodb-local-provision</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>com.amazonaws</groupId>
      <artifactId>DynamoDBLocal</artifactId>
      <version>{VERSION}</version>
    </dependency>
  </dependencies>
</project>
"#
    )
}

/// One `ListTables` call. DynamoDB Local needs an Authorization header but
/// does not check the signature; the access key id only has to be alphanumeric.
pub(crate) fn list_tables(addr: SocketAddr) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let body = "{}";
    let request = format!(
        "POST / HTTP/1.1\r\n\
         Host: {addr}\r\n\
         Content-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=local/20000101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    if response.starts_with("HTTP/1.1 200") && response.contains("\"TableNames\"") {
        Ok(())
    } else {
        let first = response.lines().next().unwrap_or_default();
        anyhow::bail!("ListTables answered {first:?}")
    }
}
