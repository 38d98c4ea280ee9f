//! Sharding the operator's replicas (docs/sharding.md): shards of the uid hash (`shard`), the
//! pure shard assignment of one Coordinator tick (`coordinator`), its Lease I/O (`leases`),
//! its run loop on a thread of its own (`run`), the reconcile gate and the write fence (`gate`),
//! the pause detector (`pause`), the watches
//! narrowed to this replica's shards (`sharded_watch`) and their families (`metrics`).

pub(crate) mod coordinator;
pub(crate) mod gate;
pub(crate) mod leases;
pub(crate) mod metrics;
pub(crate) mod pause;
pub(crate) mod run;
pub(crate) mod shard;
pub(crate) mod sharded_watch;
