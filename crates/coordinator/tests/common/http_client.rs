//! A small HTTP client for the tests.

use axum::http::StatusCode;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A small HTTP client for tests.
#[derive(Clone)]
pub struct Http {
    client: HttpClient<HttpConnector, Full<Bytes>>,
}

impl Http {
    pub fn new() -> Self {
        Self {
            client: HttpClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub async fn send(&self, method: &str, url: &str) -> (StatusCode, String) {
        self.send_with_header(method, url, "x-test", "1").await
    }

    /// Sends `body` with its length declared (`content-length`).
    pub async fn send_body(&self, method: &str, url: &str, body: Vec<u8>) -> (StatusCode, String) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(url)
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = self.client.request(req).await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    pub async fn send_with_header(
        &self,
        method: &str,
        url: &str,
        name: &str,
        value: &str,
    ) -> (StatusCode, String) {
        self.send_with_headers(method, url, &[(name, value)]).await
    }

    pub async fn send_with_headers(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, String) {
        let mut req = axum::http::Request::builder().method(method).uri(url);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let resp = self.client.request(req).await.unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}
