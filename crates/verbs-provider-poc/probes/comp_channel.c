/*
 * Opens the first verbs device and asks libibverbs for a completion channel, a verb it
 * sends to the kernel through cmd_fd itself (rdma-core v44.0 verbs.c:498-520), not to the
 * provider. With cmd_fd on /dev/full it must fail with ENOSPC; prints what happened.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch;

	if (!list || !list[0]) {
		puts("no verbs device");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx) {
		printf("ibv_open_device: %s\n", strerror(errno));
		return 1;
	}
	ch = ibv_create_comp_channel(ctx);
	if (ch) {
		printf("ibv_create_comp_channel: fd %d (not a channel: nobody filled the response)\n", ch->fd);
		return 1;
	}
	printf("ibv_create_comp_channel: %s\n", strerror(errno));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
