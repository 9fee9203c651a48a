//! A throwaway Kubernetes API server on 127.0.0.1, for storage-kube's
//! suite (leases as `coordination.k8s.io/v1` Lease objects) and vvm-host's
//! failover suite on it.
//!
//! No cluster, no kubelet, no container: just the API server and its
//! store. [`start`] takes kube-apiserver from [`ensure_apiserver`] (built
//! from source with Go once per target directory, see [`build`]), starts a
//! plaintext single-member etcd on a free loopback port (Debian's
//! `etcd-server`, fresh data directory), then kube-apiserver on another
//! free port with:
//!
//! - a serving certificate for `127.0.0.1` from a throwaway CA
//!   ([`super::tls`]);
//! - an RSA service-account key pair (`openssl genrsa`), which it requires;
//! - two static tokens (random, in a `--token-auth-file`): user `xtask` in
//!   group `system:masters` sets up, and user `elector`, whose only
//!   permissions are the Role the READMEs document (the namespace's
//!   `leases`: get, list, watch, create, update, delete), is the suites'
//!   identity; anonymous requests refused;
//! - `--authorization-mode=RBAC` and `--endpoint-reconciler-type=none`
//!   (the default reconciler refuses to advertise a loopback address).
//!
//! It waits until `GET /api/v1/namespaces/default` with the token answers
//! 200 (through `curl`, trusting the CA; about 2 s after start: before
//! that, a Lease POST may answer 404), writes a kubeconfig (context
//! `xtask`, namespace `default`), and returns:
//!
//! - `KUBE_URL=kube://default?server=https://127.0.0.1:<port>&ca_file=<ca.pem>&token_file=<token>`
//! - `KUBE_KUBECONFIG=<kubeconfig>`, and the same as `KUBECONFIG`
//! - `KUBE_SERVER=https://127.0.0.1:<port>`
//! - `KUBE_CA_FILE=<ca.pem>`
//! - `KUBE_TOKEN_FILE=<file holding just the token>`
//!
//! Everything but the logs lives in `<work_dir>/run-<port>`, removed when
//! the engine stops.

mod build;

use std::{
    fs::File,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use build::VERSION;
pub(crate) use build::ensure_apiserver;

use super::{
    LogTo, Started,
    etcd::{self, DataDir},
    free_port, wait_ready,
};

/// How long kube-apiserver may take to answer (about 2 s when idle).
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The namespace of the URL and the kubeconfig's context.
const NAMESPACE: &str = "default";

/// `cargo xtask build-kube-apiserver`: only [`ensure_apiserver`], for CI to
/// run in the background ahead of `test-drivers`.
pub(crate) fn build_command() -> Result<()> {
    let started = Instant::now();
    let binary = ensure_apiserver(&super::work_dir().join("kube"))?;
    println!(
        "kube-apiserver {VERSION}: {} ({:.1}s)",
        binary.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Starts etcd and kube-apiserver (logs in `work_dir`); see the module docs.
pub(crate) fn start(work_dir: &Path) -> Result<Started> {
    let apiserver = ensure_apiserver(work_dir)?;
    curl_version()?;
    let port = free_port()?;
    let run = work_dir.join(format!("run-{port}"));
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).with_context(|| format!("cannot create {}", run.display()))?;
    // Dropped on every early return below: the directory goes, etcd is killed.
    let run_dir = DataDir(run.clone());
    let etcd_member = etcd::start_plain(&etcd::find_binary()?, work_dir, "xtask-kube")?;
    let etcd_url = format!("http://127.0.0.1:{}", etcd_member.port);
    let etcd_started =
        Started::local(etcd_member.child, Vec::new()).with_guard(DataDir(etcd_member.data));

    let files = Files::write(&run)?;
    let log_path = work_dir.join(format!("kube-apiserver-{port}.log"));
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = Command::new(&apiserver)
        .arg(format!("--etcd-servers={etcd_url}"))
        .args([
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--secure-port={port}"),
        ])
        .arg(flag("--cert-dir", &run.join("cert-dir")))
        .arg(flag("--tls-cert-file", &files.cert))
        .arg(flag("--tls-private-key-file", &files.key))
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(flag("--service-account-key-file", &files.sa_public))
        .arg(flag(
            "--service-account-signing-key-file",
            &files.sa_private,
        ))
        .arg(flag("--token-auth-file", &files.tokens))
        .args([
            "--anonymous-auth=false",
            "--authorization-mode=RBAC",
            "--endpoint-reconciler-type=none",
        ])
        .log_to(log)?
        .spawn()
        .with_context(|| format!("cannot run {}", apiserver.display()))?;
    let server = format!("https://127.0.0.1:{port}");
    let ready = wait_ready("kube-apiserver", &mut child, READY_TIMEOUT, || {
        answers_200(&server, &files)
    });
    let ready = ready.and_then(|took| {
        grant_the_role(&server, &files)?;
        Ok(took)
    });
    let took = match ready {
        Ok(took) => took,
        Err(err) => {
            super::kill_tree(&mut child);
            return Err(err.context(format!("see {}", log_path.display())));
        }
    };
    println!(
        "kube: kube-apiserver {VERSION} ready in {:.1}s on {server} (etcd {etcd_url})",
        took.as_secs_f64()
    );
    let kubeconfig = run.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        kubeconfig_text(&server, &files.ca, &files.token),
    )
    .with_context(|| format!("cannot write {}", kubeconfig.display()))?;
    let url = format!(
        "kube://{NAMESPACE}?server={}&ca_file={}&token_file={}",
        query_value(&server),
        query_value(&path_text(&files.ca)),
        query_value(&path_text(&files.token_file)),
    );
    let env = vec![
        ("KUBE_URL".to_string(), url),
        ("KUBE_KUBECONFIG".to_string(), path_text(&kubeconfig)),
        // What `kubectl` and `kube://NAMESPACE` read (vvm-host's case).
        ("KUBECONFIG".to_string(), path_text(&kubeconfig)),
        ("KUBE_SERVER".to_string(), server),
        ("KUBE_CA_FILE".to_string(), path_text(&files.ca)),
        ("KUBE_TOKEN_FILE".to_string(), path_text(&files.token_file)),
    ];
    // The API server is killed before its etcd.
    Ok(Started::local(child, env)
        .with_guard(run_dir)
        .merge(etcd_started))
}

/// `--name=<path>`.
fn flag(name: &str, path: &Path) -> String {
    format!("{name}={}", path.display())
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

/// The files kube-apiserver and its clients need, under the run directory.
struct Files {
    /// The CA clients trust.
    ca: PathBuf,
    /// The serving certificate (`127.0.0.1`, `localhost`) and its key.
    cert: PathBuf,
    key: PathBuf,
    /// The service-account signing key and its public half.
    sa_private: PathBuf,
    sa_public: PathBuf,
    /// `token,user,uid,"group"`: kube-apiserver's static tokens.
    tokens: PathBuf,
    /// The suites' bearer token: user `elector`, who may only use the
    /// namespace's Leases ([`ROLE`]).
    token: String,
    /// A file holding just the suites' token (no newline).
    token_file: PathBuf,
    /// `Authorization: Bearer <admin token>` (user `xtask` in
    /// `system:masters`), for `curl -H @file`: readiness and the Role (the
    /// tokens stay off command lines).
    header_file: PathBuf,
    /// The same with the suites' token.
    elector_header_file: PathBuf,
}

/// The Role the suites' identity gets, as documented for users
/// (`storage-kube`'s and `vvm-host`'s READMEs): nothing but the Leases of
/// the namespace. The suites pass with it, so it is enough.
const ROLE: &str = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role",
"metadata":{"name":"ttl-leases","namespace":"default"},
"rules":[{"apiGroups":["coordination.k8s.io"],"resources":["leases"],
"verbs":["get","list","watch","create","update","delete"]}]}"#;

/// Binds [`ROLE`] to user `elector`.
const ROLE_BINDING: &str = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",
"metadata":{"name":"ttl-leases","namespace":"default"},
"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"ttl-leases"},
"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"elector"}]}"#;

impl Files {
    fn write(run: &Path) -> Result<Files> {
        let certs = super::tls::generate(&run.join("tls"))?;
        let sa_private = run.join("sa.key");
        let sa_public = run.join("sa.pub");
        super::tls::openssl(
            Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(&sa_private)
                .arg("2048"),
        )?;
        super::tls::openssl(
            Command::new("openssl")
                .args(["rsa", "-in"])
                .arg(&sa_private)
                .args(["-pubout", "-out"])
                .arg(&sa_public),
        )?;
        let admin = random_token()?;
        let token = random_token()?;
        let tokens = run.join("tokens.csv");
        let token_file = run.join("token");
        let header_file = run.join("curl-header");
        let elector_header_file = run.join("curl-header-elector");
        for (path, text) in [
            (
                &tokens,
                format!("{admin},xtask,xtask,\"system:masters\"\n{token},elector,elector\n"),
            ),
            (&token_file, token.clone()),
            (&header_file, format!("Authorization: Bearer {admin}\n")),
            (
                &elector_header_file,
                format!("Authorization: Bearer {token}\n"),
            ),
        ] {
            std::fs::write(path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Files {
            ca: certs.ca,
            cert: certs.cert,
            key: certs.key,
            sa_private,
            sa_public,
            tokens,
            token,
            token_file,
            header_file,
            elector_header_file,
        })
    }
}

/// 32 hexadecimal digits from `/dev/urandom`.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `curl` is there (it checks readiness: xtask has no TLS client).
fn curl_version() -> Result<()> {
    let out = Command::new("curl")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => Ok(()),
        _ => bail!("curl is not installed (Debian: `apt-get install curl`); or set KUBE_URL"),
    }
}

/// `GET /api/v1/namespaces/default` with the token answers 200: the
/// server is up, authenticates, and its default namespace exists.
fn answers_200(server: &str, files: &Files) -> bool {
    answers_200_to(
        &format!("{server}/api/v1/namespaces/{NAMESPACE}"),
        &files.ca,
        &files.header_file,
    )
}

/// `GET url` with the header in `header_file` answers 200.
fn answers_200_to(url: &str, ca: &Path, header_file: &Path) -> bool {
    Command::new("curl")
        .args(["--silent", "--max-time", "2", "--cacert"])
        .arg(ca)
        .arg("--header")
        .arg(format!("@{}", header_file.display()))
        .args(["--output", "/dev/null", "--write-out", "%{http_code}"])
        .arg(url)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| out.stdout == b"200")
}

/// Creates [`ROLE`] and [`ROLE_BINDING`] as the admin, then waits until
/// the suites' identity may list Leases (the authorizer's cache follows
/// the binding within moments).
fn grant_the_role(server: &str, files: &Files) -> Result<()> {
    let base = format!("{server}/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}");
    for (what, body) in [("roles", ROLE), ("rolebindings", ROLE_BINDING)] {
        let out = Command::new("curl")
            .args(["--silent", "--max-time", "5", "--cacert"])
            .arg(&files.ca)
            .arg("--header")
            .arg(format!("@{}", files.header_file.display()))
            .args(["--header", "Content-Type: application/json"])
            .args(["--request", "POST", "--data-binary", body])
            .args(["--output", "/dev/null", "--write-out", "%{http_code}"])
            .arg(format!("{base}/{what}"))
            .stdin(Stdio::null())
            .output()
            .context("cannot run curl")?;
        if out.stdout != b"201" {
            bail!(
                "creating the {what} answered {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let leases =
        format!("{server}/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases?limit=1");
    while !answers_200_to(&leases, &files.ca, &files.elector_header_file) {
        if Instant::now() > deadline {
            bail!("user elector could not list Leases 30 s after its RoleBinding");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// A kubeconfig for the server: cluster, user and context all `xtask`,
/// namespace `default`. Values are JSON strings, which YAML reads as they
/// are whatever the path holds.
fn kubeconfig_text(server: &str, ca: &Path, token: &str) -> String {
    let q = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: xtask\n  \
           cluster:\n    \
             server: {server}\n    \
             certificate-authority: {ca}\n\
         users:\n\
         - name: xtask\n  \
           user:\n    \
             token: {token}\n\
         contexts:\n\
         - name: xtask\n  \
           context:\n    \
             cluster: xtask\n    \
             user: xtask\n    \
             namespace: {NAMESPACE}\n\
         current-context: xtask\n",
        server = q(server),
        ca = q(&path_text(ca)),
        token = q(token),
    )
}

/// `text` as a URL query value: unreserved characters, `/` and `:` as they
/// are (so ordinary paths and `https://host:port` read as written), the
/// rest percent-encoded.
fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b':' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{kubeconfig_text, query_value};

    #[test]
    fn query_values_keep_paths_and_servers_readable() {
        assert_eq!(
            query_value("https://127.0.0.1:6443"),
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            query_value("/var/tmp/t/engines/kube/run-1/tls/ca.pem"),
            "/var/tmp/t/engines/kube/run-1/tls/ca.pem"
        );
        assert_eq!(query_value("/a b&c=d"), "/a%20b%26c%3Dd");
    }

    #[test]
    fn the_kubeconfig_names_server_ca_token_and_context() {
        let text = kubeconfig_text("https://127.0.0.1:1", Path::new("/x/ca.pem"), "t0k");
        for line in [
            "current-context: xtask",
            "    server: \"https://127.0.0.1:1\"",
            "    certificate-authority: \"/x/ca.pem\"",
            "    token: \"t0k\"",
            "    namespace: default",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }
}
