//! What the passes share, so that no pass imports another: questions about communication ops
//! ([`transfers`]), queue slot sizes ([`queue_slots`]), which signals ride on their puts
//! ([`riding_signals`]), and the lowering machinery: the queue-lowering driver that
//! `lower-mlx5` and `lower-proxy` implement ([`queue_lowering`]), the wait lowering every
//! lowering uses ([`wait_lowering`]) and the transport-op pieces they all emit
//! ([`transport_ops`]).
//!
//! Nothing here is a pass: no file here has a flag, and none decides anything on its own.

pub mod queue_lowering;
pub mod queue_slots;
pub mod riding_signals;
pub mod transfers;
pub mod transport_ops;
pub mod wait_lowering;
