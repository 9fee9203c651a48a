//! `pg-pod`: a multi-tenant PostgreSQL resource pod (see the crate README).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pg_tenants::init_tracing();
    pg_tenants::pod::run(pg_tenants::pod::PodArgs::parse()).await
}
