//! The Aboleth passes, one file per pass, and the default pipeline written out in one function.
//!
//! Storage planning ([`dead_communication`], [`buffer_sizing`]), transfer planning
//! ([`inline_payloads`], [`signal_publication`], [`completion_planning`]), submission planning
//! ([`elide_epochs`], [`queue_owners`], [`publication_ordering`], [`batching`],
//! [`doorbell_coalescing`], [`doorbell_scope`]) and
//! transport specialization ([`lower_mlx5`], [`lower_proxy`], [`lower_p2p`]). Planning passes
//! only attach attributes (their decisions print in the IR); the lowering passes read them and
//! fall back to library-style code where an attribute is absent, which is exactly what
//! `--passes-off` produces. [`stats`] counts what a lowered kernel does.
//! This crate does no I/O and links nothing from CUDA or ibverbs.

pub mod batching;
pub mod buffer_sizing;
pub mod comm;
pub mod completion_planning;
pub mod dead_communication;
pub mod doorbell_coalescing;
pub mod doorbell_scope;
pub mod elide_epochs;
pub mod inline_payloads;
pub mod lower_common;
pub mod lower_mlx5;
pub mod lower_p2p;
pub mod lower_proxy;
pub mod pipeline;
pub mod publication_ordering;
pub mod queue_owners;
pub mod registry;
pub mod signal_publication;
pub mod stats;

pub use pipeline::{PipelineOptions, PipelineReport, run_pipeline};
