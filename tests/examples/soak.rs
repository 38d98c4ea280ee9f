//! The soak's driver (`hack/soak` runs it; docs/performance.md, "Soak"):
//!
//! ```sh
//! hack/soak --duration 5m [--seed N] [--targets 4] [--objects 10] [--period-ms 40] [--out DIR]
//! ```
//!
//! Prints the seed (a run replays with the same `--seed`) and the report's directory; exits 0
//! when every check passed, 1 when one failed, 2 on a usage error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use dco_tests::soak::{self, Options, schedule::parse_duration};

const USAGE: &str = "usage: hack/soak --duration 5m [--seed N] [--targets 1..=20] [--objects 1..=500] [--period-ms 5..=10000] [--out DIR]";

fn parse(args: &[String]) -> Result<Options, String> {
    let mut opts = Options::new(Duration::from_secs(300), soak::clock_seed());
    let mut duration = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
        let value = match inline.or_else(|| it.next().cloned()) {
            Some(v) => v,
            None => return Err(format!("{flag} needs a value")),
        };
        let number = |lo: u64, hi: u64| -> Result<u64, String> {
            let n: u64 = value.parse().map_err(|_| format!("{flag} {value}: not a number"))?;
            if (lo..=hi).contains(&n) { Ok(n) } else { Err(format!("{flag} {value}: must be {lo}..={hi}")) }
        };
        match flag.as_str() {
            "--duration" => {
                duration = Some(
                    parse_duration(&value)
                        .ok_or(format!("--duration {value}: give 90s, 5m or 1h (at most a day)"))?,
                )
            }
            "--seed" => opts.seed = number(0, u64::MAX)?,
            "--targets" => opts.targets = number(1, 20)? as usize,
            "--objects" => opts.objects = number(1, 500)? as usize,
            "--period-ms" => opts.period = Duration::from_millis(number(5, 10_000)?),
            "--out" => opts.out = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let duration = duration.ok_or("--duration is required")?;
    let fresh = Options::new(duration, opts.seed);
    Ok(Options { duration, warmup: fresh.warmup, ..opts })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(soak::run(&opts)) {
        Ok(outcome) => {
            for (what, ok, detail) in &outcome.checks {
                println!("{} {what}: {detail}", if *ok { "ok  " } else { "FAIL" });
            }
            println!("seed {}; report: {}", opts.seed, outcome.dir.join("index.html").display());
            if outcome.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            eprintln!("soak (seed {}): {e:#}", opts.seed);
            ExitCode::from(1)
        }
    }
}
