/*
 * Reference encoder for tests/efa_crosscheck.rs: the same inputs as our Rust EFA encoders, put
 * through rdma-core's own providers/efa/efa_io_defs.h (struct layouts and field masks only;
 * nothing is linked). It prints layout facts and constants, then reads one command per line on
 * stdin and prints "<label> <hex bytes>" for each, label = "<command>#<line number>":
 *
 *   write REQ_ID PHASE COMP DEST_QP AH QKEY RADDR RKEY LADDR LKEY LENGTH HAS_IMM IMM
 *   txc REQ_ID STATUS PHASE QP_NUM OP
 *   rxc REQ_ID PHASE QP_NUM LENGTH AH SRC_QP IMM
 *
 * Fields are set through the header's *_MASK macros (FIELD_SET below), as rdma-core's provider
 * does with EFA_SET, so a bit in a different place shows as a differing byte.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What efa_io_defs.h expects its includer to define (rdma-core's util headers). */
#define BIT(n) (1UL << (n))
#define GENMASK(h, l) (((~0UL) << (l)) & (~0UL >> (63 - (h))))
#include "efa_io_defs.h"

#define FIELD_SET(target, mask, value) \
	((target) = (__typeof__(target))(((target) & ~(mask)) | ((((unsigned long)(value)) << __builtin_ctzl(mask)) & (mask))))

#define LAYOUT(type, field) printf("offsetof.%s.%s %zu\n", #type, #field, offsetof(struct type, field))
#define SIZE(type) printf("sizeof.%s %zu\n", #type, sizeof(struct type))
#define CONSTANT(name) printf("const.%s %llu\n", #name, (unsigned long long)(name))

static void print_layouts(void)
{
	SIZE(efa_io_tx_meta_desc);
	LAYOUT(efa_io_tx_meta_desc, req_id);
	LAYOUT(efa_io_tx_meta_desc, ctrl1);
	LAYOUT(efa_io_tx_meta_desc, ctrl2);
	LAYOUT(efa_io_tx_meta_desc, dest_qp_num);
	LAYOUT(efa_io_tx_meta_desc, length);
	LAYOUT(efa_io_tx_meta_desc, immediate_data);
	LAYOUT(efa_io_tx_meta_desc, ah);
	LAYOUT(efa_io_tx_meta_desc, qkey);
	SIZE(efa_io_tx_buf_desc);
	SIZE(efa_io_remote_mem_addr);
	SIZE(efa_io_tx_wqe);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.remote_mem.length);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.remote_mem.rkey);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.remote_mem.buf_addr_lo);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.remote_mem.buf_addr_hi);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.local_mem[0].length);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.local_mem[0].lkey);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.local_mem[0].buf_addr_lo);
	LAYOUT(efa_io_tx_wqe, data.rdma_req.local_mem[0].buf_addr_hi);
	SIZE(efa_io_tx_cdesc);
	LAYOUT(efa_io_tx_cdesc, common.req_id);
	LAYOUT(efa_io_tx_cdesc, common.status);
	LAYOUT(efa_io_tx_cdesc, common.flags);
	LAYOUT(efa_io_tx_cdesc, common.qp_num);
	SIZE(efa_io_rx_cdesc);
	LAYOUT(efa_io_rx_cdesc, length);
	LAYOUT(efa_io_rx_cdesc, ah);
	LAYOUT(efa_io_rx_cdesc, src_qp_num);
	LAYOUT(efa_io_rx_cdesc, imm);
	CONSTANT(EFA_IO_TX_DESC_NUM_RDMA_BUFS);
	CONSTANT(EFA_IO_TX_DESC_IMM_DATA_SIZE);
	CONSTANT(EFA_IO_SEND);
	CONSTANT(EFA_IO_RDMA_READ);
	CONSTANT(EFA_IO_RDMA_WRITE);
	CONSTANT(EFA_IO_SEND_QUEUE);
	CONSTANT(EFA_IO_RECV_QUEUE);
	CONSTANT(EFA_IO_COMP_STATUS_OK);
	CONSTANT(EFA_IO_COMP_STATUS_FLUSHED);
	CONSTANT(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_AH);
	CONSTANT(EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY);
	CONSTANT(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_DEST_QPN);
	CONSTANT(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH);
	CONSTANT(EFA_IO_COMP_STATUS_REMOTE_ERROR_BAD_ADDRESS);
	CONSTANT(EFA_IO_COMP_STATUS_REMOTE_ERROR_RNR);
	CONSTANT(EFA_IO_COMP_STATUS_LOCAL_ERROR_UNREACH_REMOTE);
	CONSTANT(EFA_IO_TX_META_DESC_OP_TYPE_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_HAS_IMM_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_INLINE_MSG_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_META_DESC_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_META_EXTENSION_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_PHASE_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_FIRST_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_LAST_MASK);
	CONSTANT(EFA_IO_TX_META_DESC_COMP_REQ_MASK);
	CONSTANT(EFA_IO_TX_BUF_DESC_LKEY_MASK);
	CONSTANT(EFA_IO_CDESC_COMMON_PHASE_MASK);
	CONSTANT(EFA_IO_CDESC_COMMON_Q_TYPE_MASK);
	CONSTANT(EFA_IO_CDESC_COMMON_HAS_IMM_MASK);
	CONSTANT(EFA_IO_CDESC_COMMON_OP_TYPE_MASK);
	CONSTANT(EFA_IO_CDESC_COMMON_UNSOLICITED_MASK);
}

static void print_bytes(const char *label, const void *data, size_t size)
{
	const unsigned char *bytes = data;
	printf("%s ", label);
	for (size_t i = 0; i < size; i++)
		printf("%02x", bytes[i]);
	printf("\n");
}

int main(void)
{
	char line[512];
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
			unsigned long long req_id, phase, comp, dest_qp, ah, qkey, raddr, rkey, laddr, lkey, length, has_imm, imm;
			if (sscanf(line, "write %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &req_id, &phase,
				   &comp, &dest_qp, &ah, &qkey, &raddr, &rkey, &laddr, &lkey, &length, &has_imm, &imm) != 13)
				return 2;
			struct efa_io_tx_wqe wqe;
			memset(&wqe, 0, sizeof(wqe));
			wqe.meta.req_id = (uint16_t)req_id;
			FIELD_SET(wqe.meta.ctrl1, EFA_IO_TX_META_DESC_OP_TYPE_MASK, EFA_IO_RDMA_WRITE);
			FIELD_SET(wqe.meta.ctrl1, EFA_IO_TX_META_DESC_META_DESC_MASK, 1);
			FIELD_SET(wqe.meta.ctrl1, EFA_IO_TX_META_DESC_HAS_IMM_MASK, has_imm);
			FIELD_SET(wqe.meta.ctrl2, EFA_IO_TX_META_DESC_PHASE_MASK, phase);
			FIELD_SET(wqe.meta.ctrl2, EFA_IO_TX_META_DESC_FIRST_MASK, 1);
			FIELD_SET(wqe.meta.ctrl2, EFA_IO_TX_META_DESC_LAST_MASK, 1);
			FIELD_SET(wqe.meta.ctrl2, EFA_IO_TX_META_DESC_COMP_REQ_MASK, comp);
			wqe.meta.dest_qp_num = (uint16_t)dest_qp;
			wqe.meta.length = EFA_IO_TX_DESC_NUM_RDMA_BUFS;
			wqe.meta.immediate_data = has_imm ? (uint32_t)imm : 0;
			wqe.meta.ah = (uint16_t)ah;
			wqe.meta.qkey = (uint32_t)qkey;
			wqe.data.rdma_req.remote_mem.length = (uint32_t)length;
			wqe.data.rdma_req.remote_mem.rkey = (uint32_t)rkey;
			wqe.data.rdma_req.remote_mem.buf_addr_lo = (uint32_t)raddr;
			wqe.data.rdma_req.remote_mem.buf_addr_hi = (uint32_t)(raddr >> 32);
			wqe.data.rdma_req.local_mem[0].length = (uint32_t)length;
			FIELD_SET(wqe.data.rdma_req.local_mem[0].lkey, EFA_IO_TX_BUF_DESC_LKEY_MASK, lkey);
			wqe.data.rdma_req.local_mem[0].buf_addr_lo = (uint32_t)laddr;
			wqe.data.rdma_req.local_mem[0].buf_addr_hi = (uint32_t)(laddr >> 32);
			print_bytes(label, &wqe, sizeof(wqe));
		} else if (strcmp(command, "txc") == 0) {
			unsigned long long req_id, status, phase, qp_num, op;
			if (sscanf(line, "txc %llu %llu %llu %llu %llu", &req_id, &status, &phase, &qp_num, &op) != 5)
				return 2;
			struct efa_io_tx_cdesc cdesc;
			memset(&cdesc, 0, sizeof(cdesc));
			cdesc.common.req_id = (uint16_t)req_id;
			cdesc.common.status = (uint8_t)status;
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_PHASE_MASK, phase);
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_Q_TYPE_MASK, EFA_IO_SEND_QUEUE);
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_OP_TYPE_MASK, op);
			cdesc.common.qp_num = (uint16_t)qp_num;
			print_bytes(label, &cdesc, sizeof(cdesc));
		} else if (strcmp(command, "rxc") == 0) {
			unsigned long long req_id, phase, qp_num, length, ah, src_qp, imm;
			if (sscanf(line, "rxc %llu %llu %llu %llu %llu %llu %llu", &req_id, &phase, &qp_num, &length, &ah, &src_qp,
				   &imm) != 7)
				return 2;
			struct efa_io_rx_cdesc cdesc;
			memset(&cdesc, 0, sizeof(cdesc));
			cdesc.common.req_id = (uint16_t)req_id;
			cdesc.common.status = EFA_IO_COMP_STATUS_OK;
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_PHASE_MASK, phase);
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_Q_TYPE_MASK, EFA_IO_RECV_QUEUE);
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_HAS_IMM_MASK, 1);
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_OP_TYPE_MASK, EFA_IO_RDMA_WRITE);
			FIELD_SET(cdesc.common.flags, EFA_IO_CDESC_COMMON_UNSOLICITED_MASK, 1);
			cdesc.common.qp_num = (uint16_t)qp_num;
			cdesc.length = (uint16_t)length;
			cdesc.ah = (uint16_t)ah;
			cdesc.src_qp_num = (uint16_t)src_qp;
			cdesc.imm = (uint32_t)imm;
			print_bytes(label, &cdesc, sizeof(cdesc));
		} else {
			return 2;
		}
	}
	return 0;
}
