//! The request record's three states, their bytes and how they are read.
//! Everything read from the store is untrusted: anything that does not
//! parse is not a request.

const PENDING: &str = "hreq2";
const ACCEPTED: &str = "hacc2";
const ANSWERED: &str = "hrep2";

/// The leadership a request addresses: who leads a key now, as the lease
/// record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressed {
    /// The nonce of the lease record (24 hex digits): names this one
    /// leadership.
    pub nonce: String,
    /// The leader's value (without the nonce).
    pub value: Vec<u8>,
}

impl Addressed {
    /// The leadership a lease record holds; `None` for a record elections
    /// did not write (a hand-over marker, say).
    pub fn from_record(record: &[u8]) -> Option<Self> {
        let nonce = elections::record::nonce(record)?;
        Some(Addressed {
            nonce: std::str::from_utf8(nonce).ok()?.to_owned(),
            value: elections::record::leader_value(record).to_vec(),
        })
    }
}

/// A pending hand-over request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    id: String,
    nonce: String,
    to: Option<String>,
    raw: Vec<u8>,
}

impl Request {
    /// A new request, with a random id, to the leadership `leader`: hand
    /// over to the candidate with address (or value) `to`, or with `None`
    /// to the one that has waited longest.
    pub fn new(leader: &Addressed, to: Option<&str>) -> Self {
        let id = format!("{:016x}", rand::random::<u64>());
        let raw =
            format!("{PENDING} {id} {} {}", leader.nonce, to.unwrap_or_default()).into_bytes();
        Request {
            id,
            nonce: leader.nonce.clone(),
            to: to.map(str::to_owned),
            raw,
        }
    }

    /// The request's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The nonce of the leadership it addresses.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// The candidate asked for; `None`: any.
    pub fn to(&self) -> Option<&str> {
        self.to.as_deref()
    }

    /// The pending record's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The accepted record of this request: the leader hands over to the
    /// candidate `to` (its value).
    pub(crate) fn accepted(&self, to: &str) -> Vec<u8> {
        format!("{ACCEPTED} {} {} {to}", self.id, self.nonce).into_bytes()
    }

    /// The answered record of this request.
    pub(crate) fn answered(&self, answer: &Answer) -> Vec<u8> {
        let (word, detail) = match answer {
            Answer::HandedOver(to) => ("handed-over", to.as_str()),
            Answer::NoCandidate => ("no-candidate", ""),
            Answer::Failed(why) => ("failed", why.as_str()),
            Answer::Released(why) => ("released", why.as_str()),
        };
        format!("{ANSWERED} {} {} {word} {detail}", self.id, self.nonce).into_bytes()
    }
}

/// The leader's answer to a request: what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// The lease is reserved for this candidate (its value); it takes the
    /// key within the marker's TTL, or anyone may after.
    HandedOver(String),
    /// No candidate waits (or none with the requested address): nothing
    /// was stopped, the leader keeps leading.
    NoCandidate,
    /// The leader could not serve the request (the candidates could not be
    /// read): nothing was stopped, the leader keeps leading.
    Failed(String),
    /// The leader stopped its services but did not hand over (the named
    /// candidate left meanwhile, the services did not stop in time, the
    /// store failed): it released the lock instead, and anyone may take it.
    Released(String),
}

/// What the request record says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// Not served yet: a withdrawal now wins.
    Pending,
    /// The leader began: it hands over to this candidate (its value). A
    /// withdrawal now loses.
    Accepted {
        /// The candidate's value.
        to: String,
    },
    /// Served: the answer.
    Answered(Answer),
    /// No record of this request (withdrawn, expired, or another request's).
    Gone,
}

/// A record read from the store, whichever request it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) request: Request,
    pub(crate) state: State,
}

/// Reads a request record; `None` for anything that is not one.
pub(crate) fn parse(raw: &[u8]) -> Option<Parsed> {
    let text = std::str::from_utf8(raw).ok()?;
    let (kind, rest) = text.split_once(' ')?;
    let (id, rest) = rest.split_once(' ')?;
    let (nonce, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(id, 16) || !hex(nonce, elections::record::NONCE_LEN) {
        return None;
    }
    let (to, state) = match kind {
        PENDING => ((!rest.is_empty()).then(|| rest.to_owned()), State::Pending),
        ACCEPTED if !rest.is_empty() => (
            None,
            State::Accepted {
                to: rest.to_owned(),
            },
        ),
        ANSWERED => {
            let (word, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            let answer = match word {
                "handed-over" => Answer::HandedOver(detail.to_owned()),
                "no-candidate" => Answer::NoCandidate,
                "failed" => Answer::Failed(detail.to_owned()),
                "released" => Answer::Released(detail.to_owned()),
                _ => return None,
            };
            (None, State::Answered(answer))
        }
        _ => return None,
    };
    Some(Parsed {
        request: Request {
            id: id.to_owned(),
            nonce: nonce.to_owned(),
            to,
            raw: raw.to_vec(),
        },
        state,
    })
}

/// The state of request `request` in the record `raw` (absent: `None`).
pub(crate) fn state_of(raw: Option<&[u8]>, request: &Request) -> State {
    match raw.and_then(parse) {
        Some(parsed)
            if parsed.request.id == request.id && parsed.request.nonce == request.nonce =>
        {
            parsed.state
        }
        _ => State::Gone,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn leader() -> Addressed {
        Addressed::from_record(b"10.0.0.7#pid1#0123456789abcdef00000001").unwrap()
    }

    #[test]
    fn states_round_trip() {
        let leader = leader();
        assert_eq!(leader.value, b"10.0.0.7#pid1");
        let request = Request::new(&leader, Some("10.0.0.9 with a space"));
        let read = parse(request.as_bytes()).unwrap();
        assert_eq!(read.request, request);
        assert_eq!(read.state, State::Pending);
        assert_eq!(read.request.to(), Some("10.0.0.9 with a space"));
        let any = Request::new(&leader, None);
        assert_eq!(parse(any.as_bytes()).unwrap().request.to(), None);
        let accepted = request.accepted("b#pid2");
        assert_eq!(
            state_of(Some(&accepted), &request),
            State::Accepted {
                to: "b#pid2".into()
            }
        );
        assert_eq!(state_of(Some(&accepted), &any), State::Gone);
        for answer in [
            Answer::HandedOver("b#pid1-0".into()),
            Answer::NoCandidate,
            Answer::Failed("store down".into()),
            Answer::Released("the candidate left".into()),
        ] {
            let raw = request.answered(&answer);
            assert_eq!(state_of(Some(&raw), &request), State::Answered(answer));
            assert_eq!(state_of(Some(&raw), &any), State::Gone);
        }
        assert_eq!(state_of(None, &request), State::Gone);
    }

    #[test]
    fn garbage_is_not_a_request() {
        for raw in [
            &b"hreq2 zz 0123456789abcdef00000001 x"[..],
            b"hreq2 0123456789abcdef 01234 x",
            b"hacc2 0123456789abcdef 0123456789abcdef00000001 ",
            b"hrep2 0123456789abcdef 0123456789abcdef00000001 maybe",
            b"hreq1 0123456789abcdef x",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(parse(raw), None, "{raw:?}");
        }
        assert_eq!(
            Addressed::from_record(b"\0elections/reserved-for\0abc"),
            None
        );
    }
}
