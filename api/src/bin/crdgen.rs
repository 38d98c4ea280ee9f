//! Prints dco's three CRDs as multi-document YAML, or with `--out-dir DIR` writes one file per
//! CRD (`<plural>.yaml`), as the chart ships them.
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            print!("{}", dco_api::crds_yaml());
            ExitCode::SUCCESS
        }
        [flag, dir] if flag == "--out-dir" => {
            for (file, yaml) in dco_api::crd_files() {
                let path = std::path::Path::new(dir).join(&file);
                if let Err(e) = std::fs::write(&path, yaml) {
                    eprintln!("crdgen: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: crdgen [--out-dir DIR]");
            ExitCode::from(2)
        }
    }
}
