//! Hop-by-hop header handling (RFC 9110 section 7.6.1).

use http::HeaderMap;
use http::header::{self, HeaderName};

/// Headers that apply to one connection only and are never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including those named by `Connection`.
///
/// One pass over the names first: most messages carry none, and looking
/// each of the nine names up would hash every one of them.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let any = headers
        .keys()
        .any(|name| HOP_BY_HOP.contains(name) || name.as_str() == "proxy-connection");
    if !any {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove("proxy-connection");
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn strips_standard_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(h.contains_key("x-keep"));
        assert!(h.contains_key(header::CONTENT_TYPE));
    }
}
