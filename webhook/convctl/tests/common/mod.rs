//! Shared helpers of the convctl integration tests: run the binary, read its output, find the
//! fixtures in docs/examples/convctl.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/convctl")
}

pub fn ex(name: &str) -> String {
    examples().join(name).to_string_lossy().into_owned()
}

pub fn convctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_convctl")).args(args).output().expect("convctl runs")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("convctl-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

pub fn widgets(cmd: &str) -> Vec<String> {
    vec![cmd.into(), "--config".into(), ex("widgets-config.yaml"), "--xrd".into(), ex("widgets-xrd.yaml")]
}

pub fn run(args: Vec<String>) -> Output {
    convctl(&args.iter().map(String::as_str).collect::<Vec<_>>())
}
