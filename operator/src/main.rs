//! `dco-operator`: see `dco_operator::cli::Args` for the flags.

use clap::Parser;
use dco_operator::cli::Args;

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    init_logging(&args.log_format);
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
    match runtime.block_on(dco_operator::runtime::run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
