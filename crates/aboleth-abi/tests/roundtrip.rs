//! Property tests: everything an encoder writes decodes back to what was asked, including WQEs
//! that wrap around the end of the send ring.

use aboleth_abi::mlx5::*;
use aboleth_abi::proxy::*;
use aboleth_abi::{EndpointHandle, LocalRegionDescriptor, RemoteRegionDescriptor};
use proptest::prelude::*;

fn remote_strategy() -> impl Strategy<Value = RemoteAddress> {
    (any::<u64>(), any::<u32>()).prop_map(|(address, rkey)| RemoteAddress { address, rkey })
}

fn local_strategy() -> impl Strategy<Value = LocalBuffer> {
    (any::<u64>(), any::<u32>(), 0..=0x7fff_ffffu32).prop_map(|(address, lkey, length_bytes)| {
        LocalBuffer {
            address,
            lkey,
            length_bytes,
        }
    })
}

/// A built WQE and the decoding expected from it.
fn wqe_strategy() -> impl Strategy<Value = (Wqe, DecodedWqe)> {
    let common =
        (any::<u16>(), 0..=0xff_ffffu32, any::<u8>()).prop_map(|(wqe_index, qpn, fm_ce_se)| {
            WqeCommon {
                wqe_index,
                qpn,
                fm_ce_se,
            }
        });
    let operands = (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
    );
    let payload = proptest::collection::vec(any::<u8>(), 0..=INLINE_BYTES_MAX);
    (
        common,
        remote_strategy(),
        local_strategy(),
        operands,
        payload,
        0..10u8,
    )
        .prop_map(
            |(common, remote, local, (a, b, c, d, immediate), payload, which)| {
                let result = LocalBuffer {
                    length_bytes: 8,
                    ..local
                };
                let gather = WritePayload::Gather(vec![local]);
                let (wqe, opcode, opmod, operation) = match which {
                    0 => (nop(&common), OPCODE_NOP, 0, WqeOperation::Nop),
                    1 => (
                        rdma_write(&common, remote, local),
                        OPCODE_RDMA_WRITE,
                        0,
                        WqeOperation::RdmaWrite {
                            remote,
                            payload: gather,
                            with_immediate: false,
                        },
                    ),
                    2 => (
                        rdma_write_imm(&common, remote, local, immediate),
                        OPCODE_RDMA_WRITE_IMM,
                        0,
                        WqeOperation::RdmaWrite {
                            remote,
                            payload: gather,
                            with_immediate: true,
                        },
                    ),
                    3 => (
                        rdma_write_inline(&common, remote, &payload).expect("bounded payload"),
                        OPCODE_RDMA_WRITE,
                        0,
                        WqeOperation::RdmaWrite {
                            remote,
                            payload: WritePayload::Inline(payload.clone()),
                            with_immediate: false,
                        },
                    ),
                    4 => (
                        rdma_read(&common, remote, local),
                        OPCODE_RDMA_READ,
                        0,
                        WqeOperation::RdmaRead {
                            remote,
                            local: vec![local],
                        },
                    ),
                    5 => (
                        atomic_fetch_add(&common, remote, a, result),
                        OPCODE_ATOMIC_FA,
                        0,
                        WqeOperation::AtomicFetchAdd {
                            remote,
                            add: a,
                            result,
                        },
                    ),
                    6 => (
                        atomic_compare_swap(&common, remote, a, b, result),
                        OPCODE_ATOMIC_CS,
                        0,
                        WqeOperation::AtomicCompareSwap {
                            remote,
                            compare: a,
                            swap: b,
                            result,
                        },
                    ),
                    7 => (
                        masked_fetch_add_64(&common, remote, a, b, result),
                        OPCODE_ATOMIC_MASKED_FA,
                        EXTENDED_ATOMIC_OPMOD_8_BYTES,
                        WqeOperation::MaskedFetchAdd64 {
                            remote,
                            add: a,
                            field_boundary: b,
                            result,
                        },
                    ),
                    8 => {
                        let operands = MaskedCompareSwap64 {
                            swap: a,
                            compare: b,
                            swap_mask: c,
                            compare_mask: d,
                        };
                        (
                            masked_compare_swap_64(&common, remote, operands, result),
                            OPCODE_ATOMIC_MASKED_CS,
                            EXTENDED_ATOMIC_OPMOD_8_BYTES,
                            WqeOperation::MaskedCompareSwap64 {
                                remote,
                                operands,
                                result,
                            },
                        )
                    }
                    _ => (
                        dump(&common, local),
                        OPCODE_DUMP,
                        0,
                        WqeOperation::Dump { local },
                    ),
                };
                let control = ControlFields {
                    opcode,
                    opmod,
                    wqe_index: common.wqe_index,
                    qpn: common.qpn,
                    ds: wqe.ds(),
                    fm_ce_se: common.fm_ce_se,
                    immediate: if which == 2 { immediate } else { 0 },
                    ..ControlFields::default()
                };
                (wqe, DecodedWqe { control, operation })
            },
        )
}

proptest! {
    #[test]
    fn wqe_round_trips_through_a_wrapping_ring(
        (wqe, expected) in wqe_strategy(),
        log_ring in 2u32..=6,
        index in any::<u32>(),
        garbage in any::<u8>(),
    ) {
        let ring_basic_block_count = 1u32 << log_ring;
        let mut ring = vec![garbage; ring_basic_block_count as usize * WQE_BASIC_BLOCK_BYTES];
        wqe.write_to_ring(&mut ring, ring_basic_block_count, index).unwrap();
        let decoded = decode_wqe_in_ring(&ring, ring_basic_block_count, index).unwrap();
        prop_assert_eq!(decoded.basic_block_count(), wqe.basic_block_count());
        prop_assert_eq!(&decoded, &expected);
        prop_assert_eq!(decode_wqe(wqe.as_bytes()).unwrap(), expected);
        prop_assert!(wqe.basic_block_count() <= INLINE_WQE_BASIC_BLOCKS_MAX);
    }

    #[test]
    fn control_segment_round_trips(
        opcode in any::<u8>(), opmod in any::<u8>(), wqe_index in any::<u16>(),
        qpn in 0..=0xff_ffffu32, ds in 0..=WQE_DS_MAX, fm_ce_se in any::<u8>(),
        signature in any::<u8>(), dci_stream_channel_id in any::<u16>(), immediate in any::<u32>(),
    ) {
        let fields = ControlFields {
            opcode, opmod, wqe_index, qpn, ds, fm_ce_se, signature, dci_stream_channel_id, immediate,
        };
        let bytes = ControlSegment::encode(&fields).to_bytes();
        prop_assert_eq!(ControlSegment::from_bytes(&bytes).decode(), fields);
    }

    #[test]
    fn cqes_round_trip(
        send_opcode in any::<u8>(), qpn in 0..=0xff_ffffu32, wqe_counter in any::<u16>(),
        byte_count in any::<u32>(), syndrome in any::<u8>(), vendor in any::<u8>(),
        owner in any::<bool>(),
    ) {
        let completion = RequesterCompletion { send_opcode, qpn, wqe_counter };
        let good = Cqe64::requester(&completion, byte_count, owner).to_bytes();
        prop_assert_eq!(
            decode_cqe(&good).unwrap(),
            DecodedCqe::Requester { completion, byte_count, owner }
        );
        let bad = ErrorCqe64::requester_error(&completion, syndrome, vendor, owner).to_bytes();
        prop_assert_eq!(
            decode_cqe(&bad).unwrap(),
            DecodedCqe::RequesterError { completion, syndrome, vendor_err_synd: vendor, owner }
        );
    }

    #[test]
    fn doorbells_round_trip(producer_index in any::<u16>(), qpn in 0..=0xff_ffffu32) {
        let value = UarDoorbell::next_producer_index(producer_index, qpn);
        let value = UarDoorbell::from_bytes(&value.store_value_u64_little_endian().to_le_bytes());
        prop_assert_eq!(
            value.decode().unwrap(),
            DecodedUarDoorbell::NextProducerIndex { producer_index, qpn }
        );
        let record = DoorbellRecord::for_send_producer_index(u32::from(producer_index) | 0x5_0000);
        prop_assert_eq!(
            DoorbellRecord::from_bytes(&record.to_bytes()).send_producer_index(),
            producer_index
        );
    }

    #[test]
    fn proxy_commands_round_trip(
        ticket in 0..u64::MAX, peer_rank in any::<u32>(), completion_requested in any::<bool>(),
        which in 0..5u8, words in any::<[u64; 4]>(), small in any::<[u32; 4]>(), add in any::<bool>(),
    ) {
        let put = ProxyPut {
            source_address: words[0],
            source_key: small[0],
            destination_region_index: small[1],
            destination_offset_bytes: words[1],
            length_bytes: words[2],
        };
        let operation = if add { SignalOperation::Add } else { SignalOperation::Set };
        let signal = ProxySignal {
            region_index: small[2], offset_bytes: small[3], value: words[3], operation,
        };
        let operation = match which {
            0 => ProxyOperation::Nop,
            1 => ProxyOperation::Put(put),
            2 => ProxyOperation::Signal(signal),
            3 => ProxyOperation::PutSignal(put, signal),
            _ => ProxyOperation::Drain,
        };
        let command = ProxyCommand { ticket, peer_rank, completion_requested, operation };
        let entry = ProxyRingEntry::from_bytes(&command.encode().to_bytes());
        prop_assert!(entry.is_filled_for_ticket(ticket));
        prop_assert_eq!(entry.decode().unwrap(), command);
    }

    #[test]
    fn descriptors_and_handles_round_trip(words in any::<[u64; 12]>(), small in any::<[u32; 12]>()) {
        let remote = RemoteRegionDescriptor {
            base_address: words[0], length_bytes: words[1], rkey: small[0], peer_rank: small[1],
            transport: small[2], region_index: small[3],
        };
        prop_assert_eq!(RemoteRegionDescriptor::from_bytes(&remote.to_bytes()), remote);
        let local = LocalRegionDescriptor { address: words[2], lkey: small[4], reserved: small[5] };
        prop_assert_eq!(LocalRegionDescriptor::from_bytes(&local.to_bytes()), local);
        let handle = EndpointHandle {
            transport: small[0], peer_rank: small[1], local_rank: small[2], flags: small[3],
            sq_buffer_address: words[3], sq_wqe_basic_block_count: small[4], qpn: small[5],
            doorbell_record_address: words[4], uar_doorbell_address: words[5],
            cq_buffer_address: words[6], cqe_count: small[6], cq_collapsed: small[7],
            management_address: words[7], proxy_ring_address: words[8],
            proxy_ring_capacity_entries: small[8], reserved_0: small[9],
            peer_base_delta: words[9] as i64, atomic_result_address: words[1] ^ words[2],
            atomic_result_lkey: small[10], reserved_1: small[11], wait_failure_log_address: words[0] ^ words[3],
            receive_context_address: words[4] ^ words[6],
        };
        prop_assert_eq!(EndpointHandle::from_bytes(&handle.to_bytes()), handle);
    }
}
