//! The Aboleth passes, one file per pass named after its flag (`batch_commands.rs` is
//! `batch-commands`), the pass list, and the default pipeline that runs it.
//!
//! Storage planning ([`eliminate_dead_communication`], [`size_buffers`]), transfer planning
//! ([`inline_small_payloads`], [`choose_signal_publication`], [`plan_completions`]),
//! submission planning ([`elide_epochs`], [`assign_queue_owners`], [`order_publications`],
//! [`batch_commands`], [`coalesce_doorbells`], [`choose_doorbell_scope`]) and transport
//! specialization ([`lower_mlx5`], [`lower_proxy`], [`lower_p2p`], [`lower_efa`], [`lower_ionic`]). Every pass's flag, level,
//! description, order and entry point are written once, in [`registry`]; [`pipeline`] runs
//! that list with the verifier between passes. What passes share lives in [`support`]; no
//! pass imports another. Planning passes only attach attributes (their decisions print in the
//! IR); the lowering passes read them and fall back to library-style code where an attribute
//! is absent, which is exactly what `--passes-off` produces. [`stats`] counts what a lowered
//! kernel does. This crate does no I/O and links nothing from CUDA or ibverbs.

pub mod assign_queue_owners;
pub mod batch_commands;
pub mod choose_doorbell_scope;
pub mod choose_signal_publication;
pub mod coalesce_doorbells;
pub mod elide_epochs;
pub mod eliminate_dead_communication;
pub mod inline_small_payloads;
pub mod lower_efa;
pub mod lower_ionic;
pub mod lower_mlx5;
pub mod lower_p2p;
pub mod lower_proxy;
pub mod order_publications;
pub mod pipeline;
pub mod plan_completions;
pub mod registry;
pub mod size_buffers;
pub mod stats;
pub mod support;

pub use pipeline::{PipelineOptions, PipelineReport, run_pipeline};
