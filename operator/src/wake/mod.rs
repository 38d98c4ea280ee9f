//! What a change of one object must wake elsewhere, decided on the fields that matter only,
//! and the pacing of the config reconciles it asks for.
//!
//! A server's status is written by its own reconcile (server/status.rs lists the configs it
//! serves, with their phase), so waking configs on every server event made each config change
//! re-reconcile every config of its servers. Here a server fans out only when what the
//! resolver or a config reads of it changes (spec, deletion, existence), or its serving CA.
//! Handover progress is woken apart (`fanout::progressing`), for the unsettled configs a
//! server takes part in only: on its Leases, and on the part of its status a move reads
//! ([`views::ServedView`]: ready replicas and `Available`, config/facts.rs).
//!
//! changes.rs: each watch's last seen view of its objects, and what changed of it;
//! views.rs: the view of each kind that counts; fanout.rs: which objects a change wakes, and
//! their delivery to the controllers; pacing.rs: the budget of config reconciles
//! (`--rebalance-qps`); generated.rs: the XRD a CRD Crossplane generated belongs to.

pub mod changes;
pub mod fanout;
pub mod generated;
pub mod pacing;
pub mod views;
