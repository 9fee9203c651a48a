//! `pg-coordinator`: routes tenant and transaction calls to `pg-pod`s.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pg_tenants::init_tracing();
    pg_tenants::coord::run(pg_tenants::coord::CoordArgs::parse()).await
}
