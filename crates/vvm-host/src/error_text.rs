//! An error and its causes, said once: the text vvm-host prints for a
//! failure.
//!
//! Many errors print their source in their own message *and* return it
//! from `source()` (fred, tokio-postgres, tonic, deadpool do), so joining a
//! chain link by link (`{:#}`) says the same cause two or three times. Here
//! a link whose text the line already holds is left out, and a segment
//! repeated right after itself (`A: A: B`) is said once. Debug dumps of an
//! OS error that clients put in their messages
//! (`Os { code: 111, kind: ConnectionRefused, message: "Connection
//! refused" }`, tonic's `source: tonic::transport::Error(...)`) are said as
//! the OS says them: `Connection refused (os error 111)`.

use std::sync::LazyLock;

use regex::Regex;

/// `std::io::Error`'s Debug form of an OS error.
static OS_ERROR: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"Os \{ code: (\d+), kind: \w+, message: "([^"]*)" \}"#).ok());

/// tonic's Debug dump of a transport error after its message.
static TONIC_SOURCE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r", source: tonic::transport::Error\(.*$").ok());

/// `err` and its causes on one line, each said once.
pub(crate) fn chain(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for link in err.chain() {
        let text = link.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    let line = without_repeats(&line);
    match OS_ERROR.as_ref() {
        Some(os) => {
            let cause = os
                .captures(&line)
                .map(|c| format!("{} (os error {})", &c[2], &c[1]));
            let line = os.replace_all(&line, "$2 (os error $1)").into_owned();
            match (TONIC_SOURCE.as_ref(), cause) {
                (Some(tonic), Some(cause)) if tonic.is_match(&line) => {
                    format!("{}: {cause}", tonic.replace(&line, ""))
                }
                _ => line,
            }
        }
        None => line,
    }
}

/// `line` with each `": "`-separated segment that repeats the one before it
/// dropped.
fn without_repeats(line: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for segment in line.split(": ") {
        if kept.last() != Some(&segment) {
            kept.push(segment);
        }
    }
    kept.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("IO Error: connection refused")]
    struct Io;

    /// An error that prints its source and also returns it, as fred does.
    #[derive(Debug, thiserror::Error)]
    #[error("connecting to redis://x failed: {0}")]
    struct Connect(#[source] Io);

    #[test]
    fn each_cause_is_said_once() {
        let err = anyhow::Error::new(Connect(Io)).context("cannot open storage redis://x");
        assert_eq!(
            chain(&err),
            "cannot open storage redis://x: connecting to redis://x failed: IO Error: connection refused"
        );
        let repeated = anyhow::anyhow!(
            "error connecting to server: error connecting to server: Connection refused"
        );
        assert_eq!(
            chain(&repeated),
            "error connecting to server: Connection refused"
        );
        let fred = anyhow::anyhow!(
            r#"IO Error: Os {{ code: 111, kind: ConnectionRefused, message: "Connection refused" }}"#
        );
        assert_eq!(chain(&fred), "IO Error: Connection refused (os error 111)");
        let tonic = anyhow::anyhow!(
            r#"grpc request error: message: "tcp connect error", source: tonic::transport::Error(Transport, ConnectError(ConnectError("tcp connect error", 127.0.0.1:1, Os {{ code: 111, kind: ConnectionRefused, message: "Connection refused" }})))"#
        );
        assert_eq!(
            chain(&tonic),
            r#"grpc request error: message: "tcp connect error": Connection refused (os error 111)"#
        );
    }
}
