//! The `ab` dialect: semantic communication operations and the scalar computation feeding them.

pub mod attributes;
pub mod ops;
pub mod types;
