/*
 * libsluice-rdmav34.so: a proof-of-concept rdma-core provider for the Sluice verbs device.
 *
 * It proves the loading route only (issue 16, item 3): libibverbs 44.0 finds the device
 * in a fake sysfs tree (SYSFS_PATH), matches it to this provider by modalias, opens it
 * with no kernel RDMA, and calls our query_device_ex/query_port. Every other verb is left
 * to libibverbs' dummy ops (EOPNOTSUPP). The real provider forwards the verbs to the
 * engine; see docs/notes/issue-16/provider.md.
 *
 * Build: cc -shared -fPIC -o libsluice-rdmav34.so provider.c -libverbs
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi34.h"

/* The values the PoC reports; check.sh looks for them in ibv_devinfo's output. */
#define SLUICE_FW_VER "sluice-poc-0.1"
#define SLUICE_NODE_GUID 0x5c1ce00000000001ULL
#define SLUICE_VENDOR_ID 0x5c1c
#define SLUICE_VENDOR_PART_ID 4791 /* the RoCEv2 UDP port */

/* The device: libibverbs' verbs_device is all we need. */
struct sluice_device {
	struct verbs_device vdev;
};

/* The context: the verbs_context libibverbs expects, and the write end of the async pipe. */
struct sluice_context {
	struct verbs_context ibv_ctx;
	int async_wr;
};

static struct sluice_context *to_sctx(struct ibv_context *ctx)
{
	return (struct sluice_context *)((char *)ctx - offsetof(struct sluice_context, ibv_ctx.context));
}

static int sluice_query_device_ex(struct ibv_context *context,
				  const struct ibv_query_device_ex_input *input,
				  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr *a = &attr->orig_attr;

	(void)context;
	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(*a))
		return EINVAL;
	/* Zero what the caller's (possibly older or newer) struct holds, extensions included. */
	memset(attr, 0, attr_size < sizeof(*attr) ? attr_size : sizeof(*attr));
	strncpy(a->fw_ver, SLUICE_FW_VER, sizeof(a->fw_ver) - 1);
	a->node_guid = htobe64(SLUICE_NODE_GUID);
	a->sys_image_guid = htobe64(SLUICE_NODE_GUID);
	a->max_mr_size = 1ULL << 32;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = SLUICE_VENDOR_ID;
	a->vendor_part_id = SLUICE_VENDOR_PART_ID;
	a->hw_ver = 1;
	a->max_qp = 1024;
	a->max_qp_wr = 4096;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
	a->max_sge = 8;
	a->max_sge_rd = 8;
	a->max_cq = 1024;
	a->max_cqe = 65536;
	a->max_mr = 4096;
	a->max_pd = 256;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->max_res_rd_atom = 16 * 1024;
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	return 0;
}

static int sluice_query_port(struct ibv_context *context, uint8_t port_num,
			     struct ibv_port_attr *pa)
{
	(void)context;
	if (port_num != 1)
		return EINVAL;
	memset(pa, 0, sizeof(*pa));
	pa->state = IBV_PORT_ACTIVE;
	pa->max_mtu = IBV_MTU_4096;
	pa->active_mtu = IBV_MTU_1024;
	pa->gid_tbl_len = 1;
	pa->port_cap_flags = 0;
	pa->max_msg_sz = 1U << 31;
	pa->pkey_tbl_len = 1;
	pa->active_width = 1;  /* 1X */
	pa->active_speed = 32; /* 25 Gb/s (EDR) per lane: a nominal value */
	pa->phys_state = 5;    /* LinkUp */
	pa->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

static void sluice_free_context(struct ibv_context *ibctx)
{
	struct sluice_context *ctx = to_sctx(ibctx);

	close(ctx->async_wr);
	/* Closes cmd_fd and async_fd, drops the device reference. */
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops sluice_ctx_ops = {
	.free_context = sluice_free_context,
	.query_device_ex = sluice_query_device_ex,
	.query_port = sluice_query_port,
};

static struct verbs_context *sluice_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						  void *private_data)
{
	struct sluice_context *ctx;
	int p[2];

	(void)private_data;
	ctx = _verbs_init_and_alloc_context(ibdev, cmd_fd, sizeof(*ctx),
					    (struct verbs_context *)offsetof(struct sluice_context, ibv_ctx),
					    0 /* RDMA_DRIVER_UNKNOWN */);
	if (!ctx)
		return NULL;
	/*
	 * verbs_open_device (device.c:350-357) asks the kernel for an async-event fd on
	 * cmd_fd when async_fd is still -1, which fails without RDMA in the kernel. A pipe
	 * gives ibv_get_async_event something to block on; the engine would write
	 * struct ib_uverbs_async_event_desc records into it.
	 */
	if (pipe2(p, O_CLOEXEC)) {
		verbs_uninit_context(&ctx->ibv_ctx);
		free(ctx);
		return NULL;
	}
	ctx->ibv_ctx.context.async_fd = p[0];
	ctx->async_wr = p[1];
	ctx->ibv_ctx.context.num_comp_vectors = 1;
	verbs_set_ops(&ctx->ibv_ctx, &sluice_ctx_ops);
	return &ctx->ibv_ctx;
}

static struct verbs_device *sluice_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	struct sluice_device *dev;

	(void)sysfs_dev;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	return &dev->vdev;
}

static void sluice_uninit_device(struct verbs_device *vdev)
{
	free((struct sluice_device *)vdev);
}

/* The fake sysfs tree gives the device a modalias "sluice:engine"; init.c:257-298 match it. */
static const struct verbs_match_ent sluice_match_table[] = {
	{ .u.modalias = "sluice:*", .kind = VERBS_MATCH_MODALIAS },
	{ .kind = VERBS_MATCH_SENTINEL },
};

static const struct verbs_device_ops sluice_dev_ops = {
	.name = "sluice",
	/* The per-device abi_version file (uverbsN/abi_version) is ours to write: 1. */
	.match_min_abi_version = 1,
	.match_max_abi_version = 1,
	.match_table = sluice_match_table,
	.alloc_device = sluice_alloc_device,
	.uninit_device = sluice_uninit_device,
	.alloc_context = sluice_alloc_context,
};

/* What PROVIDER_DRIVER (driver.h:476-482) expands to: register when dlopen()ed. */
__attribute__((constructor)) static void sluice_register_driver(void)
{
	verbs_register_driver_34(&sluice_dev_ops);
}
