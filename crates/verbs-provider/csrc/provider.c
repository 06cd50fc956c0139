/*
 * libsluice-rdmav34.so: Sluice's provider for rdma-core's libibverbs 44.0 (Debian bookworm).
 *
 * libibverbs finds the device `sluice0` in the tree `sluice run --verbs` writes (SYSFS_PATH),
 * matches it to this provider by modalias and loads it through RDMAV_DRIVERS
 * (docs/notes/issue-16/provider.md). Every verb goes to the engine through libsluice's C API
 * (sluice.h, "RDMA verbs"), linked into this library: the control-path verbs over the
 * engine's control socket, the data-path verbs (post_send, post_recv, poll_cq) as entries of
 * shared-memory queues (docs/verbs.md). Only RC queue pairs are served; the rest of the ops
 * table keeps libibverbs' EOPNOTSUPP defaults. Completion channels come from
 * libsluice_preload.so (ibv_create_comp_channel is not a provider operation), which
 * `sluice run` preloads.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi34.h"
#include "sluice.h"

#define SLUICE_FW_VER "sluice-0.1"
#define SLUICE_NODE_GUID 0x5c1ce00000000001ULL
#define SLUICE_VENDOR_ID 0x5c1c
#define SLUICE_VENDOR_PART_ID 4791 /* the RoCEv2 UDP port */
/* Work requests converted per call into libsluice (a longer list takes several calls). */
#define BATCH 32

_Static_assert(sizeof(struct ibv_sge) == sizeof(struct sluice_rdma_sge) &&
		       offsetof(struct ibv_sge, addr) == offsetof(struct sluice_rdma_sge, addr) &&
		       offsetof(struct ibv_sge, length) == offsetof(struct sluice_rdma_sge, length) &&
		       offsetof(struct ibv_sge, lkey) == offsetof(struct sluice_rdma_sge, lkey),
	       "an ibv_sge list is passed to libsluice as is");

struct sluice_device {
	struct verbs_device vdev;
};

struct sluice_context {
	struct verbs_context ibv_ctx;
	int async_wr;
	sluice_rdma *dev;
	struct sluice_rdma_device_attr attr;
};

struct sluice_pd {
	struct ibv_pd ibv_pd;
};

struct sluice_cq {
	struct ibv_cq ibv_cq;
	sluice_rdma_cq *cq;
};

struct sluice_qp {
	struct verbs_qp vqp;
	sluice_rdma_qp *qp;
	struct ibv_qp_cap cap;
};

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

static struct sluice_context *to_sctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct sluice_context, ibv_ctx.context);
}

static struct sluice_cq *to_scq(struct ibv_cq *cq)
{
	return container_of(cq, struct sluice_cq, ibv_cq);
}

static struct sluice_qp *to_sqp(struct ibv_qp *qp)
{
	return container_of(qp, struct sluice_qp, vqp.qp);
}

/* ---- device and port ------------------------------------------------------------------ */

static int sluice_query_device_ex(struct ibv_context *context,
				  const struct ibv_query_device_ex_input *input,
				  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct sluice_rdma_device_attr *d = &to_sctx(context)->attr;
	struct ibv_device_attr *a = &attr->orig_attr;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(*a))
		return EINVAL;
	memset(attr, 0, attr_size < sizeof(*attr) ? attr_size : sizeof(*attr));
	strncpy(a->fw_ver, SLUICE_FW_VER, sizeof(a->fw_ver) - 1);
	a->node_guid = htobe64(SLUICE_NODE_GUID);
	a->sys_image_guid = htobe64(SLUICE_NODE_GUID);
	a->max_mr_size = d->max_mr_size;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = SLUICE_VENDOR_ID;
	a->vendor_part_id = SLUICE_VENDOR_PART_ID;
	a->hw_ver = 1;
	a->max_qp = (int)d->max_qp;
	a->max_qp_wr = (int)d->max_qp_wr;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
	a->max_sge = (int)d->max_sge;
	a->max_sge_rd = (int)d->max_sge;
	a->max_cq = (int)d->max_cq;
	a->max_cqe = (int)d->max_cqe;
	a->max_mr = (int)d->max_mr;
	a->max_pd = (int)d->max_qp;
	a->max_qp_rd_atom = (int)d->max_qp_rd_atom;
	a->max_qp_init_rd_atom = (int)d->max_qp_rd_atom;
	a->max_res_rd_atom = (int)(d->max_qp_rd_atom * d->max_qp);
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	return 0;
}

static int sluice_query_port(struct ibv_context *context, uint8_t port_num,
			     struct ibv_port_attr *pa)
{
	struct sluice_rdma_device_attr *d = &to_sctx(context)->attr;

	if (port_num != 1)
		return EINVAL;
	memset(pa, 0, sizeof(*pa));
	pa->state = IBV_PORT_ACTIVE;
	pa->max_mtu = IBV_MTU_4096;
	pa->active_mtu = (enum ibv_mtu)d->active_mtu;
	pa->gid_tbl_len = 1;
	pa->max_msg_sz = 1U << 31;
	pa->pkey_tbl_len = 1;
	pa->active_width = 1;  /* 1X */
	pa->active_speed = 32; /* a nominal 25 Gb/s lane */
	pa->phys_state = 5;    /* LinkUp */
	pa->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

/* ---- protection domains and memory regions -------------------------------------------- */

static struct ibv_pd *sluice_alloc_pd(struct ibv_context *context)
{
	struct sluice_pd *pd = calloc(1, sizeof(*pd));
	uint32_t handle;
	int err;

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	err = sluice_rdma_alloc_pd(to_sctx(context)->dev, &handle);
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->ibv_pd.handle = handle;
	return &pd->ibv_pd;
}

static int sluice_dealloc_pd(struct ibv_pd *pd)
{
	int err = sluice_rdma_dealloc_pd(to_sctx(pd->context)->dev, pd->handle);

	if (!err)
		free(container_of(pd, struct sluice_pd, ibv_pd));
	return err;
}

static struct ibv_mr *sluice_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va,
				    int access)
{
	struct verbs_mr *vmr;
	uint32_t key;
	int err;

	/* Remote addresses are the application's own (hca_va == addr for ibv_reg_mr). */
	if (hca_va != (uint64_t)(uintptr_t)addr) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	vmr = calloc(1, sizeof(*vmr));
	if (!vmr) {
		errno = ENOMEM;
		return NULL;
	}
	err = sluice_rdma_reg_mr(to_sctx(pd->context)->dev, pd->handle, addr, length, access, &key);
	if (err) {
		free(vmr);
		errno = err;
		return NULL;
	}
	vmr->ibv_mr.lkey = key;
	vmr->ibv_mr.rkey = key;
	vmr->ibv_mr.handle = key;
	vmr->mr_type = IBV_MR_TYPE_MR;
	vmr->access = access;
	return &vmr->ibv_mr;
}

static int sluice_dereg_mr(struct verbs_mr *vmr)
{
	int err = sluice_rdma_dereg_mr(to_sctx(vmr->ibv_mr.context)->dev, vmr->ibv_mr.lkey);

	if (!err)
		free(vmr);
	return err;
}

/* ---- completion queues ---------------------------------------------------------------- */

static struct ibv_cq *sluice_create_cq(struct ibv_context *context, int cqe,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	struct sluice_cq *cq;
	uint32_t actual;
	int wfd = -1;
	int err;

	(void)comp_vector;
	if (cqe < 1) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	if (channel) {
		/*
		 * The channel is Sluice's (libsluice_preload.so's ibv_create_comp_channel): a pipe
		 * whose read end is channel->fd. A write end of our own, non-blocking, goes to the
		 * engine, which writes this CQ's address to it on each event: the record
		 * ibv_get_cq_event reads.
		 */
		char path[32];

		snprintf(path, sizeof(path), "/proc/self/fd/%d", channel->fd);
		wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (wfd < 0) {
			err = errno;
			free(cq);
			errno = err == ENOENT ? EINVAL : err;
			return NULL;
		}
	}
	err = sluice_rdma_create_cq_channel(to_sctx(context)->dev, (uint32_t)cqe, wfd,
					    (uint64_t)(uintptr_t)&cq->ibv_cq, &cq->cq, &actual);
	if (wfd >= 0)
		close(wfd);
	if (err) {
		free(cq);
		errno = err;
		return NULL;
	}
	cq->ibv_cq.cqe = (int)actual;
	return &cq->ibv_cq;
}

static int sluice_destroy_cq(struct ibv_cq *ibcq)
{
	struct sluice_cq *cq = to_scq(ibcq);
	int err = sluice_rdma_destroy_cq(cq->cq);

	if (!err)
		free(cq);
	return err;
}

static int sluice_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct sluice_rdma_wc w[BATCH];
	int total = 0;

	while (total < ne) {
		int want = ne - total < BATCH ? ne - total : BATCH;
		int got = sluice_rdma_poll_cq(to_scq(ibcq)->cq, want, w);

		if (got < 0)
			return total ? total : -1;
		for (int i = 0; i < got; i++) {
			struct ibv_wc *o = &wc[total + i];

			memset(o, 0, sizeof(*o));
			o->wr_id = w[i].wr_id;
			o->status = (enum ibv_wc_status)w[i].status;
			o->opcode = (enum ibv_wc_opcode)w[i].opcode;
			o->byte_len = w[i].byte_len;
			o->imm_data = w[i].imm_data;
			o->qp_num = w[i].qp_num;
			o->src_qp = w[i].src_qp;
			o->wc_flags = w[i].wc_flags;
		}
		total += got;
		if (got < want)
			break;
	}
	return total;
}

static int sluice_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	return sluice_rdma_req_notify_cq(to_scq(ibcq)->cq, solicited_only);
}

/* ---- queue pairs ---------------------------------------------------------------------- */

static struct ibv_qp *sluice_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct sluice_rdma_qp_init init;
	struct sluice_rdma_qp_caps caps;
	struct sluice_qp *qp;
	struct ibv_qp *q;
	int err;

	if (attr->qp_type != IBV_QPT_RC || attr->srq) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!attr->send_cq || !attr->recv_cq || attr->cap.max_send_sge > 1 ||
	    attr->cap.max_recv_sge > 1) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&init, 0, sizeof(init));
	init.pd = pd->handle;
	init.max_send_wr = attr->cap.max_send_wr ? attr->cap.max_send_wr : 1;
	init.max_recv_wr = attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1;
	init.max_inline = attr->cap.max_inline_data;
	init.send_cq = to_scq(attr->send_cq)->cq;
	init.recv_cq = to_scq(attr->recv_cq)->cq;
	err = sluice_rdma_create_qp(to_sctx(pd->context)->dev, &init, &qp->qp, &caps);
	if (err) {
		free(qp);
		errno = err;
		return NULL;
	}
	/* libibverbs' ibv_create_qp fills nothing in (verbs.c:658-666): the provider does. */
	q = &qp->vqp.qp;
	q->context = pd->context;
	q->qp_context = attr->qp_context;
	q->pd = pd;
	q->send_cq = attr->send_cq;
	q->recv_cq = attr->recv_cq;
	q->srq = NULL;
	q->handle = caps.qpn;
	q->qp_num = caps.qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = IBV_QPT_RC;
	q->events_completed = 0;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	qp->vqp.comp_mask = 0; /* not an ibv_qp_ex: ibv_qp_to_qp_ex returns NULL */
	qp->cap.max_send_wr = caps.max_send_wr;
	qp->cap.max_recv_wr = caps.max_recv_wr;
	qp->cap.max_send_sge = 1;
	qp->cap.max_recv_sge = 1;
	qp->cap.max_inline_data = caps.max_inline;
	attr->cap = qp->cap;
	return q;
}

/* The peer's IPv4 address from an ah_attr: RoCEv2 needs the GRH, with an IPv4-mapped GID. */
static int peer_ipv4(const struct ibv_ah_attr *ah, uint32_t *ip)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (!ah->is_global || memcmp(ah->grh.dgid.raw, mapped, sizeof(mapped)))
		return EINVAL;
	memcpy(ip, &ah->grh.dgid.raw[12], 4); /* stays in network order */
	return 0;
}

static int sluice_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sluice_rdma_qp_attr a;
	int err;

	memset(&a, 0, sizeof(a));
	a.qp_state = attr->qp_state;
	a.cur_qp_state = attr->cur_qp_state;
	a.access = attr->qp_access_flags;
	a.dest_qpn = attr->dest_qp_num;
	a.rq_psn = attr->rq_psn;
	a.sq_psn = attr->sq_psn;
	a.path_mtu = (uint8_t)attr->path_mtu;
	a.timeout = attr->timeout;
	a.retry_cnt = attr->retry_cnt;
	a.rnr_retry = attr->rnr_retry;
	a.min_rnr_timer = attr->min_rnr_timer;
	a.max_rd_atomic = attr->max_rd_atomic;
	a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_AV) {
		err = peer_ipv4(&attr->ah_attr, &a.dest_ipv4);
		if (err)
			return err;
	}
	return sluice_rdma_modify_qp(to_sqp(ibqp)->qp, &a, mask);
}

static int sluice_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
			   struct ibv_qp_init_attr *init)
{
	struct sluice_qp *qp = to_sqp(ibqp);
	struct sluice_rdma_qp_attr a;
	int err;

	(void)mask;
	err = sluice_rdma_query_qp(qp->qp, &a);
	if (err)
		return err;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = (enum ibv_qp_state)a.qp_state;
	attr->cur_qp_state = (enum ibv_qp_state)a.qp_state;
	attr->qp_access_flags = a.access;
	attr->dest_qp_num = a.dest_qpn;
	attr->rq_psn = a.rq_psn;
	attr->sq_psn = a.sq_psn;
	attr->path_mtu = (enum ibv_mtu)a.path_mtu;
	attr->timeout = a.timeout;
	attr->retry_cnt = a.retry_cnt;
	attr->rnr_retry = a.rnr_retry;
	attr->min_rnr_timer = a.min_rnr_timer;
	attr->max_rd_atomic = a.max_rd_atomic;
	attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
	attr->port_num = 1;
	attr->cap = qp->cap;
	if (a.dest_ipv4) {
		attr->ah_attr.is_global = 1;
		attr->ah_attr.port_num = 1;
		attr->ah_attr.grh.dgid.raw[10] = 0xff;
		attr->ah_attr.grh.dgid.raw[11] = 0xff;
		memcpy(&attr->ah_attr.grh.dgid.raw[12], &a.dest_ipv4, 4);
	}
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = ibqp->qp_context;
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->cap = qp->cap;
		init->qp_type = IBV_QPT_RC;
	}
	return 0;
}

static int sluice_destroy_qp(struct ibv_qp *ibqp)
{
	struct sluice_qp *qp = to_sqp(ibqp);
	int err = sluice_rdma_destroy_qp(qp->qp);

	if (err)
		return err;
	pthread_cond_destroy(&ibqp->cond);
	pthread_mutex_destroy(&ibqp->mutex);
	free(qp);
	return 0;
}

static int sluice_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
			    struct ibv_send_wr **bad_wr)
{
	struct sluice_rdma_send_wr batch[BATCH];
	struct ibv_send_wr *from[BATCH];
	size_t n = 0;

	for (; wr; wr = wr->next) {
		struct sluice_rdma_send_wr *w = &batch[n];

		memset(w, 0, sizeof(*w));
		w->wr_id = wr->wr_id;
		w->sg_list = (const struct sluice_rdma_sge *)wr->sg_list;
		w->num_sge = wr->num_sge;
		w->opcode = wr->opcode;
		w->send_flags = wr->send_flags;
		w->imm_data = wr->imm_data;
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		from[n++] = wr;
		if (n == BATCH || !wr->next) {
			size_t bad = 0;
			int err = sluice_rdma_post_send(to_sqp(ibqp)->qp, batch, n, &bad);

			if (err) {
				*bad_wr = from[bad < n ? bad : 0];
				return err;
			}
			n = 0;
		}
	}
	return 0;
}

static int sluice_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad_wr)
{
	struct sluice_rdma_recv_wr batch[BATCH];
	struct ibv_recv_wr *from[BATCH];
	size_t n = 0;

	for (; wr; wr = wr->next) {
		struct sluice_rdma_recv_wr *w = &batch[n];

		memset(w, 0, sizeof(*w));
		w->wr_id = wr->wr_id;
		w->sg_list = (const struct sluice_rdma_sge *)wr->sg_list;
		w->num_sge = wr->num_sge;
		from[n++] = wr;
		if (n == BATCH || !wr->next) {
			size_t bad = 0;
			int err = sluice_rdma_post_recv(to_sqp(ibqp)->qp, batch, n, &bad);

			if (err) {
				*bad_wr = from[bad < n ? bad : 0];
				return err;
			}
			n = 0;
		}
	}
	return 0;
}

/* ---- context and device --------------------------------------------------------------- */

static void sluice_free_context(struct ibv_context *ibctx)
{
	struct sluice_context *ctx = to_sctx(ibctx);

	sluice_rdma_close(ctx->dev);
	close(ctx->async_wr);
	/* Closes cmd_fd and async_fd, drops the device reference. */
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops sluice_ctx_ops = {
	.alloc_pd = sluice_alloc_pd,
	.create_cq = sluice_create_cq,
	.create_qp = sluice_create_qp,
	.dealloc_pd = sluice_dealloc_pd,
	.dereg_mr = sluice_dereg_mr,
	.destroy_cq = sluice_destroy_cq,
	.destroy_qp = sluice_destroy_qp,
	.free_context = sluice_free_context,
	.modify_qp = sluice_modify_qp,
	.poll_cq = sluice_poll_cq,
	.post_recv = sluice_post_recv,
	.post_send = sluice_post_send,
	.query_device_ex = sluice_query_device_ex,
	.query_port = sluice_query_port,
	.query_qp = sluice_query_qp,
	.reg_mr = sluice_reg_mr,
	.req_notify_cq = sluice_req_notify_cq,
};

static struct verbs_context *sluice_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						  void *private_data)
{
	struct sluice_context *ctx;
	int p[2];
	int err;

	(void)private_data;
	ctx = _verbs_init_and_alloc_context(ibdev, cmd_fd, sizeof(*ctx),
					    (struct verbs_context *)offsetof(struct sluice_context, ibv_ctx),
					    0 /* RDMA_DRIVER_UNKNOWN */);
	if (!ctx)
		return NULL;
	err = sluice_rdma_open(&ctx->dev);
	if (!err)
		err = sluice_rdma_query_device(ctx->dev, &ctx->attr);
	/*
	 * verbs_open_device (device.c:350-357) asks the kernel for an async-event fd on cmd_fd
	 * when async_fd is still -1, which fails without RDMA in the kernel: a pipe gives
	 * ibv_get_async_event something to block on.
	 */
	if (!err && pipe2(p, O_CLOEXEC))
		err = errno;
	if (err) {
		if (ctx->dev)
			sluice_rdma_close(ctx->dev);
		verbs_uninit_context(&ctx->ibv_ctx);
		free(ctx);
		errno = err;
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

/* The tree gives the device the modalias "sluice:engine"; init.c:257-298 matches it. */
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
