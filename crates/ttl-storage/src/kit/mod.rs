//! The driver kit (cargo feature `kit`): what every network driver needs
//! and would otherwise copy.
//!
//! - [`url`]: URL rewriting shared by the drivers' descriptors.

pub mod url;
