//! The images (docs/images.md): `hack/image` builds OCI image archives of dco-operator,
//! dco-webhook and convctl without a Docker daemon. This test builds all three from the debug
//! binaries `hack/test`'s build step made (`--profile debug --no-build`: the release path differs
//! only in the directory the binaries come from, and costs minutes of cargo on 2 cores), then
//! reads each archive back with its own tar, gzip, sha256 and JSON reading — not crane's:
//!
//! * the OCI layout: `oci-layout`, `index.json` naming the image, every blob's digest and size;
//! * the config: platform, entrypoint `/usr/local/bin/<binary>`, a numeric non-root user that
//!   `/etc/passwd` knows, the working directory, the `org.opencontainers.image.*` labels, and
//!   `rootfs.diff_ids` equal to the digests of the uncompressed layers;
//! * the files, layers applied in order: the binary executable and root-owned at the entrypoint,
//!   the ELF interpreter and every `DT_NEEDED` library (transitively) present, no shell nor any
//!   other executable, `/tmp` 1777;
//! * the binary runs from the image's files alone: `chroot` into the unpacked layers as the
//!   image's user and run `<entrypoint> --version` (nothing of the host's is reachable there);
//! * the Docker-style `manifest.json` and the OCI layout both load in crane (pushed to crane's
//!   own registry on loopback), and a second build of the same binary is byte-identical.
//!
//! Needs `target/debug/{dco-operator,dco-webhook,convctl}` (`cargo build --workspace --bins`),
//! root or unprivileged user namespaces (for `chroot`), and crane (`hack/testenv tool crane`,
//! which hack/image builds itself). No cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, ensure};
use serde_json::Value;
use sha2::{Digest, Sha256};

const BINARIES: [&str; 3] = ["dco-operator", "dco-webhook", "convctl"];
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

#[test]
fn images_hold_what_they_need_and_run() -> Result<()> {
    for b in BINARIES {
        dco_tests::workspace_binary(b)?;
    }
    let root = dco_tests::repo_root();
    let work = std::env::temp_dir().join(dco_tests::unique_name("dco-image-test"));
    let out = work.join("images");
    let t0 = Instant::now();
    hack_image(&root, &out, &BINARIES)?;
    eprintln!("hack/image --profile debug --no-build (3 images): {:.1} s", t0.elapsed().as_secs_f64());

    let version = env!("CARGO_PKG_VERSION");
    let revision = git(&root, &["rev-parse", "HEAD"])?;
    let mut base_layers = BTreeMap::new();
    for b in BINARIES {
        let archive = out.join(format!("{b}-{version}.tar"));
        let img = OciArchive::read(&archive)?;
        let size = std::fs::metadata(&archive)?.len();
        eprintln!("{b}: {} bytes, manifest {}", size, img.manifest_digest);

        // the config
        let cfg = &img.config;
        ensure!(
            cfg["os"] == "linux" && cfg["architecture"] == host_arch(),
            "{b}: platform {}/{}",
            cfg["os"],
            cfg["architecture"]
        );
        let c = &cfg["config"];
        let entrypoint = format!("/usr/local/bin/{b}");
        ensure!(c["Entrypoint"] == serde_json::json!([entrypoint]), "{b}: Entrypoint {}", c["Entrypoint"]);
        ensure!(
            c.get("Cmd").is_none_or(Value::is_null),
            "{b}: a Cmd {} would be passed to the binary",
            c["Cmd"]
        );
        let user = c["User"].as_str().ok_or_else(|| anyhow!("{b}: no User in the config"))?;
        let (uid, gid) = numeric_user(user).with_context(|| format!("{b}: User {user:?}"))?;
        ensure!(uid != 0 && gid != 0, "{b}: User {user} is root");
        let labels = &c["Labels"];
        ensure!(
            labels["org.opencontainers.image.title"] == b,
            "{b}: title label {}",
            labels["org.opencontainers.image.title"]
        );
        ensure!(
            labels["org.opencontainers.image.version"] == version,
            "{b}: version label {}",
            labels["org.opencontainers.image.version"]
        );
        let rev = labels["org.opencontainers.image.revision"].as_str().unwrap_or_default();
        ensure!(
            rev.strip_suffix("-dirty").unwrap_or(rev) == revision,
            "{b}: revision label {rev:?}, HEAD is {revision}"
        );
        for l in ["created", "licenses", "description"] {
            let v = &labels[format!("org.opencontainers.image.{l}")];
            ensure!(
                v.as_str().is_some_and(|s| !s.is_empty()),
                "{b}: label org.opencontainers.image.{l} is {v}"
            );
        }
        ensure!(
            img.index_annotations["io.containerd.image.name"] == format!("docker.io/library/{b}:v{version}")
                && img.index_annotations["org.opencontainers.image.ref.name"] == format!("v{version}"),
            "{b}: index annotations {}",
            img.index_annotations
        );

        // the files, and the binary from them alone
        let rootfs = work.join(format!("{b}-rootfs"));
        let fs = img.unpack(&rootfs)?;
        check_files(b, &fs, &rootfs, &entrypoint, uid, gid, c["WorkingDir"].as_str())?;
        let env: Vec<(String, String)> = c["Env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str()?.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        let said = run_in_chroot(&rootfs, uid, gid, &env, &[&entrypoint, "--version"])?;
        // `NAME VERSION`, then what a binary adds (convctl: its commit and build target).
        let first_two: Vec<&str> = said.split_whitespace().take(2).collect();
        ensure!(first_two == [b, version], "{b} --version in the image said {said:?}");
        eprintln!("{b}: `{entrypoint} --version` in a chroot of the image as {uid}:{gid}: {}", said.trim());
        base_layers.insert(b, img.layer_digests[0].clone());
    }
    // the operator and the webhook need the same libraries (ldd of both: the loader, libc, libm,
    // libgcc_s), and the base layer is reproducible: one blob for both
    ensure!(
        base_layers["dco-operator"] == base_layers["dco-webhook"],
        "the base layers differ: {base_layers:?}"
    );

    crane_loads(&out.join(format!("convctl-{version}.tar")), &work)?;

    // reproducible: the same binary at the same commit gives the same bytes
    let again = work.join("again");
    hack_image(&root, &again, &["convctl"])?;
    let (a, b) = (out.join(format!("convctl-{version}.tar")), again.join(format!("convctl-{version}.tar")));
    ensure!(
        std::fs::read(&a)? == std::fs::read(&b)?,
        "two builds of the convctl image differ: {} {}",
        a.display(),
        b.display()
    );

    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

fn hack_image(root: &Path, out: &Path, bins: &[&str]) -> Result<()> {
    let st = Command::new(root.join("hack").join("image"))
        .args(["--profile", "debug", "--no-build", "--out"])
        .arg(out)
        .args(bins)
        // one epoch for both builds of the reproducibility check, whatever HEAD does meanwhile
        .env("SOURCE_DATE_EPOCH", git(root, &["log", "-1", "--format=%ct"])?)
        .current_dir(root)
        .status()
        .context("running hack/image")?;
    ensure!(st.success(), "hack/image failed ({st})");
    Ok(())
}

fn git(root: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git").args(args).current_dir(root).output().context("running git")?;
    ensure!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `uid[:gid]`, both numbers: a name would need the image's /etc/passwd to mean anything, and
/// the kubelet's `runAsNonRoot` refuses a non-numeric user it cannot check.
fn numeric_user(user: &str) -> Result<(u32, u32)> {
    let (u, g) = user.split_once(':').unwrap_or((user, user));
    Ok((u.parse().context("the user is not numeric")?, g.parse().context("the group is not numeric")?))
}

/// The checks on the unpacked files (`fs` by path without a leading `/`).
fn check_files(
    b: &str,
    fs: &BTreeMap<String, Meta>,
    rootfs: &Path,
    entrypoint: &str,
    uid: u32,
    gid: u32,
    workdir: Option<&str>,
) -> Result<()> {
    let rel = |p: &str| p.trim_start_matches('/').to_string();
    let bin = fs.get(&rel(entrypoint)).ok_or_else(|| anyhow!("{b}: {entrypoint} is not in the layers"))?;
    ensure!(
        bin.kind == Kind::File && bin.mode & 0o111 == 0o111,
        "{b}: {entrypoint} is {bin:?}, not an executable file"
    );
    ensure!(bin.uid == 0 && bin.mode & 0o022 == 0, "{b}: {entrypoint} is {bin:?}: the user could replace it");
    let head = std::fs::read(rootfs.join(rel(entrypoint)))?;
    ensure!(head.starts_with(b"\x7fELF"), "{b}: {entrypoint} is not an ELF file");

    // the loader and every library, transitively, where the loader looks (no ld.so.cache in
    // the image: its built-in directories)
    let triple = format!("{}-linux-gnu", std::env::consts::ARCH);
    let search = [
        format!("lib/{triple}"),
        format!("usr/lib/{triple}"),
        "lib64".into(),
        "lib".into(),
        "usr/lib".into(),
    ];
    let mut need = vec![rel(entrypoint)];
    let mut seen = BTreeSet::new();
    let mut libs = BTreeSet::new();
    while let Some(f) = need.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        let (interp, needed) = elf_deps(&rootfs.join(&f))?;
        if let Some(i) = interp {
            let i = rel(&i);
            ensure!(
                fs.get(&i).is_some_and(|m| m.kind == Kind::File),
                "{b}: the ELF interpreter /{i} ({f} asks for it) is not in the image"
            );
            libs.insert(i.clone());
            need.push(i);
        }
        for lib in needed {
            let found = search
                .iter()
                .map(|d| format!("{d}/{lib}"))
                .find(|p| fs.get(p).is_some_and(|m| m.kind == Kind::File))
                .ok_or_else(|| anyhow!("{b}: {lib}, needed by /{f}, is not in the image"))?;
            libs.insert(found.clone());
            need.push(found);
        }
    }
    eprintln!("{b}: libraries {libs:?}");

    for shell in ["bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh", "bin/dash"] {
        ensure!(!fs.contains_key(shell), "{b}: /{shell} is in the image");
    }
    let executables: BTreeSet<String> = fs
        .iter()
        .filter(|(p, m)| m.kind == Kind::File && m.mode & 0o111 != 0 && !libs.contains(*p))
        .map(|(p, _)| p.clone())
        .collect();
    ensure!(
        executables == BTreeSet::from([rel(entrypoint)]),
        "{b}: executables besides the binary and its libraries: {executables:?}"
    );
    let links: Vec<_> = fs.iter().filter(|(_, m)| m.kind == Kind::Symlink).map(|(p, _)| p).collect();
    ensure!(
        links.is_empty(),
        "{b}: symlinks {links:?} (none expected: files sit at the paths the loader asks for)"
    );

    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).context("/etc/passwd")?;
    let home = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() == 7 && f[2] == uid.to_string() && f[3] == gid.to_string())
        .map(|f| f[5].to_string())
        .ok_or_else(|| anyhow!("{b}: /etc/passwd has no user {uid}:{gid}:\n{passwd}"))?;
    let group = std::fs::read_to_string(rootfs.join("etc/group")).context("/etc/group")?;
    ensure!(
        group.lines().any(|l| l.split(':').nth(2) == Some(&gid.to_string())),
        "{b}: /etc/group has no group {gid}"
    );
    let h = fs.get(&rel(&home)).ok_or_else(|| anyhow!("{b}: the user's home {home} is not in the image"))?;
    ensure!(
        h.kind == Kind::Dir && h.uid == u64::from(uid),
        "{b}: {home} is {h:?}, not a directory of user {uid}"
    );
    if let Some(w) = workdir.filter(|w| *w != "/") {
        ensure!(
            fs.get(&rel(w)).is_some_and(|m| m.kind == Kind::Dir),
            "{b}: WorkingDir {w} is not a directory in the image"
        );
    }
    let tmp = fs.get("tmp").ok_or_else(|| anyhow!("{b}: no /tmp"))?;
    ensure!(tmp.kind == Kind::Dir && tmp.mode & 0o7777 == 0o1777, "{b}: /tmp is {tmp:?}");
    // nothing else belongs to the user: it can write only its home and /tmp
    let owned: Vec<_> =
        fs.iter().filter(|(_, m)| m.uid != 0 || m.gid != 0).map(|(p, _)| p.as_str()).collect();
    ensure!(
        owned.iter().all(|p| *p == rel(&home) || p.starts_with(&format!("{}/", rel(&home)))),
        "{b}: not root-owned: {owned:?}"
    );
    Ok(())
}

/// The ELF interpreter and `DT_NEEDED` entries of a file, from binutils' `readelf`.
fn elf_deps(file: &Path) -> Result<(Option<String>, Vec<String>)> {
    let out =
        Command::new("readelf").args(["-W", "-l", "-d"]).arg(file).output().context("running readelf")?;
    ensure!(out.status.success(), "readelf {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let interp = text
        .lines()
        .find_map(|l| l.split("Requesting program interpreter: ").nth(1))
        .map(|s| s.trim_end_matches(']').to_string());
    let needed = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
        .collect();
    Ok((interp, needed))
}

/// Runs `argv` inside `rootfs` with only `env`: as `uid:gid` through `chroot --userspec` when this
/// process is root, else as the namespace's root through `unshare --map-root-user chroot`.
fn run_in_chroot(
    rootfs: &Path,
    uid: u32,
    gid: u32,
    env: &[(String, String)],
    argv: &[&str],
) -> Result<String> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .ok_or_else(|| anyhow!("no Uid in /proc/self/status"))?;
    // found on this process's PATH: the child's environment is the image's
    let host = |tool: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain(["/usr/sbin".into(), "/usr/bin".into()])
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
            .ok_or_else(|| anyhow!("{tool} not found"))
    };
    let mut cmd = if euid == "0" {
        let mut c = Command::new(host("chroot")?);
        c.arg(format!("--userspec={uid}:{gid}"));
        c
    } else {
        let mut c = Command::new(host("unshare")?);
        c.args(["--map-root-user", "chroot"]);
        c
    };
    let out = cmd
        .arg(rootfs)
        .args(argv)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(rootfs)
        .output()
        .context("running chroot")?;
    ensure!(
        out.status.success(),
        "{argv:?} in a chroot of {} failed ({}): {}{}",
        rootfs.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// crane reads the archive both ways: as a Docker-style tarball (manifest.json) — same config —
/// and, unpacked, as an OCI image layout — same manifest digest.
fn crane_loads(archive: &Path, work: &Path) -> Result<()> {
    let crane = dco_tests::testenv_tool("crane")?;
    let img = OciArchive::read(archive)?;
    let docker_config = work.join("docker-config");
    std::fs::create_dir_all(&docker_config)?;
    let mut registry = Command::new(&crane)
        .args(["registry", "serve", "--address", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .context("starting crane registry serve")?;
    let mut lines = std::io::BufReader::new(registry.stderr.take().expect("piped")).lines();
    let port = lines
        .by_ref()
        .map_while(|l| l.ok())
        .find_map(|l| Some(l.split("serving on port ").nth(1)?.trim().to_string()));
    // keep reading its log: Go dies of SIGPIPE writing to a closed stderr
    std::thread::spawn(move || lines.for_each(drop));
    let result = (|| {
        let port = port.ok_or_else(|| anyhow!("crane registry serve did not say its port"))?;
        let crane_out = |args: &[&std::ffi::OsStr]| -> Result<Vec<u8>> {
            let out = Command::new(&crane).args(args).env("DOCKER_CONFIG", &docker_config).output()?;
            ensure!(out.status.success(), "crane {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            Ok(out.stdout)
        };
        let tarball_ref = format!("127.0.0.1:{port}/convctl:tarball");
        crane_out(&["push".as_ref(), archive.as_os_str(), tarball_ref.as_ref()])?;
        let config = crane_out(&["config".as_ref(), tarball_ref.as_ref()])?;
        ensure!(
            config == img.config_bytes,
            "crane's config of the tarball differs from the archive's config blob"
        );

        let layout = work.join("layout");
        img.write_layout(&layout)?;
        let layout_ref = format!("127.0.0.1:{port}/convctl:layout");
        let pushed = crane_out(&["push".as_ref(), layout.as_os_str(), layout_ref.as_ref()])?;
        let pushed = String::from_utf8(pushed)?;
        ensure!(
            pushed.trim().ends_with(&img.manifest_digest),
            "crane pushed the layout as {pushed:?}, the index names {}",
            img.manifest_digest
        );
        eprintln!("crane: loaded the tarball (config identical) and the OCI layout ({})", pushed.trim());
        Ok(())
    })();
    let _ = registry.kill();
    let _ = registry.wait();
    result
}

/// An OCI image layout archive, its blobs checked against their digests and sizes.
struct OciArchive {
    files: BTreeMap<String, Vec<u8>>,
    index_annotations: Value,
    manifest_digest: String,
    config: Value,
    config_bytes: Vec<u8>,
    layer_digests: Vec<String>,
    /// Uncompressed layers, in order.
    layers: Vec<Vec<u8>>,
}

impl OciArchive {
    fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut files = BTreeMap::new();
        for e in read_tar(&bytes).with_context(|| format!("{}: not a tar", path.display()))? {
            if e.meta.kind == Kind::File {
                files.insert(e.path, e.data);
            }
        }
        let json = |name: &str| -> Result<Value> {
            let data = files.get(name).ok_or_else(|| anyhow!("{}: no {name}", path.display()))?;
            serde_json::from_slice(data).with_context(|| format!("{}: {name}", path.display()))
        };
        ensure!(json("oci-layout")?["imageLayoutVersion"] == "1.0.0", "{}: oci-layout", path.display());
        for (name, data) in &files {
            if let Some(hex) = name.strip_prefix("blobs/sha256/") {
                ensure!(
                    dco_tests::hex(&Sha256::digest(data)) == hex,
                    "{}: blob {name} does not match its digest",
                    path.display()
                );
            }
        }
        let blob = |desc: &Value, media_type: &str| -> Result<Vec<u8>> {
            ensure!(desc["mediaType"] == media_type, "{}: {desc} is not a {media_type}", path.display());
            let digest = desc["digest"].as_str().unwrap_or_default();
            let data = files
                .get(&format!("blobs/{}", digest.replacen(':', "/", 1)))
                .ok_or_else(|| anyhow!("{}: blob {digest} is missing", path.display()))?;
            ensure!(
                desc["size"].as_u64() == Some(data.len() as u64),
                "{}: {desc}: size {} in the archive",
                path.display(),
                data.len()
            );
            Ok(data.clone())
        };
        let index = json("index.json")?;
        let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
        ensure!(
            manifests.len() == 1,
            "{}: index.json holds {} manifests, not 1",
            path.display(),
            manifests.len()
        );
        let desc = &manifests[0];
        let manifest: Value = serde_json::from_slice(&blob(desc, OCI_MANIFEST)?)?;
        let config_bytes = blob(&manifest["config"], OCI_CONFIG)?;
        let config: Value = serde_json::from_slice(&config_bytes)?;
        let diff_ids = config["rootfs"]["diff_ids"].as_array().cloned().unwrap_or_default();
        let layer_descs = manifest["layers"].as_array().cloned().unwrap_or_default();
        ensure!(
            !layer_descs.is_empty() && layer_descs.len() == diff_ids.len(),
            "{}: {} layers, {} diff_ids",
            path.display(),
            layer_descs.len(),
            diff_ids.len()
        );
        let mut layers = Vec::new();
        let mut layer_digests = Vec::new();
        for (d, diff_id) in layer_descs.iter().zip(&diff_ids) {
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(&blob(d, OCI_LAYER_GZIP)?[..])
                .read_to_end(&mut tar)
                .with_context(|| format!("{}: layer {} is not gzip", path.display(), d["digest"]))?;
            let got = format!("sha256:{}", dco_tests::hex(&Sha256::digest(&tar)));
            ensure!(
                diff_id == &got,
                "{}: layer {} uncompressed is {got}, diff_id {diff_id}",
                path.display(),
                d["digest"]
            );
            layers.push(tar);
            layer_digests.push(d["digest"].as_str().unwrap_or_default().to_string());
        }
        // the Docker-style manifest.json names the same blobs
        let compat = json("manifest.json")?;
        let blob_path =
            |d: &Value| format!("blobs/{}", d["digest"].as_str().unwrap_or_default().replacen(':', "/", 1));
        ensure!(
            compat[0]["Config"] == blob_path(&manifest["config"])
                && compat[0]["Layers"] == Value::from(layer_descs.iter().map(blob_path).collect::<Vec<_>>())
                && compat.as_array().map(Vec::len) == Some(1),
            "{}: manifest.json {compat} does not name the OCI manifest's blobs",
            path.display()
        );
        Ok(OciArchive {
            index_annotations: desc["annotations"].clone(),
            manifest_digest: desc["digest"].as_str().unwrap_or_default().to_string(),
            files,
            config,
            config_bytes,
            layer_digests,
            layers,
        })
    }

    /// Applies the layers in order under `dir` (whiteouts delete) and returns every path's metadata.
    fn unpack(&self, dir: &Path) -> Result<BTreeMap<String, Meta>> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir)?;
        let mut fs = BTreeMap::new();
        for layer in &self.layers {
            for e in read_tar(layer)? {
                let p = e.path.trim_start_matches("./").trim_end_matches('/').to_string();
                if p.is_empty() {
                    continue;
                }
                ensure!(
                    !p.starts_with('/') && !p.split('/').any(|c| c == ".."),
                    "layer entry {p:?} escapes the root"
                );
                let (parent, name) = p.rsplit_once('/').unwrap_or(("", &p));
                if let Some(hidden) = name.strip_prefix(".wh.") {
                    let target =
                        if parent.is_empty() { hidden.to_string() } else { format!("{parent}/{hidden}") };
                    fs.retain(|k: &String, _| k != &target && !k.starts_with(&format!("{target}/")));
                    let _ = std::fs::remove_dir_all(dir.join(&target))
                        .or_else(|_| std::fs::remove_file(dir.join(&target)));
                    continue;
                }
                let at = dir.join(&p);
                match e.meta.kind {
                    Kind::Dir => std::fs::create_dir_all(&at)?,
                    Kind::File => {
                        std::fs::write(&at, &e.data)?;
                        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(e.meta.mode & 0o7777))?;
                    }
                    Kind::Symlink => std::os::unix::fs::symlink(&e.link, &at)?,
                    Kind::Hardlink => {
                        std::fs::hard_link(dir.join(e.link.trim_start_matches('/')), &at)?;
                    }
                    Kind::Other => {}
                }
                fs.insert(p, e.meta);
            }
        }
        // directory modes last: a 0700 directory stays enterable while it is filled
        for (p, m) in &fs {
            if m.kind == Kind::Dir {
                std::fs::set_permissions(dir.join(p), std::fs::Permissions::from_mode(m.mode & 0o7777))?;
            }
        }
        Ok(fs)
    }

    /// The archive's files as a directory (an OCI image layout).
    fn write_layout(&self, dir: &Path) -> Result<()> {
        for (name, data) in &self.files {
            let at = dir.join(name);
            std::fs::create_dir_all(at.parent().expect("a file in a directory"))?;
            std::fs::write(&at, data)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Hardlink,
    Other,
}

#[derive(Debug, Clone)]
struct Meta {
    kind: Kind,
    mode: u32,
    uid: u64,
    gid: u64,
}

struct TarEntry {
    path: String,
    link: String,
    meta: Meta,
    data: Vec<u8>,
}

/// A tar reader for what GNU tar and Go's archive/tar write: ustar headers (with the prefix
/// field), PAX extended headers (`path`, `linkpath`, `size`, `uid`, `gid`) and GNU long names.
fn read_tar(b: &[u8]) -> Result<Vec<TarEntry>> {
    fn field(h: &[u8], at: usize, len: usize) -> String {
        let f = &h[at..at + len];
        let end = f.iter().position(|&c| c == 0).unwrap_or(len);
        String::from_utf8_lossy(&f[..end]).into_owned()
    }
    fn number(h: &[u8], at: usize, len: usize) -> Result<u64> {
        let f = &h[at..at + len];
        if f[0] & 0x80 != 0 {
            // base-256, for values octal cannot hold
            return Ok(f[1..].iter().fold(u64::from(f[0] & 0x7f), |n, &c| (n << 8) | u64::from(c)));
        }
        let s = field(h, at, len);
        let s = s.trim_matches(|c: char| c == ' ' || c == '\0');
        if s.is_empty() {
            Ok(0)
        } else {
            u64::from_str_radix(s, 8).with_context(|| format!("tar header number {s:?}"))
        }
    }
    let mut out = Vec::new();
    let mut pos = 0;
    let mut pax: BTreeMap<String, String> = BTreeMap::new();
    let mut long_name: Option<String> = None;
    let mut long_link: Option<String> = None;
    while pos + 512 <= b.len() {
        let h = &b[pos..pos + 512];
        if h.iter().all(|&c| c == 0) {
            break;
        }
        let stored: u64 =
            h.iter().enumerate().map(|(i, &c)| if (148..156).contains(&i) { 32 } else { u64::from(c) }).sum();
        ensure!(number(h, 148, 8)? == stored, "tar header at {pos}: bad checksum");
        let flag = h[156];
        let mut size = number(h, 124, 12)?;
        if let Some(s) = pax.get("size") {
            size = s.parse()?;
        }
        let start = pos + 512;
        let end = start + size as usize;
        ensure!(end <= b.len(), "tar entry at {pos} runs past the end");
        let data = &b[start..end];
        pos = start + (size as usize).div_ceil(512) * 512;
        match flag {
            b'x' => {
                // records "<len> <key>=<value>\n"
                let mut rest = data;
                while !rest.is_empty() {
                    let sp = rest.iter().position(|&c| c == b' ').ok_or_else(|| anyhow!("bad pax record"))?;
                    let len: usize = std::str::from_utf8(&rest[..sp])?.parse()?;
                    let rec = std::str::from_utf8(&rest[sp + 1..len - 1])?;
                    if let Some((k, v)) = rec.split_once('=') {
                        pax.insert(k.to_string(), v.to_string());
                    }
                    rest = &rest[len..];
                }
                continue;
            }
            b'g' => continue,
            b'L' => {
                long_name = Some(String::from_utf8_lossy(data).trim_end_matches('\0').to_string());
                continue;
            }
            b'K' => {
                long_link = Some(String::from_utf8_lossy(data).trim_end_matches('\0').to_string());
                continue;
            }
            _ => {}
        }
        let mut path = field(h, 0, 100);
        if &h[257..262] == b"ustar" {
            let prefix = field(h, 345, 155);
            if !prefix.is_empty() {
                path = format!("{prefix}/{path}");
            }
        }
        let path = pax.remove("path").or(long_name.take()).unwrap_or(path);
        let link = pax.remove("linkpath").or(long_link.take()).unwrap_or_else(|| field(h, 157, 100));
        let uid = match pax.remove("uid") {
            Some(u) => u.parse()?,
            None => number(h, 108, 8)?,
        };
        let gid = match pax.remove("gid") {
            Some(g) => g.parse()?,
            None => number(h, 116, 8)?,
        };
        pax.clear();
        let kind = match flag {
            b'0' | 0 | b'7' => Kind::File,
            b'5' => Kind::Dir,
            b'2' => Kind::Symlink,
            b'1' => Kind::Hardlink,
            _ => Kind::Other,
        };
        let kind = if kind == Kind::File && path.ends_with('/') { Kind::Dir } else { kind };
        let mode = number(h, 100, 8)? as u32;
        out.push(TarEntry { path, link, meta: Meta { kind, mode, uid, gid }, data: data.to_vec() });
    }
    Ok(out)
}
