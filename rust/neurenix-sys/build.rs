//! Compiles the C++ core (`cpp/src/**/*.cc`) and the cxx glue into one static
//! library. Every source and header is listed for rebuilds.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, ext: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, ext, out);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ext.contains(&e))
        {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let cpp = manifest
        .join("../../cpp")
        .canonicalize()
        .expect("the cpp/ directory next to rust/");
    let mut sources = Vec::new();
    collect(&cpp.join("src"), &["cc"], &mut sources);
    let mut headers = Vec::new();
    collect(&cpp.join("include"), &["h"], &mut headers);

    let mut build = cxx_build::bridge("src/bridge.rs");
    build
        .files(&sources)
        .file("cxx/bridge.cc")
        .include(cpp.join("include"))
        .include(&manifest)
        .std("c++17")
        .flag_if_supported("-fwrapv")
        .flag_if_supported("-Wno-unused-parameter")
        // Copies and fills of a size known only at run time call the C
        // library (whose small-size paths are vector moves) instead of being
        // inlined as `rep movsq` / `rep stosq`, slow to start on short
        // lengths (docs/benchmarks.md: maps and normalisations 0.80-0.90).
        .flag_if_supported("-mstringop-strategy=libcall")
        .opt_level(3);
    // The host builds for itself (pip install from source), so it may use its
    // own vector units. NEURENIX_NATIVE_SIMD=0 turns this off.
    let native = std::env::var("NEURENIX_NATIVE_SIMD")
        .map(|v| v != "0")
        .unwrap_or(true);
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    #[cfg(target_arch = "x86_64")]
    if native
        && target == host
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
        build.flag("-mavx2").flag("-mfma").flag("-mf16c");
        if std::is_x86_feature_detected!("avx512f") {
            build.flag("-mavx512f");
            // 16-bit masked loads and stores (float16 operands in the
            // kernels' and element-wise vertices' registers).
            if std::is_x86_feature_detected!("avx512bw") {
                build.flag("-mavx512bw");
            }
            // Half additions in half lanes (the half-partials kernels).
            if std::is_x86_feature_detected!("avx512fp16") {
                build.flag_if_supported("-mavx512fp16");
            }
        }
    }
    let _ = (native, &target, &host);
    build.compile("neurenix_cpp");

    println!("cargo:rerun-if-changed=src/bridge.rs");
    println!("cargo:rerun-if-changed=cxx/bridge.h");
    println!("cargo:rerun-if-changed=cxx/bridge.cc");
    println!("cargo:rerun-if-changed={}", cpp.join("src").display());
    println!("cargo:rerun-if-changed={}", cpp.join("include").display());
    for f in sources.iter().chain(&headers) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!("cargo:rerun-if-env-changed=NEURENIX_NATIVE_SIMD");
}
