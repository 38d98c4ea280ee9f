//! Prints dco's three CRDs as multi-document YAML.
fn main() {
    print!("{}", dco_api::crds_yaml());
}
