//! nginx as the reference proxy: `proxy_pass` to the same pod with upstream
//! keep-alive, one worker, `master_process off` so its CPU time is one
//! process's.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A running nginx; killed when dropped.
pub(crate) struct Nginx {
    child: Child,
    dir: PathBuf,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The nginx binary: `NGINX_BIN` (not `NGINX`: nginx itself reads that
/// variable, for inherited sockets) or `nginx` on the `PATH` (Debian puts it in
/// `/usr/sbin`), if it runs.
fn binary() -> Option<String> {
    let candidates = std::env::var("NGINX_BIN")
        .ok()
        .into_iter()
        .chain(["nginx".to_owned(), "/usr/sbin/nginx".to_owned()]);
    for bin in candidates {
        let ok = Command::new(&bin)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(bin);
        }
    }
    None
}

/// Starts nginx proxying to `pod` (host:port); `Err` says why not (no
/// nginx installed, or it did not come up).
pub(crate) fn start(pod: SocketAddr) -> Result<Nginx, String> {
    let bin = binary().ok_or("nginx not found (set NGINX_BIN, or apt-get install nginx-light)")?;
    let dir = std::env::temp_dir().join(format!("routing-bench-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let addr = crate::proxy_process::free_port();
    let d = dir.display();
    let conf = format!(
        "daemon off;\n\
         master_process off;\n\
         worker_processes 1;\n\
         error_log stderr warn;\n\
         pid {d}/nginx.pid;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
           access_log off;\n\
           client_body_temp_path {d}/body;\n\
           proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fastcgi;\n\
           uwsgi_temp_path {d}/uwsgi;\n\
           scgi_temp_path {d}/scgi;\n\
           upstream pod {{ server {pod}; keepalive 64; }}\n\
           server {{\n\
             listen {addr};\n\
             location / {{\n\
               proxy_pass http://pod;\n\
               proxy_http_version 1.1;\n\
               proxy_set_header Connection \"\";\n\
             }}\n\
           }}\n\
         }}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(conf.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let child = Command::new(&bin)
        // nginx reads inherited listening sockets from `NGINX`
        .env_remove("NGINX")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("{bin}: {e}"))?;
    let mut nginx = Nginx { child, dir, addr };
    crate::proxy_process::wait_listening(&mut nginx.child, addr, "nginx")?;
    Ok(nginx)
}

impl Nginx {
    /// The process id (its CPU time is read from `/proc/<pid>/stat`).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}
