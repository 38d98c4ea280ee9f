//! `--help` text beyond the flags: each command's examples and the exit codes, so a CI author
//! learns what a gate means from the binary itself (docs/convctl.md has the long form).

use clap::{ArgMatches, Command};

const EXIT_CODES: &str = "Exit codes: 0 clean, 1 findings (the config, a sample or a comparison fails), 2 usage or input error (bad flags, a file that cannot be read or parsed).";

/// Examples per subcommand, run from docs/examples/convctl.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "validate",
        "convctl validate -c widgets-config.yaml -x widgets-xrd.yaml\n  convctl validate -c databases-config.yaml --crd databases-crd.yaml -o sarif --output-file convctl.sarif",
    ),
    ("analyze", "convctl analyze -c widgets-config.yaml -x widgets-xrd.yaml -o json"),
    (
        "convert",
        "convctl convert -c databases-config.yaml --crd databases-crd.yaml --sample samples-db/db-v2.yaml --to v1",
    ),
    (
        "test",
        "convctl test -c widgets-config.yaml -x widgets-xrd.yaml -s samples\n  kubectl get xwidgets -o yaml | convctl test -c widgets-config.yaml -x widgets-xrd.yaml -s - -o junit --output-file report.xml\n  convctl test -c widgets-config.yaml -x widgets-xrd.yaml -s samples --fail-on warn --only-failures\n  convctl test --live -c widgets-config.yaml -x xwidgets.example.org --contexts east,west --max-samples 500 --sample-strategy random -o junit --output-file fleet.xml",
    ),
    (
        "diff",
        "convctl diff -c old/config.yaml -c new/config.yaml -x widgets-xrd.yaml\n  convctl diff --live -c widgets-config.yaml --kubeconfig-dir fleet/",
    ),
    ("compat", "convctl compat --base origin/main --head HEAD"),
    ("lint", "convctl lint .\n  convctl lint deploy/ -o github"),
    (
        "versions",
        "convctl versions -x widgets-xrd.yaml -c widgets-config.yaml\n  convctl versions --check-unserve v1 --live --crd databases.example.org --contexts east,west",
    ),
    (
        "plan",
        "convctl plan -c widgets-config.yaml -x widgets-xrd.yaml --to v2\n  convctl plan --to v2 --live --crd databases.example.org --context prod -o json",
    ),
    ("suggest", "convctl suggest -c databases-config.yaml --crd databases-crd.yaml"),
    ("rehub", "convctl rehub -c databases-config.yaml --crd databases-crd.yaml --to v1"),
    (
        "patch-preview",
        "convctl patch-preview -c widgets-config.yaml --service-name dco-webhook --service-namespace dco-system --ca-bundle \"$(cat ca.crt)\"",
    ),
    ("generate", "convctl generate kyverno -c widgets-config.yaml -x widgets-xrd.yaml"),
    ("completion", "source <(convctl completion bash)"),
    ("version", "convctl version -o json"),
    (
        "crossplane",
        "convctl crossplane status --contexts east,west\n  convctl crossplane status --xrd xbuckets.example.org -o json",
    ),
    (
        "retarget",
        "convctl retarget --to pool-b --canary 10 --context prod\n  convctl retarget --to pool-b --canary 10 --context prod --apply\n  convctl retarget --unpin --from pool-b --context prod --apply",
    ),
    (
        "import",
        "convctl import old/*.yaml > dco.yaml\n  kubectl get xrdconversionconfigs.conversion.terasky.com -o yaml | convctl import -",
    ),
];

/// The CLI with examples and exit codes after every command's help.
pub fn command(cli: Command) -> Command {
    let mut cli = cli.after_help(EXIT_CODES);
    for (name, examples) in EXAMPLES {
        cli = cli.mut_subcommand(*name, |c| c.after_help(format!("Examples:\n  {examples}\n\n{EXIT_CODES}")));
    }
    cli
}

pub fn matches(cli: Command) -> ArgMatches {
    command(cli).get_matches()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand has examples, and every example names a command that exists.
    #[test]
    fn every_command_has_examples() {
        let cli = super::command(crate::Cli::command());
        for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
            let help = sub.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(help.contains("Examples:") && help.contains("Exit codes"), "{}: {help}", sub.get_name());
        }
        for (name, _) in super::EXAMPLES {
            assert!(cli.find_subcommand(name).is_some(), "{name}");
        }
    }
}
