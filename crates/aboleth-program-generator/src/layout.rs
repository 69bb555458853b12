//! Layout: where each channel's data, flags and reuse slot live on every receiver, and its
//! share of the `send` region, computed from a [`ProgramSpec`] so that no two puts write the
//! same byte and no two signals share a flag unless they only add. The printer reads it; it
//! prints nothing itself.

use crate::*;

/// Where one channel's data and flags live on every receiver, and its slot in `send`.
#[derive(Clone, Debug)]
pub(crate) struct ChannelLayout {
    /// Byte offset of the channel's segment in its data region.
    pub(crate) segment_base: u32,
    /// Bytes per sender key.
    pub(crate) sender_stride: u32,
    /// Bytes per iteration inside a sender's range.
    pub(crate) iteration_stride: u32,
    /// Byte offset of each put inside an iteration.
    pub(crate) put_offsets: Vec<u32>,
    /// Byte offset of the reuse put inside a sender's range.
    pub(crate) reuse_offset: u32,
    /// Iterations the destination and flag space is sized for.
    pub(crate) max_trips: u32,
    /// First flag word of the iteration signal.
    pub(crate) iteration_flag_base: u32,
    /// First flag word of the final signal.
    pub(crate) final_flag_base: u32,
    /// Byte offset of the reuse slot inside a program's share of `send`.
    pub(crate) slot_offset: Option<u32>,
    /// Byte offset of each put's source in the read-only area (per iteration 0).
    pub(crate) source_offsets: Vec<u32>,
}

#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) channels: Vec<ChannelLayout>,
    pub(crate) recv_bytes: u32,
    pub(crate) rows_bytes: u32,
    pub(crate) flag_words: u32,
    /// Bytes of `send` per program.
    pub(crate) partition_bytes: u32,
}

/// Distinct sender keys per receiver: `(j - 1) * programs + pid` for `j in 1..ranks`.
pub(crate) fn key_count(spec: &ProgramSpec) -> u32 {
    (spec.ranks - 1) * spec.programs
}

/// Flag words one signal needs on each receiver.
pub(crate) fn signal_flag_words(
    signal: &Option<SignalSpec>,
    keys: u32,
    max_trips: u32,
    per_iteration: bool,
) -> u32 {
    match signal {
        None => 0,
        Some(SignalSpec {
            operation: SignalOperation::Set(_),
            ..
        }) => keys * if per_iteration { max_trips } else { 1 },
        Some(SignalSpec {
            operation: SignalOperation::Add { shared_flag: true },
            ..
        }) => 1,
        Some(SignalSpec {
            operation: SignalOperation::Add { shared_flag: false },
            ..
        }) => keys,
    }
}

impl Layout {
    pub(crate) fn new(spec: &ProgramSpec) -> Layout {
        let keys = key_count(spec);
        let mut channels = Vec::new();
        let (mut recv_bytes, mut rows_bytes, mut flag_words) = (0u32, 0u32, 0u32);
        let mut partition_bytes = READ_ONLY_SOURCE_BYTES;
        for channel in spec.phases.iter().flat_map(|p| &p.channels) {
            let max_trips = channel.iterations.max_trips(spec.ranks);
            let mut put_offsets = Vec::new();
            let mut iteration_stride = 0;
            for put in &channel.puts {
                put_offsets.push(iteration_stride);
                iteration_stride += put.bytes;
            }
            let reuse_offset = max_trips * iteration_stride;
            let reuse_bytes = match channel.reuse {
                Reuse::AfterPuts { .. } => channel.puts[0].bytes,
                _ => 0,
            };
            let sender_stride = reuse_offset + reuse_bytes;
            let region_bytes = match channel.data_region {
                DataRegion::Bytes => &mut recv_bytes,
                DataRegion::Words => &mut rows_bytes,
            };
            let segment_base = *region_bytes;
            *region_bytes += keys * sender_stride;
            let iteration_flag_base = flag_words;
            flag_words += signal_flag_words(&channel.iteration_signal, keys, max_trips, true);
            let final_flag_base = flag_words;
            flag_words += signal_flag_words(&channel.final_signal, keys, max_trips, false);
            let slot_offset = (channel.reuse != Reuse::None).then(|| {
                let offset = partition_bytes;
                partition_bytes += channel.puts[0].bytes;
                offset
            });
            // Iteration `it` reads 8 * it bytes further on: keep the last read in the area.
            let source_offsets = channel
                .puts
                .iter()
                .map(|put| {
                    let room = (READ_ONLY_SOURCE_BYTES - put.bytes - (max_trips - 1) * 8) / 8;
                    (put.source_word % (room + 1)) * 8
                })
                .collect();
            channels.push(ChannelLayout {
                segment_base,
                sender_stride,
                iteration_stride,
                put_offsets,
                reuse_offset,
                max_trips,
                iteration_flag_base,
                final_flag_base,
                slot_offset,
                source_offsets,
            });
        }
        Layout {
            channels,
            recv_bytes: recv_bytes.max(8),
            rows_bytes: rows_bytes.max(8),
            flag_words: flag_words.max(1),
            partition_bytes,
        }
    }
}
