//! Reading live clusters: which clusters a command talks to ([`cluster`]), and a runtime for
//! the otherwise synchronous CLI. Every live command takes [`cluster::ClusterArgs`] and turns it
//! into members with [`cluster::ClusterArgs::members`]; a member that cannot be reached is
//! that member's finding, never the end of the run.

pub mod cluster;
pub mod paged;
pub mod sample;
pub mod storage;
pub mod target;
pub mod test;

/// Run `f` on a tokio runtime made for this command (convctl is synchronous elsewhere).
/// Installs rustls' ring provider first: the kube client needs exactly one.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime (threads and timers) can be built")
        .block_on(f)
}
