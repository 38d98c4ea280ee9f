//! `dco-operator`: see `dco_operator::cli::Args` for the flags.

use clap::Parser;
use dco_operator::cli::Args;
use dco_operator::observability::telemetry;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let telemetry = match telemetry::init(&args.log_format, args.otlp_endpoint.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // One process-wide rustls provider, whatever the dependency graph enables.
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match args.apply_crds.clone() {
        Some(dir) => runtime.block_on(dco_operator::crds::run(&dir)),
        None => runtime.block_on(dco_operator::runtime::run(args)),
    };
    // On this thread, off the async workers: the exporter's HTTP client blocks.
    telemetry.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
