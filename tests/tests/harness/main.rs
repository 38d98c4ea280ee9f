//! The local cluster itself (hack/testenv, docs/testenv.md): what the end-to-end tests of dco
//! rely on, proven without dco. One binary; each module is one test, on names of its own
//! (its namespace, CRDs named after it), so they run side by side.
//!
//! * [`conversion`]: the apiserver calls a conversion webhook that runs as a Pod.
//! * [`deployment`]: Deployment replicas are local processes on their own Pod IPs.
//! * [`gc`]: the garbage collector deletes what a deleted Pod owned.
//! * [`sharded_list`]: server-side sharded list (`shardSelector`).
//! * [`two_apiservers`]: two kube-apiservers on one etcd.

mod conversion;
mod deployment;
mod gc;
mod sharded_list;
mod two_apiservers;

/// Deletes the (cluster-scoped) CRD when the test fails half-way; blocking and independent
/// of the test's runtime.
struct CrdGuard {
    cluster: dco_tests::Cluster,
    name: String,
    armed: bool,
}

impl Drop for CrdGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::process::Command::new(self.cluster.kubectl())
                .arg("--kubeconfig")
                .arg(&self.cluster.kubeconfig)
                .args(["delete", "crd", &self.name, "--wait=false", "--ignore-not-found"])
                .output();
        }
    }
}
