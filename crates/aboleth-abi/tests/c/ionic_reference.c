/*
 * Reference encoder for tests/ionic_crosscheck.rs: the same inputs as our Rust Ionic encoders,
 * put through rdma-core's own providers/ionic/ionic_fw_types.h (struct layouts and enums only;
 * nothing is linked) the way ionic_v1_prep_rdma, ionic_v1_prep_atomic and ionic_queue_dbell_val
 * fill them, with the doorbell constants of ionic_queue.h (extracted by the test into
 * ionic_doorbell_defs.h, since that header needs rdma-core's util headers). It prints layout
 * facts and constants, then reads one command per line on stdin and prints "<label> <hex bytes>"
 * for each, label = "<command>#<line number>":
 *
 *   write VERSION WQE_ID COLOR SIG FENCE RADDR RKEY HAS_IMM IMM NSGE ADDR0 LEN0 LKEY0 ADDR1 LEN1 LKEY1
 *   inline VERSION WQE_ID COLOR SIG FENCE RADDR RKEY HAS_IMM IMM LEN SEED   (data[i] = SEED + 31 i)
 *   atomic VERSION WQE_ID COLOR SIG FENCE RADDR RKEY CS SWAP_ADD COMPARE LADDR LKEY
 *   sendcqe QID MSN HAS_ERROR STATUS COLOR
 *   recvcqe QID WQE_ID SRC_QP LENGTH IMM COLOR
 *   doorbell QID PRODUCER
 */
#include <endian.h>
#include <linux/types.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ionic_fw_types.h"

#define BIT_ULL(n) (1ULL << (n))
#include "ionic_doorbell_defs.h"

#define LAYOUT(type, field) printf("offsetof.%s.%s %zu\n", #type, #field, offsetof(struct type, field))
#define SIZE(type) printf("sizeof.%s %zu\n", #type, sizeof(struct type))
#define CONSTANT(name) printf("const.%s %llu\n", #name, (unsigned long long)(name))

static void print_layouts(void)
{
	SIZE(ionic_v1_wqe);
	SIZE(ionic_v1_base_hdr);
	SIZE(ionic_sge);
	SIZE(ionic_v1_cqe);
	LAYOUT(ionic_v1_wqe, base.wqe_id);
	LAYOUT(ionic_v1_wqe, base.op);
	LAYOUT(ionic_v1_wqe, base.num_sge_key);
	LAYOUT(ionic_v1_wqe, base.flags);
	LAYOUT(ionic_v1_wqe, base.imm_data_key);
	LAYOUT(ionic_v1_wqe, common.rdma.remote_va_high);
	LAYOUT(ionic_v1_wqe, common.rdma.remote_va_low);
	LAYOUT(ionic_v1_wqe, common.rdma.remote_rkey);
	LAYOUT(ionic_v1_wqe, common.length);
	LAYOUT(ionic_v1_wqe, common.pld);
	LAYOUT(ionic_v1_wqe, atomic.swap_add_high);
	LAYOUT(ionic_v1_wqe, atomic.compare_low);
	LAYOUT(ionic_v1_wqe, atomic.sge);
	LAYOUT(ionic_v1_wqe, atomic_v2.lkey);
	LAYOUT(ionic_v1_wqe, atomic_v2.local_va);
	LAYOUT(ionic_sge, va);
	LAYOUT(ionic_sge, len);
	LAYOUT(ionic_sge, lkey);
	LAYOUT(ionic_v1_cqe, recv.wqe_id);
	LAYOUT(ionic_v1_cqe, recv.src_qpn_op);
	LAYOUT(ionic_v1_cqe, recv.imm_data_rkey);
	LAYOUT(ionic_v1_cqe, send.msg_msn);
	LAYOUT(ionic_v1_cqe, status_length);
	LAYOUT(ionic_v1_cqe, qid_type_flags);
	CONSTANT(IONIC_V1_OP_SEND);
	CONSTANT(IONIC_V1_OP_RDMA_READ);
	CONSTANT(IONIC_V1_OP_RDMA_WRITE);
	CONSTANT(IONIC_V1_OP_RDMA_WRITE_IMM);
	CONSTANT(IONIC_V1_OP_ATOMIC_CS);
	CONSTANT(IONIC_V1_OP_ATOMIC_FA);
	CONSTANT(IONIC_V2_OPSL_OUT);
	CONSTANT(IONIC_V2_OPSL_IMM);
	CONSTANT(IONIC_V2_OP_SEND);
	CONSTANT(IONIC_V2_OP_RDMA_WRITE);
	CONSTANT(IONIC_V2_OP_RDMA_WRITE_IMM);
	CONSTANT(IONIC_V2_OP_RDMA_READ);
	CONSTANT(IONIC_V2_OP_ATOMIC_CS);
	CONSTANT(IONIC_V2_OP_ATOMIC_FA);
	CONSTANT(IONIC_V1_FLAG_FENCE);
	CONSTANT(IONIC_V1_FLAG_SOL);
	CONSTANT(IONIC_V1_FLAG_INL);
	CONSTANT(IONIC_V1_FLAG_SIG);
	CONSTANT(IONIC_V1_FLAG_COLOR);
	CONSTANT(IONIC_V1_CQE_COLOR);
	CONSTANT(IONIC_V1_CQE_ERROR);
	CONSTANT(IONIC_V1_CQE_TYPE_SHIFT);
	CONSTANT(IONIC_V1_CQE_TYPE_MASK);
	CONSTANT(IONIC_V1_CQE_QID_SHIFT);
	CONSTANT(IONIC_V1_CQE_TYPE_RECV);
	CONSTANT(IONIC_V1_CQE_TYPE_SEND_MSN);
	CONSTANT(IONIC_V1_CQE_TYPE_SEND_NPG);
	CONSTANT(IONIC_V1_CQE_RECV_QPN_MASK);
	CONSTANT(IONIC_V1_CQE_RECV_OP_SHIFT);
	CONSTANT(IONIC_V1_CQE_RECV_OP_MASK);
	CONSTANT(IONIC_V1_CQE_RECV_OP_RDMA_IMM);
	CONSTANT(IONIC_STS_OK);
	CONSTANT(IONIC_STS_LOCAL_LEN_ERR);
	CONSTANT(IONIC_STS_LOCAL_PROT_ERR);
	CONSTANT(IONIC_STS_WQE_FLUSHED_ERR);
	CONSTANT(IONIC_STS_REMOTE_ACC_ERR);
	CONSTANT(IONIC_STS_RETRY_EXCEEDED);
	CONSTANT(IONIC_QID_MASK);
	CONSTANT(IONIC_DBELL_QID_SHIFT);
	CONSTANT(IONIC_DBELL_RING_ARM);
	CONSTANT(IONIC_DBELL_RING_SONLY);
}

static void print_bytes(const char *label, const void *data, size_t size)
{
	const unsigned char *bytes = data;
	printf("%s ", label);
	for (size_t i = 0; i < size; i++)
		printf("%02x", bytes[i]);
	printf("\n");
}

/* ionic_v1_prep_base's flags and id. */
static void prep_base(struct ionic_v1_wqe *wqe, unsigned long long wqe_id, int color, int sig, int fence)
{
	uint16_t flags = be16toh(wqe->base.flags);
	wqe->base.wqe_id = wqe_id;
	if (color)
		flags |= IONIC_V1_FLAG_COLOR;
	if (fence)
		flags |= IONIC_V1_FLAG_FENCE;
	if (sig)
		flags |= IONIC_V1_FLAG_SIG;
	wqe->base.flags = htobe16(flags);
}

/* ionic_v1_prep_rdma's opcode, immediate and remote memory. */
static void prep_rdma(struct ionic_v1_wqe *wqe, int version, unsigned long long raddr, unsigned long long rkey,
		      int has_imm, unsigned long long imm)
{
	if (has_imm) {
		wqe->base.op = version < 2 ? IONIC_V1_OP_RDMA_WRITE_IMM : IONIC_V2_OP_RDMA_WRITE_IMM;
		wqe->base.imm_data_key = htobe32((uint32_t)imm);
	} else {
		wqe->base.op = version < 2 ? IONIC_V1_OP_RDMA_WRITE : IONIC_V2_OP_RDMA_WRITE;
	}
	wqe->common.rdma.remote_va_high = htobe32((uint32_t)(raddr >> 32));
	wqe->common.rdma.remote_va_low = htobe32((uint32_t)raddr);
	wqe->common.rdma.remote_rkey = htobe32((uint32_t)rkey);
}

int main(void)
{
	char line[1024];
	char label[64];
	unsigned long number = 0;
	print_layouts();
	while (fgets(line, sizeof(line), stdin)) {
		char command[16];
		number++;
		if (sscanf(line, "%15s", command) != 1)
			continue;
		snprintf(label, sizeof(label), "%s#%lu", command, number);
		if (strcmp(command, "write") == 0) {
			int version, color, sig, fence, has_imm, nsge;
			unsigned long long wqe_id, raddr, rkey, imm, addr[2], len[2], lkey[2];
			if (sscanf(line, "write %d %llu %d %d %d %llu %llu %d %llu %d %llu %llu %llu %llu %llu %llu",
				   &version, &wqe_id, &color, &sig, &fence, &raddr, &rkey, &has_imm, &imm, &nsge,
				   &addr[0], &len[0], &lkey[0], &addr[1], &len[1], &lkey[1]) != 16)
				return 2;
			struct ionic_v1_wqe wqe;
			memset(&wqe, 0, sizeof(wqe));
			prep_rdma(&wqe, version, raddr, rkey, has_imm, imm);
			unsigned long long total = 0;
			for (int i = 0; i < nsge; i++) {
				wqe.common.pld.sgl[i].va = htobe64(addr[i]);
				wqe.common.pld.sgl[i].len = htobe32((uint32_t)len[i]);
				wqe.common.pld.sgl[i].lkey = htobe32((uint32_t)lkey[i]);
				total += len[i];
			}
			wqe.base.num_sge_key = (uint8_t)nsge;
			wqe.common.length = htobe32((uint32_t)total);
			prep_base(&wqe, wqe_id, color, sig, fence);
			print_bytes(label, &wqe, sizeof(wqe));
		} else if (strcmp(command, "inline") == 0) {
			int version, color, sig, fence, has_imm, length, seed;
			unsigned long long wqe_id, raddr, rkey, imm;
			if (sscanf(line, "inline %d %llu %d %d %d %llu %llu %d %llu %d %d", &version, &wqe_id, &color,
				   &sig, &fence, &raddr, &rkey, &has_imm, &imm, &length, &seed) != 11)
				return 2;
			struct ionic_v1_wqe wqe;
			memset(&wqe, 0, sizeof(wqe));
			prep_rdma(&wqe, version, raddr, rkey, has_imm, imm);
			wqe.base.num_sge_key = 0;
			wqe.base.flags = htobe16(IONIC_V1_FLAG_INL);
			for (int i = 0; i < length; i++)
				wqe.common.pld.data[i] = (uint8_t)(seed + 31 * i);
			wqe.common.length = htobe32((uint32_t)length);
			prep_base(&wqe, wqe_id, color, sig, fence);
			print_bytes(label, &wqe, sizeof(wqe));
		} else if (strcmp(command, "atomic") == 0) {
			int version, color, sig, fence, cs;
			unsigned long long wqe_id, raddr, rkey, swap_add, compare, laddr, lkey;
			if (sscanf(line, "atomic %d %llu %d %d %d %llu %llu %d %llu %llu %llu %llu", &version, &wqe_id,
				   &color, &sig, &fence, &raddr, &rkey, &cs, &swap_add, &compare, &laddr, &lkey) != 12)
				return 2;
			struct ionic_v1_wqe wqe;
			memset(&wqe, 0, sizeof(wqe));
			if (cs) {
				wqe.base.op = version < 2 ? IONIC_V1_OP_ATOMIC_CS : IONIC_V2_OP_ATOMIC_CS;
				wqe.atomic.swap_add_high = htobe32((uint32_t)(swap_add >> 32));
				wqe.atomic.swap_add_low = htobe32((uint32_t)swap_add);
				wqe.atomic.compare_high = htobe32((uint32_t)(compare >> 32));
				wqe.atomic.compare_low = htobe32((uint32_t)compare);
			} else {
				wqe.base.op = version < 2 ? IONIC_V1_OP_ATOMIC_FA : IONIC_V2_OP_ATOMIC_FA;
				wqe.atomic.swap_add_high = htobe32((uint32_t)(swap_add >> 32));
				wqe.atomic.swap_add_low = htobe32((uint32_t)swap_add);
			}
			wqe.atomic.remote_va_high = htobe32((uint32_t)(raddr >> 32));
			wqe.atomic.remote_va_low = htobe32((uint32_t)raddr);
			wqe.atomic.remote_rkey = htobe32((uint32_t)rkey);
			wqe.base.num_sge_key = 1;
			if (version >= 2) {
				wqe.atomic_v2.local_va = htobe64(laddr);
				wqe.atomic_v2.lkey = htobe32((uint32_t)lkey);
			} else {
				wqe.atomic.sge.va = htobe64(laddr);
				wqe.atomic.sge.len = htobe32(8);
				wqe.atomic.sge.lkey = htobe32((uint32_t)lkey);
			}
			prep_base(&wqe, wqe_id, color, sig, fence);
			print_bytes(label, &wqe, sizeof(wqe));
		} else if (strcmp(command, "sendcqe") == 0) {
			unsigned long long qid, msn, has_error, status, color;
			if (sscanf(line, "sendcqe %llu %llu %llu %llu %llu", &qid, &msn, &has_error, &status, &color) != 5)
				return 2;
			struct ionic_v1_cqe cqe;
			memset(&cqe, 0, sizeof(cqe));
			cqe.send.msg_msn = htobe32((uint32_t)msn);
			cqe.status_length = htobe32(has_error ? (uint32_t)status : 0);
			uint32_t qtf = ((uint32_t)qid << IONIC_V1_CQE_QID_SHIFT) |
				       (IONIC_V1_CQE_TYPE_SEND_MSN << IONIC_V1_CQE_TYPE_SHIFT);
			if (has_error)
				qtf |= IONIC_V1_CQE_ERROR;
			if (color)
				qtf |= IONIC_V1_CQE_COLOR;
			cqe.qid_type_flags = htobe32(qtf);
			print_bytes(label, &cqe, sizeof(cqe));
		} else if (strcmp(command, "recvcqe") == 0) {
			unsigned long long qid, wqe_id, src_qp, length, imm, color;
			if (sscanf(line, "recvcqe %llu %llu %llu %llu %llu %llu", &qid, &wqe_id, &src_qp, &length, &imm,
				   &color) != 6)
				return 2;
			struct ionic_v1_cqe cqe;
			memset(&cqe, 0, sizeof(cqe));
			cqe.recv.wqe_id = wqe_id;
			cqe.recv.src_qpn_op = htobe32(((uint32_t)src_qp & IONIC_V1_CQE_RECV_QPN_MASK) |
						      (IONIC_V1_CQE_RECV_OP_RDMA_IMM << IONIC_V1_CQE_RECV_OP_SHIFT));
			cqe.recv.imm_data_rkey = htobe32((uint32_t)imm);
			cqe.status_length = htobe32((uint32_t)length);
			uint32_t qtf = ((uint32_t)qid << IONIC_V1_CQE_QID_SHIFT) |
				       (IONIC_V1_CQE_TYPE_RECV << IONIC_V1_CQE_TYPE_SHIFT);
			if (color)
				qtf |= IONIC_V1_CQE_COLOR;
			cqe.qid_type_flags = htobe32(qtf);
			print_bytes(label, &cqe, sizeof(cqe));
		} else if (strcmp(command, "doorbell") == 0) {
			unsigned long long qid, producer;
			if (sscanf(line, "doorbell %llu %llu", &qid, &producer) != 2)
				return 2;
			/* ionic_queue_dbell_init, ionic_queue_dbell_val, then ionic_dbell_ring's htole64. */
			uint64_t value = htole64((((uint64_t)qid & IONIC_QID_MASK) << IONIC_DBELL_QID_SHIFT) |
						 (uint16_t)producer);
			print_bytes(label, &value, sizeof(value));
		} else {
			return 3;
		}
	}
	return 0;
}
