//! A minimal server on [`http_edge::serve`]: `GET /` answers `ok`. It binds
//! the address given as its first argument (default `127.0.0.1:0`) and
//! prints `listening on <addr>` once it accepts connections. The tests run
//! it as a real process, under a small file-descriptor limit.

use axum::{Router, routing::get};
use http_edge::{ServeConfig, serve};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    let app = Router::new().route("/", get(|| async { "ok" }));
    serve(listener, app, ServeConfig::default(), async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
