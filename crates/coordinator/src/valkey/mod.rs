//! Everything that talks to Valkey directly: connecting
//! ([`connect`], [`connect_with`]), the Lua scripts that make reads one round
//! trip ([`Scripts`]) and the parsing of their replies ([`replies`]).

mod connect;
pub(crate) mod replies;
mod scripts;

pub use connect::{ValkeyOptions, connect, connect_with};
pub(crate) use scripts::Scripts;
