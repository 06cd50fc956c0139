/*
 * LD_PRELOAD probe: perftest and ibverbs-utils bind libibverbs' functions with symbol
 * versions (ibv_get_device_list@IBVERBS_1.1, ...). A preloaded library that defines them
 * under the same version nodes (preload.map) takes those calls: ibv_devices then lists
 * "sluice-preload0", a device libibverbs knows nothing about.
 */
#include <endian.h>
#include <infiniband/verbs.h>

static struct ibv_device dev = {
	.name = "sluice-preload0",
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
};
static struct ibv_device *list[2] = { &dev, NULL };

struct ibv_device **ibv_get_device_list(int *num)
{
	if (num)
		*num = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **l)
{
	(void)l;
}

const char *ibv_get_device_name(struct ibv_device *d)
{
	return d->name;
}

__be64 ibv_get_device_guid(struct ibv_device *d)
{
	(void)d;
	return htobe64(0x5c1ce000000000ffULL);
}
