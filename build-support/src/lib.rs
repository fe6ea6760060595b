//! Build-script support for the packages that link libtorch (through tch).

/// Embeds an rpath to libtorch in the calling package's binaries and tests, so they find
/// `libtorch*.so` without LD_LIBRARY_PATH. The path comes from LIBTORCH (set by
/// `.cargo/config.toml` to the `.plexus/libtorch` link that `scripts/setup-torch.sh` makes),
/// resolved to the real directory so the binaries do not depend on the clone they were built in.
/// Call it from `build.rs`: `rustc-link-arg` reaches only the calling package's own targets.
pub fn libtorch_rpath() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(dir) = std::env::var("LIBTORCH") {
        let lib = std::path::Path::new(&dir).join("lib");
        let lib = lib.canonicalize().unwrap_or(lib);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
