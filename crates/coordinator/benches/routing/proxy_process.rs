//! What the bench does the same way for every proxy process it starts
//! (nginx): a loopback port for it, and waiting until it
//! listens.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

/// A free loopback address for a proxy process to listen on.
pub(crate) fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// Waits up to 5 s until `addr` accepts connections; `Err` says why not
/// (`name` exited, or did not listen in time).
pub(crate) fn wait_listening(
    child: &mut Child,
    addr: SocketAddr,
    name: &str,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{name} exited: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("{name} did not listen within 5 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
