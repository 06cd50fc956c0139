/*
 * The private provider ABI of libibverbs, IBVERBS_PRIVATE_34, as Debian bookworm's
 * libibverbs1 44.0-2 expects it.
 *
 * rdma-core does not ship its driver.h (providers are built inside its tree), so these
 * definitions are written here from rdma-core v44.0 (tag v44.0, commit
 * 91392a91eb41affee3bd75dc7d03eb86b4854aea), libibverbs/driver.h:
 *   enum VERBS_MATCH_*        driver.h:192-197
 *   struct verbs_match_ent    driver.h:199-208
 *   struct verbs_sysfs_dev    driver.h:249-266 (opaque here: we only pass the pointer on)
 *   struct verbs_device_ops   driver.h:269-287
 *   struct verbs_device       driver.h:290-297
 *   struct verbs_context_ops  driver.h:311-451 (76 pointers, kept sorted by rdma-core)
 *   verbs_register_driver_34, _verbs_init_and_alloc_context, verbs_set_ops,
 *   verbs_uninit_context      driver.h:464-501, exported as IBVERBS_PRIVATE_34
 *                             (libibverbs.map.in, IBVERBS_PRIVATE_@IBVERBS_PABI_VERSION@)
 * Any change of these layouts in rdma-core bumps the PABI number (34), which renames
 * verbs_register_driver_34 and the provider suffix (-rdmav34.so): a provider built from
 * these definitions cannot load into a libibverbs with another private ABI.
 */
#ifndef SLUICE_VERBS_ABI34_H
#define SLUICE_VERBS_ABI34_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#define SLUICE_PABI_VERSION 34

enum {
	VERBS_MATCH_SENTINEL = 0,
	VERBS_MATCH_PCI = 1,
	VERBS_MATCH_MODALIAS = 2,
	VERBS_MATCH_DRIVER_ID = 3,
};

struct verbs_match_ent {
	void *driver_data;
	union {
		const char *modalias;
		uint64_t driver_id;
	} u;
	uint16_t vendor;
	uint16_t device;
	uint8_t kind;
};

/* ccan/list.h's node: two pointers. */
struct sluice_list_node {
	struct sluice_list_node *next, *prev;
};

struct verbs_sysfs_dev;

struct verbs_device;
struct verbs_device_ops {
	const char *name;
	uint32_t match_min_abi_version;
	uint32_t match_max_abi_version;
	const struct verbs_match_ent *match_table;
	const struct verbs_device_ops **static_providers;
	bool (*match_device)(struct verbs_sysfs_dev *sysfs_dev);
	struct verbs_context *(*alloc_context)(struct ibv_device *device, int cmd_fd,
					       void *private_data);
	struct verbs_context *(*import_context)(struct ibv_device *device, int cmd_fd);
	struct verbs_device *(*alloc_device)(struct verbs_sysfs_dev *sysfs_dev);
	void (*uninit_device)(struct verbs_device *device);
};

struct verbs_device {
	struct ibv_device device; /* must be first: libibverbs uses container_of */
	const struct verbs_device_ops *ops;
	atomic_int refcount;
	struct sluice_list_node entry;
	struct verbs_sysfs_dev *sysfs;
	uint64_t core_support;
};

/* driver.h:141-166 (v44.0): what a provider allocates for an MR and a QP. */
enum ibv_mr_type {
	IBV_MR_TYPE_MR,
	IBV_MR_TYPE_NULL_MR,
	IBV_MR_TYPE_IMPORTED_MR,
	IBV_MR_TYPE_DMABUF_MR,
};

struct verbs_mr {
	struct ibv_mr ibv_mr;
	enum ibv_mr_type mr_type;
	int access;
};

struct verbs_xrcd;
struct verbs_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex;
	};
	uint32_t comp_mask;
	struct verbs_xrcd *xrcd;
};

/* The ops we do not implement keep their slot with an untyped pointer; NULL means
 * "use libibverbs' dummy op", which returns EOPNOTSUPP (dummy_ops.c). */
typedef void (*sluice_op_t)(void);

struct verbs_context_ops {
	sluice_op_t advise_mr;
	sluice_op_t alloc_dm;
	sluice_op_t alloc_mw;
	sluice_op_t alloc_null_mr;
	sluice_op_t alloc_parent_domain;
	struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
	sluice_op_t alloc_td;
	sluice_op_t async_event;
	sluice_op_t attach_counters_point_flow;
	sluice_op_t attach_mcast;
	sluice_op_t bind_mw;
	sluice_op_t close_xrcd;
	void (*cq_event)(struct ibv_cq *cq);
	sluice_op_t create_ah;
	sluice_op_t create_counters;
	struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe,
				    struct ibv_comp_channel *channel, int comp_vector);
	sluice_op_t create_cq_ex;
	sluice_op_t create_flow;
	sluice_op_t create_flow_action_esp;
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	sluice_op_t create_qp_ex;
	sluice_op_t create_rwq_ind_table;
	sluice_op_t create_srq;
	sluice_op_t create_srq_ex;
	sluice_op_t create_wq;
	sluice_op_t dealloc_mw;
	int (*dealloc_pd)(struct ibv_pd *pd);
	sluice_op_t dealloc_td;
	int (*dereg_mr)(struct verbs_mr *vmr);
	sluice_op_t destroy_ah;
	sluice_op_t destroy_counters;
	int (*destroy_cq)(struct ibv_cq *cq);
	sluice_op_t destroy_flow;
	sluice_op_t destroy_flow_action;
	int (*destroy_qp)(struct ibv_qp *qp);
	sluice_op_t destroy_rwq_ind_table;
	sluice_op_t destroy_srq;
	sluice_op_t destroy_wq;
	sluice_op_t detach_mcast;
	void (*free_context)(struct ibv_context *context);
	sluice_op_t free_dm;
	sluice_op_t get_srq_num;
	sluice_op_t import_dm;
	sluice_op_t import_mr;
	sluice_op_t import_pd;
	sluice_op_t modify_cq;
	sluice_op_t modify_flow_action_esp;
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
	sluice_op_t modify_qp_rate_limit;
	sluice_op_t modify_srq;
	sluice_op_t modify_wq;
	sluice_op_t open_qp;
	sluice_op_t open_xrcd;
	int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
	sluice_op_t post_srq_ops;
	sluice_op_t post_srq_recv;
	int (*query_device_ex)(struct ibv_context *context, const struct ibv_query_device_ex_input *input, struct ibv_device_attr_ex *attr, size_t attr_size);
	sluice_op_t query_ece;
	int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			struct ibv_qp_init_attr *init_attr);
	sluice_op_t query_qp_data_in_order;
	sluice_op_t query_rt_values;
	sluice_op_t query_srq;
	sluice_op_t read_counters;
	sluice_op_t reg_dm_mr;
	sluice_op_t reg_dmabuf_mr;
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
				 uint64_t hca_va, int access);
	int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
	sluice_op_t rereg_mr;
	sluice_op_t resize_cq;
	sluice_op_t set_ece;
	sluice_op_t unimport_dm;
	sluice_op_t unimport_mr;
	sluice_op_t unimport_pd;
};

_Static_assert(sizeof(struct verbs_context_ops) == 76 * sizeof(void *),
	       "verbs_context_ops must have the 76 slots of rdma-core v44.0");

void verbs_register_driver_34(const struct verbs_device_ops *ops);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id);
void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops);
void verbs_uninit_context(struct verbs_context *context);

#endif
