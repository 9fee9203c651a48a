//! Out of file descriptors: the server process runs under `ulimit -n 256`
//! (soft and hard), a hostile client opens more idle connections than that,
//! and a normal request must still be answered. A real process, real
//! sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server process when the test ends, pass or fail.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the demo server under `ulimit -n <fds>`; returns it and its
/// address.
fn start(fds: u32) -> (Server, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {fds} && exec \"$0\""))
        .arg(env!("CARGO_BIN_EXE_http-edge-demo"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (server, addr)
}

#[test]
fn a_request_is_answered_with_more_idle_connections_than_descriptors() {
    // this process holds the idle connections: it needs more than 256
    http_edge::raise_fd_limit();
    let (mut server, addr) = start(256);
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // Let the server take them in (or fail to).
    std::thread::sleep(Duration::from_millis(500));

    let started = Instant::now();
    let mut socket = TcpStream::connect(&addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nhost: edge\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let read = socket.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        read.is_ok() && answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "no answer within 5 s with 300 idle connections open ({read:?}, {answer:?}, \
         after {:?})",
        started.elapsed()
    );
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the server process exited"
    );
    drop(idle);
}
