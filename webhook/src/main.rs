//! `dco-webhook`: see `dco_webhook::cli::Args` for the flags.

use std::sync::Arc;

use clap::Parser;
use dco_webhook::cli::Args;
use dco_webhook::engine::EngineCompiler;

/// Counts each thread's allocations so a conversion can be held to its memory budget
/// (`dco_webhook::pool::RequestBudget`).
#[global_allocator]
static ALLOCATOR: dco_webhook::alloc::Counting = dco_webhook::alloc::Counting;

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: `kubectl logs` and the termination messages built from the
    // log's tail would show escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_ansi(ansi);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> std::process::ExitCode {
    dco_webhook::alloc::limit_arenas();
    let args = Args::parse();
    init_logging(&args.log_format);
    // rustls needs one process-wide provider; installing it explicitly avoids depending on
    // which crypto features the dependency graph happens to enable.
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
    match runtime.block_on(dco_webhook::run::run(args, Arc::new(EngineCompiler))) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
