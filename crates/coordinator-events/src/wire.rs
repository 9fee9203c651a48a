//! The messages on a destination's channel, and their strict parsing
//! (everything read from Valkey is untrusted: a malformed message is
//! dropped and counted, never a panic or an unbounded allocation).
//!
//! ```text
//! event:  "ev1\n" <generation> "\n" <seq> "\n" <sent micros> "\n" <publisher id> "\n" <payload>
//! mark:   "mk1\n" <generation> "\n" <seq>
//! ```
//!
//! Numbers are 1..=20 ASCII digits. The publish script writes the first
//! three fields of an event (it numbers it); the publisher supplies the
//! rest. A mark says "every event of this channel numbered up to here was
//! published before this message": the pod that subscribes publishes one,
//! so a subscriber that was away learns exactly what it missed.

use bytes::Bytes;
use coordinator::MemberId;

use crate::event::Position;

/// The start of an event message.
pub(crate) const EVENT_TAG: &str = "ev1\n";
/// The start of a mark message.
pub(crate) const MARK_TAG: &str = "mk1\n";
/// Longest header field (a member id is at most 256 bytes).
const MAX_FIELD: usize = coordinator::ids::MAX_ID_LEN;

/// A parsed channel message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// An event.
    Event {
        position: Position,
        sent_micros: u64,
        publisher: MemberId,
        payload: Bytes,
    },
    /// A mark.
    Mark(Position),
}

/// Why a message was dropped.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    #[error("unknown message kind")]
    Kind,
    #[error("missing or invalid {0}")]
    Field(&'static str),
    #[error("payload of {0} bytes is over the limit")]
    TooLarge(usize),
}

/// What the publisher appends after the script's `ev1\n<gen>\n<seq>\n`.
pub(crate) fn event_tail(sent_micros: u64, publisher: &MemberId) -> String {
    format!("{sent_micros}\n{publisher}\n")
}

/// Parses one message of at most `max_payload` payload bytes.
pub(crate) fn decode(raw: Bytes, max_payload: usize) -> Result<Wire, Malformed> {
    if let Some(rest) = raw.strip_prefix(MARK_TAG.as_bytes()) {
        let mut fields = Fields { rest, at: 0 };
        let generation = fields.number("generation")?;
        let seq = number(fields.remainder(), "seq")?;
        return Ok(Wire::Mark(Position { generation, seq }));
    }
    if !raw.starts_with(EVENT_TAG.as_bytes()) {
        return Err(Malformed::Kind);
    }
    let rest = &raw[EVENT_TAG.len()..];
    let mut fields = Fields { rest, at: 0 };
    let generation = fields.number("generation")?;
    let seq = fields.number("seq")?;
    let sent_micros = fields.number("sent time")?;
    let publisher = fields.next("publisher")?;
    let publisher = std::str::from_utf8(publisher)
        .ok()
        .and_then(|s| MemberId::new(s).ok())
        .ok_or(Malformed::Field("publisher"))?;
    let start = EVENT_TAG.len() + fields.at;
    let size = raw.len() - start;
    if size > max_payload {
        return Err(Malformed::TooLarge(size));
    }
    Ok(Wire::Event {
        position: Position { generation, seq },
        sent_micros,
        publisher,
        payload: raw.slice(start..),
    })
}

/// `\n`-terminated header fields.
struct Fields<'a> {
    rest: &'a [u8],
    /// Bytes consumed so far.
    at: usize,
}

impl<'a> Fields<'a> {
    fn next(&mut self, name: &'static str) -> Result<&'a [u8], Malformed> {
        let window = &self.rest[self.at..];
        let end = window
            .iter()
            .take(MAX_FIELD + 1)
            .position(|b| *b == b'\n')
            .ok_or(Malformed::Field(name))?;
        self.at += end + 1;
        Ok(&window[..end])
    }

    fn number(&mut self, name: &'static str) -> Result<u64, Malformed> {
        number(self.next(name)?, name)
    }

    fn remainder(&self) -> &'a [u8] {
        &self.rest[self.at..]
    }
}

fn number(digits: &[u8], name: &'static str) -> Result<u64, Malformed> {
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Malformed::Field(name));
    }
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Malformed::Field(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(publisher: &str, payload: &str) -> Bytes {
        let tail = event_tail(
            17,
            &MemberId::new(publisher).unwrap_or_else(|e| panic!("{e}")),
        );
        Bytes::from(format!("{EVENT_TAG}5\n9\n{tail}{payload}"))
    }

    #[test]
    fn events_and_marks_round_trip() {
        let Ok(Wire::Event {
            position,
            sent_micros,
            publisher,
            payload,
        }) = decode(event("pod 1", "{\"k\":\"v\"}\nsecond line"), 1024)
        else {
            panic!("not an event");
        };
        assert_eq!(
            position,
            Position {
                generation: 5,
                seq: 9
            }
        );
        assert_eq!(sent_micros, 17);
        assert_eq!(publisher.as_str(), "pod 1");
        assert_eq!(&payload[..], b"{\"k\":\"v\"}\nsecond line");
        assert_eq!(
            decode(Bytes::from_static(b"mk1\n12\n0"), 1),
            Ok(Wire::Mark(Position {
                generation: 12,
                seq: 0
            }))
        );
        // an empty payload is an event too
        assert!(matches!(decode(event("p", ""), 0), Ok(Wire::Event { .. })));
    }

    #[test]
    fn malformed_messages_are_refused_with_a_reason() {
        let long_id = "x".repeat(MAX_FIELD + 1);
        let cases: Vec<(Bytes, Malformed)> = vec![
            (Bytes::from_static(b""), Malformed::Kind),
            (Bytes::from_static(b"hello"), Malformed::Kind),
            (Bytes::from_static(b"ev2\n1\n1\n"), Malformed::Kind),
            (Bytes::from_static(b"ev1\n"), Malformed::Field("generation")),
            (
                Bytes::from_static(b"ev1\n-1\n"),
                Malformed::Field("generation"),
            ),
            (Bytes::from_static(b"ev1\n1\nx\n"), Malformed::Field("seq")),
            (
                Bytes::from(format!("ev1\n1\n{}\n", "9".repeat(21))),
                Malformed::Field("seq"),
            ),
            (
                Bytes::from_static(b"ev1\n1\n99999999999999999999\n"),
                Malformed::Field("seq"),
            ),
            (
                Bytes::from_static(b"ev1\n1\n2\n3\n"),
                Malformed::Field("publisher"),
            ),
            (
                Bytes::from_static(b"ev1\n1\n2\n3\n\n"),
                Malformed::Field("publisher"),
            ),
            (
                Bytes::from_static(b"ev1\n1\n2\n3\na/b\n"),
                Malformed::Field("publisher"),
            ),
            (
                Bytes::from(format!("ev1\n1\n2\n3\n{long_id}\n")),
                Malformed::Field("publisher"),
            ),
            (
                Bytes::from_static(b"ev1\n1\n2\n3\n\xff\n"),
                Malformed::Field("publisher"),
            ),
            (event("p", "12345"), Malformed::TooLarge(5)),
            (Bytes::from_static(b"mk1\n1\n"), Malformed::Field("seq")),
            (Bytes::from_static(b"mk1\n1\n2\n"), Malformed::Field("seq")),
        ];
        for (raw, why) in cases {
            assert_eq!(decode(raw.clone(), 4), Err(why), "{raw:?}");
        }
    }
}
