/*
 * Reference encoder for tests/rdma_core_crosscheck.rs: the same inputs as our Rust encoders, put
 * through rdma-core's own <infiniband/mlx5dv.h> (static inline helpers and struct layouts only;
 * nothing is linked). It first prints layout facts and constants, then reads one command per line
 * on stdin and prints "<label> <hex bytes>" for each, where label = "<command>#<line number>".
 *
 * Segments the header has no struct for (masked atomics) are written through the
 * struct mlx5_wqe_atomic_seg field names, which is how NVSHMEM lays them out.
 */
#include <infiniband/mlx5dv.h>
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYOUT(type, field) printf("offsetof.%s.%s %zu\n", #type, #field, offsetof(struct type, field))
#define SIZE(type) printf("sizeof.%s %zu\n", #type, sizeof(struct type))
#define CONSTANT(name) printf("const.%s %llu\n", #name, (unsigned long long)(name))

static void print_layouts(void)
{
	SIZE(mlx5_wqe_ctrl_seg);
	LAYOUT(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
	LAYOUT(mlx5_wqe_ctrl_seg, qpn_ds);
	LAYOUT(mlx5_wqe_ctrl_seg, signature);
	LAYOUT(mlx5_wqe_ctrl_seg, dci_stream_channel_id);
	LAYOUT(mlx5_wqe_ctrl_seg, fm_ce_se);
	LAYOUT(mlx5_wqe_ctrl_seg, imm);
	SIZE(mlx5_wqe_raddr_seg);
	LAYOUT(mlx5_wqe_raddr_seg, raddr);
	LAYOUT(mlx5_wqe_raddr_seg, rkey);
	SIZE(mlx5_wqe_data_seg);
	LAYOUT(mlx5_wqe_data_seg, byte_count);
	LAYOUT(mlx5_wqe_data_seg, lkey);
	LAYOUT(mlx5_wqe_data_seg, addr);
	SIZE(mlx5_wqe_atomic_seg);
	LAYOUT(mlx5_wqe_atomic_seg, swap_add);
	LAYOUT(mlx5_wqe_atomic_seg, compare);
	SIZE(mlx5_wqe_inl_data_seg);
	SIZE(mlx5_cqe64);
	LAYOUT(mlx5_cqe64, srqn_uidx);
	LAYOUT(mlx5_cqe64, imm_inval_pkey);
	LAYOUT(mlx5_cqe64, byte_cnt);
	LAYOUT(mlx5_cqe64, timestamp);
	LAYOUT(mlx5_cqe64, sop_drop_qpn);
	LAYOUT(mlx5_cqe64, wqe_counter);
	LAYOUT(mlx5_cqe64, signature);
	LAYOUT(mlx5_cqe64, op_own);
	SIZE(mlx5_err_cqe);
	LAYOUT(mlx5_err_cqe, vendor_err_synd);
	LAYOUT(mlx5_err_cqe, syndrome);
	LAYOUT(mlx5_err_cqe, s_wqe_opcode_qpn);
	LAYOUT(mlx5_err_cqe, wqe_counter);
	LAYOUT(mlx5_err_cqe, op_own);
	CONSTANT(MLX5_SEND_WQE_BB);
	CONSTANT(MLX5_SEND_WQE_SHIFT);
	CONSTANT(MLX5_OPCODE_NOP);
	CONSTANT(MLX5_OPCODE_RDMA_WRITE);
	CONSTANT(MLX5_OPCODE_RDMA_WRITE_IMM);
	CONSTANT(MLX5_OPCODE_SEND);
	CONSTANT(MLX5_OPCODE_RDMA_READ);
	CONSTANT(MLX5_OPCODE_ATOMIC_CS);
	CONSTANT(MLX5_OPCODE_ATOMIC_FA);
	CONSTANT(MLX5_OPCODE_ATOMIC_MASKED_CS);
	CONSTANT(MLX5_OPCODE_ATOMIC_MASKED_FA);
	CONSTANT(MLX5_WQE_CTRL_CQ_UPDATE);
	CONSTANT(MLX5_WQE_CTRL_SOLICITED);
	CONSTANT(MLX5_WQE_CTRL_FENCE);
	CONSTANT(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
	CONSTANT(MLX5_INLINE_SEG);
	CONSTANT(MLX5_INVALID_LKEY);
	CONSTANT(MLX5_SND_DBR);
	CONSTANT(MLX5_RCV_DBR);
	CONSTANT(MLX5_CQE_REQ);
	CONSTANT(MLX5_CQE_REQ_ERR);
	CONSTANT(MLX5_CQE_INVALID);
	CONSTANT(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_MW_BIND_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_BAD_RESP_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	CONSTANT(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);
}

static void print_hex(const char *command, int line_number, const void *bytes, size_t length)
{
	printf("%s#%d ", command, line_number);
	for (size_t i = 0; i < length; i++)
		printf("%02x", ((const uint8_t *)bytes)[i]);
	printf("\n");
}

/* Arguments of the current command, parsed with base 0 (decimal or 0x hex). */
static unsigned long long arg[16];

/* A WQE under construction: 4 basic blocks, zeroed. */
static uint8_t wqe[256];

static size_t finish_wqe(uint8_t opcode, uint8_t opmod, uint32_t imm, size_t body_bytes)
{
	uint8_t ds = (uint8_t)(1 + body_bytes / 16);
	/* arg[0] = pi, arg[1] = qpn, arg[2] = fm_ce_se for every WQE command. */
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)wqe, (uint16_t)arg[0], opcode, opmod,
			    (uint32_t)arg[1], (uint8_t)arg[2], ds, 0, imm);
	return (ds * 16 + 63) / 64 * 64;
}

static void set_raddr(size_t offset, uint64_t raddr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *seg = (struct mlx5_wqe_raddr_seg *)(wqe + offset);
	seg->raddr = htobe64(raddr);
	seg->rkey = htobe32(rkey);
	seg->reserved = 0;
}

static void set_atomic(size_t offset, uint64_t swap_add, uint64_t compare)
{
	struct mlx5_wqe_atomic_seg *seg = (struct mlx5_wqe_atomic_seg *)(wqe + offset);
	seg->swap_add = htobe64(swap_add);
	seg->compare = htobe64(compare);
}

static void set_data(size_t offset, uint32_t length, uint32_t lkey, uint64_t address)
{
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(wqe + offset), length, lkey, address);
}

int main(void)
{
	char line[1024];
	int line_number = 0;
	print_layouts();
	while (fgets(line, sizeof line, stdin)) {
		char *command = strtok(line, " \n");
		int count = 0;
		char *token;
		line_number++;
		if (!command)
			continue;
		while ((token = strtok(NULL, " \n")) && count < 16)
			arg[count++] = strtoull(token, NULL, 0);
		memset(wqe, 0, sizeof wqe);
		size_t length = 0;
		if (!strcmp(command, "ctrl")) {
			/* pi opcode opmod qpn fm_ce_se ds signature immediate(host value) */
			struct mlx5_wqe_ctrl_seg ctrl;
			memset(&ctrl, 0, sizeof ctrl);
			mlx5dv_set_ctrl_seg(&ctrl, (uint16_t)arg[0], (uint8_t)arg[1], (uint8_t)arg[2],
					    (uint32_t)arg[3], (uint8_t)arg[4], (uint8_t)arg[5], (uint8_t)arg[6],
					    htobe32((uint32_t)arg[7]));
			print_hex(command, line_number, &ctrl, sizeof ctrl);
			continue;
		} else if (!strcmp(command, "data")) {
			struct mlx5_wqe_data_seg data;
			mlx5dv_set_data_seg(&data, (uint32_t)arg[0], (uint32_t)arg[1], (uintptr_t)arg[2]);
			print_hex(command, line_number, &data, sizeof data);
			continue;
		} else if (!strcmp(command, "inline_header")) {
			struct mlx5_wqe_inl_data_seg header;
			header.byte_count = htobe32((uint32_t)arg[0] | MLX5_INLINE_SEG);
			print_hex(command, line_number, &header, sizeof header);
			continue;
		} else if (!strcmp(command, "nop")) {
			length = finish_wqe(MLX5_OPCODE_NOP, 0, 0, 0);
		} else if (!strcmp(command, "write") || !strcmp(command, "read") ||
			   !strcmp(command, "write_imm")) {
			/* raddr rkey laddr lkey length [immediate] */
			uint8_t opcode = !strcmp(command, "write") ? MLX5_OPCODE_RDMA_WRITE
					 : !strcmp(command, "read") ? MLX5_OPCODE_RDMA_READ
								    : MLX5_OPCODE_RDMA_WRITE_IMM;
			uint32_t imm = opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? htobe32((uint32_t)arg[8]) : 0;
			set_raddr(16, arg[3], (uint32_t)arg[4]);
			set_data(32, (uint32_t)arg[7], (uint32_t)arg[6], arg[5]);
			length = finish_wqe(opcode, 0, imm, 32);
		} else if (!strcmp(command, "write_inline")) {
			/* raddr rkey length seed: payload byte i = (seed + 7 * i) & 0xff */
			uint32_t payload_length = (uint32_t)arg[5];
			struct mlx5_wqe_inl_data_seg *header = (struct mlx5_wqe_inl_data_seg *)(wqe + 32);
			set_raddr(16, arg[3], (uint32_t)arg[4]);
			header->byte_count = htobe32(payload_length | MLX5_INLINE_SEG);
			for (uint32_t i = 0; i < payload_length; i++)
				wqe[36 + i] = (uint8_t)(arg[6] + 7 * i);
			length = finish_wqe(MLX5_OPCODE_RDMA_WRITE, 0, 0,
					    16 + (4 + payload_length + 15) / 16 * 16);
		} else if (!strcmp(command, "fetch_add") || !strcmp(command, "compare_swap") ||
			   !strcmp(command, "masked_fetch_add")) {
			/* raddr rkey operand0 operand1 laddr lkey; fetch_add ignores operand1 */
			int fetch_add = !strcmp(command, "fetch_add");
			int masked = !strcmp(command, "masked_fetch_add");
			set_raddr(16, arg[3], (uint32_t)arg[4]);
			if (fetch_add)
				set_atomic(32, arg[5], 0);
			else if (masked) /* {add, field_boundary} */
				set_atomic(32, arg[5], arg[6]);
			else /* arg[5] = compare, arg[6] = swap */
				set_atomic(32, arg[6], arg[5]);
			set_data(48, 8, (uint32_t)arg[8], arg[7]);
			length = finish_wqe(masked ? MLX5_OPCODE_ATOMIC_MASKED_FA
					    : fetch_add ? MLX5_OPCODE_ATOMIC_FA : MLX5_OPCODE_ATOMIC_CS,
					    masked ? 0x09 : 0, 0, 48);
		} else if (!strcmp(command, "masked_compare_swap")) {
			/* raddr rkey swap compare swap_mask compare_mask laddr lkey */
			set_raddr(16, arg[3], (uint32_t)arg[4]);
			set_atomic(32, arg[5], arg[6]);
			set_atomic(48, arg[7], arg[8]);
			set_data(64, 8, (uint32_t)arg[10], arg[9]);
			length = finish_wqe(MLX5_OPCODE_ATOMIC_MASKED_CS, 0x09, 0, 64);
		} else if (!strcmp(command, "cqe") || !strcmp(command, "err_cqe")) {
			/* send_opcode qpn wqe_counter owner byte_count|syndrome vendor_syndrome */
			uint8_t bytes[64];
			memset(bytes, 0, sizeof bytes);
			if (!strcmp(command, "cqe")) {
				struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)bytes;
				cqe->sop_drop_qpn = htobe32((uint32_t)(arg[0] << 24 | arg[1]));
				cqe->wqe_counter = htobe16((uint16_t)arg[2]);
				cqe->byte_cnt = htobe32((uint32_t)arg[4]);
				cqe->op_own = (uint8_t)(MLX5_CQE_REQ << 4 | arg[3]);
				if (mlx5dv_get_cqe_opcode(cqe) != MLX5_CQE_REQ ||
				    mlx5dv_get_cqe_owner(cqe) != arg[3])
					return 2;
			} else {
				struct mlx5_err_cqe *cqe = (struct mlx5_err_cqe *)bytes;
				cqe->s_wqe_opcode_qpn = htobe32((uint32_t)(arg[0] << 24 | arg[1]));
				cqe->wqe_counter = htobe16((uint16_t)arg[2]);
				cqe->syndrome = (uint8_t)arg[4];
				cqe->vendor_err_synd = (uint8_t)arg[5];
				cqe->op_own = (uint8_t)(MLX5_CQE_REQ_ERR << 4 | arg[3]);
			}
			print_hex(command, line_number, bytes, sizeof bytes);
			continue;
		} else if (!strcmp(command, "dbrec")) {
			/* producer_index, as providers/mlx5/qp.c writes it */
			__be32 dbrec[2] = {0, 0};
			dbrec[MLX5_SND_DBR] = htobe32((uint32_t)arg[0] & 0xffff);
			print_hex(command, line_number, dbrec, sizeof dbrec);
			continue;
		} else if (!strcmp(command, "uar_last_wqe")) {
			/* pi qpn fm_ce_se opcode opmod ds: the first 8 bytes of that WQE's ctrl */
			struct mlx5_wqe_ctrl_seg ctrl;
			mlx5dv_set_ctrl_seg(&ctrl, (uint16_t)arg[0], (uint8_t)arg[3], (uint8_t)arg[4],
					    (uint32_t)arg[1], (uint8_t)arg[2], (uint8_t)arg[5], 0, 0);
			print_hex(command, line_number, &ctrl, 8);
			continue;
		} else {
			fprintf(stderr, "unknown command %s\n", command);
			return 1;
		}
		print_hex(command, line_number, wqe, length);
	}
	return 0;
}
