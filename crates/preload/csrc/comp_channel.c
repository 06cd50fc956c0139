/*
 * Completion channels for unmodified verbs programs on the Sluice device (issue 16).
 *
 * rdma-core's ibv_create_comp_channel is no provider operation: libibverbs asks the kernel
 * for the channel's descriptor itself (verbs.c:498-520 in v44.0), which fails without kernel
 * RDMA. For a context of the Sluice device this library answers instead: the channel's fd
 * is a pipe's read end. The provider's create_cq opens its own non-blocking write end
 * through /proc/self/fd and gives it to the engine with the CQ's address as the token, so
 * each event is the 8-byte record (struct ib_uverbs_comp_event_desc) that libibverbs'
 * ibv_get_cq_event reads and turns back into the CQ. Other contexts go to libibverbs.
 *
 * Only the public, stable (IBVERBS_1.0) layouts are touched: a context's device, the
 * device's name, and the channel itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sl_ibv_device {
	void *ops[2]; /* struct _ibv_device_ops */
	int node_type;
	int transport_type;
	char name[64];
};

struct sl_ibv_context {
	struct sl_ibv_device *device;
};

struct sl_ibv_comp_channel {
	struct sl_ibv_context *context;
	int fd;
	int refcnt;
};

/* Ours: the public channel first, then the pipe's write end that keeps readers blocking. */
struct sl_channel {
	struct sl_ibv_comp_channel ch;
	int keep_wr;
};

static int is_sluice(const struct sl_ibv_context *ctx)
{
	return ctx && ctx->device && strncmp(ctx->device->name, "sluice", 6) == 0;
}

void *ibv_create_comp_channel(struct sl_ibv_context *ctx)
{
	struct sl_channel *c;
	int p[2];

	if (!is_sluice(ctx)) {
		void *(*real)(struct sl_ibv_context *) =
			(void *(*)(struct sl_ibv_context *))dlvsym(RTLD_NEXT, "ibv_create_comp_channel",
								  "IBVERBS_1.0");
		if (!real) {
			errno = ENOSYS;
			return NULL;
		}
		return real(ctx);
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(p, O_CLOEXEC)) {
		free(c);
		return NULL;
	}
	c->ch.context = ctx;
	c->ch.fd = p[0];
	c->ch.refcnt = 0;
	c->keep_wr = p[1];
	return &c->ch;
}

int ibv_destroy_comp_channel(struct sl_ibv_comp_channel *ch)
{
	struct sl_channel *c = (struct sl_channel *)ch;

	if (!ch)
		return EINVAL;
	if (!is_sluice(ch->context)) {
		int (*real)(struct sl_ibv_comp_channel *) =
			(int (*)(struct sl_ibv_comp_channel *))dlvsym(RTLD_NEXT, "ibv_destroy_comp_channel",
								     "IBVERBS_1.0");
		return real ? real(ch) : ENOSYS;
	}
	/* As libibverbs: a channel still used by a CQ stays. */
	if (ch->refcnt)
		return EBUSY;
	close(ch->fd);
	close(c->keep_wr);
	free(c);
	return 0;
}
