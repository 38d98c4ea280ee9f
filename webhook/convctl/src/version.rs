//! `convctl version [-o json]` and `--version`: the release, the git commit it was built from
//! and the target it was built for (embedded by build.rs).

use clap::{Args, ValueEnum};
use serde_json::json;

use crate::CliError;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("CONVCTL_GIT_COMMIT");
pub const TARGET: &str = env!("CONVCTL_TARGET");
pub const RUSTC: &str = env!("CONVCTL_RUSTC");

/// What `--version` prints after the name.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CONVCTL_GIT_COMMIT"),
    ", ",
    env!("CONVCTL_TARGET"),
    ")"
);

#[derive(Clone, Copy, ValueEnum)]
pub enum VersionFormat {
    Text,
    Json,
}

#[derive(Args)]
pub struct VersionArgs {
    #[arg(short, long, value_enum, default_value_t = VersionFormat::Text)]
    pub output: VersionFormat,
}

pub fn run(args: &VersionArgs) -> Result<(), CliError> {
    let text = match args.output {
        VersionFormat::Text => {
            format!("convctl {VERSION}\ncommit: {COMMIT}\ntarget: {TARGET}\nrustc: {RUSTC}\n")
        }
        VersionFormat::Json => {
            let v = json!({"version": VERSION, "commit": COMMIT, "target": TARGET, "rustc": RUSTC});
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        }
    };
    crate::emit(&text);
    Ok(())
}
