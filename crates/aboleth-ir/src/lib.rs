//! The Aboleth IR, built on pliron and reached by the rest of the workspace only through this crate.
//!
//! Dialects: `ab` (semantic communication ops and the scalar computation feeding them) and the
//! transport dialects `mlx5`, `proxy`, `p2p`, `efa`, `ionic`, `gpu` ([`transport`]). [`text`] reads `.abo`
//! files into modules with file:line:column locations and prints them back; [`verify`] holds
//! the semantic rules; [`scalar`] and [`walk`] answer the questions passes ask.
//! This crate does no lowering and knows nothing about CUDA, NICs or Triton.

pub mod ab;
pub mod attrs;
pub mod builder;
pub mod scalar;
pub mod text;
pub mod transport;
pub mod verify;
pub mod walk;

pub use pliron;
pub use text::{Diagnostic, parse_module, print_module};
