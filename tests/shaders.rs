//! The SPIR-V shipped in `shaders/` is what its GLSL source compiles to, and it validates.
//! Needs `glslangValidator` and `spirv-val` (Debian glslang-tools, spirv-tools; scripts/deps.sh
//! installs them): skipped with a printed reason without them, unless REQUIRE_VULKAN=1.

#[path = "support/repo.rs"]
mod repo;

use std::process::Command;

fn tool(name: &str) -> bool {
    Command::new(name).arg("--version").output().is_ok()
}

#[test]
fn shipped_spirv_matches_its_glsl_and_validates() {
    if !tool("glslangValidator") || !tool("spirv-val") {
        assert_ne!(
            std::env::var("REQUIRE_VULKAN").as_deref(),
            Ok("1"),
            "glslangValidator/spirv-val missing"
        );
        eprintln!("SKIP: glslangValidator or spirv-val not installed");
        return;
    }
    let dir = repo::file("shaders");
    let out = std::env::temp_dir().join(format!("cuvk-shader-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let src = entry.unwrap().path();
        // X.comp ships as X.spv; X.vert / X.frag as X.vert.spv / X.frag.spv.
        let shipped = match src.extension().and_then(|e| e.to_str()) {
            Some("comp") => src.with_extension("spv"),
            Some("vert" | "frag") => src.with_extension(format!(
                "{}.spv",
                src.extension().unwrap().to_str().unwrap()
            )),
            _ => continue,
        };
        let rebuilt = out.join(shipped.file_name().unwrap());
        let st = Command::new("glslangValidator")
            .args(["-V", "--target-env", "vulkan1.2", "-o"])
            .arg(&rebuilt)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success(), "{} does not compile", src.display());
        assert_eq!(
            std::fs::read(&rebuilt).unwrap(),
            std::fs::read(&shipped).unwrap_or_default(),
            "{} is stale: rebuild it with glslangValidator -V --target-env vulkan1.2 -o {} {}",
            shipped.display(),
            shipped.display(),
            src.display()
        );
        let st = Command::new("spirv-val")
            .args(["--target-env", "vulkan1.2"])
            .arg(&shipped)
            .status()
            .unwrap();
        assert!(st.success(), "{} fails spirv-val", shipped.display());
        checked += 1;
    }
    std::fs::remove_dir_all(&out).ok();
    assert!(checked > 0, "no shaders found in {}", dir.display());
    eprintln!("{checked} shaders rebuilt, identical, valid");
}
