//! The SPIR-V shipped in `shaders/` is what its GLSL source compiles to, and it validates.
//! Needs `glslangValidator` and `spirv-val` (Debian glslang-tools, spirv-tools; scripts/deps.sh
//! installs them): skipped with a printed reason without them, unless REQUIRE_VULKAN=1.

use crate::repo;

use std::process::Command;

fn tool(name: &str) -> bool {
    Command::new(name).arg("--version").output().is_ok()
}

#[test]
fn shipped_spirv_matches_its_glsl_and_validates() {
    let _shared = cuvk_dev::testing::shared();
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

/// The fluid demo's Vulkan simulation (shaders/fluid_*.comp) must round as its CUDA kernels
/// do (shaders/fluid.cu, explicit `__fadd_rn`/`__fmul_rn`): every float add, subtract and
/// multiply in the shipped SPIR-V is decorated NoContraction (`precise`), so no driver fuses
/// them into an FMA. tests/demos/gpu_fluid.rs compares the two simulations on that basis.
#[test]
fn fluid_simulation_spirv_never_fuses_multiply_add() {
    let _shared = cuvk_dev::testing::shared();
    if !tool("spirv-dis") {
        assert_ne!(
            std::env::var("REQUIRE_VULKAN").as_deref(),
            Ok("1"),
            "spirv-dis missing"
        );
        eprintln!("SKIP: spirv-dis not installed");
        return;
    }
    let dir = repo::file("shaders");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !(name.starts_with("fluid_") && name.ends_with(".spv")) || name == "fluid_draw.spv" {
            continue;
        }
        let out = Command::new("spirv-dis")
            .args(["--raw-id", "--no-color"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "spirv-dis {name} failed");
        let text = String::from_utf8(out.stdout).unwrap();
        let exact: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("OpDecorate "))
            .filter_map(|l| l.strip_suffix(" NoContraction"))
            .collect();
        let mut arithmetic = 0;
        for line in text.lines() {
            let Some((id, op)) = line.trim().split_once(" = ") else {
                continue;
            };
            let op = op.split_whitespace().next().unwrap_or("");
            if ["OpFAdd", "OpFSub", "OpFMul", "OpVectorTimesScalar"].contains(&op) {
                arithmetic += 1;
                assert!(
                    exact.contains(id),
                    "{name}: {} may be fused (not NoContraction): mark it `precise`",
                    line.trim()
                );
            }
        }
        assert!(arithmetic > 0, "{name}: no arithmetic found");
        checked += 1;
    }
    assert_eq!(checked, 7, "expected the 7 fluid simulation passes");
}

/// `Params` has one layout in dev/src/sim/fluid.rs, shaders/fluid.cu and
/// shaders/fluid_common.glsl: the same fields in the same order with the same types (the
/// same bytes are a CUDA kernel argument and a std140 uniform block).
#[test]
fn fluid_params_have_one_layout() {
    let _shared = cuvk_dev::testing::shared();
    // The "type name" pairs between `open` and the next "}" of `text`, types normalised.
    fn fields(text: &str, open: &str) -> Vec<(String, String)> {
        let start = text.find(open).unwrap_or_else(|| panic!("no '{open}'")) + open.len();
        let body = &text[start..start + text[start..].find('}').unwrap()];
        body.lines()
            .map(|l| {
                l.split("//")
                    .next()
                    .unwrap()
                    .trim()
                    .trim_end_matches([';', ','])
            })
            .filter(|l| !l.is_empty() && !l.starts_with("///") && !l.starts_with('#'))
            .map(|l| {
                let (ty, name) = match l.strip_prefix("pub ") {
                    // Rust: `pub name: Type`
                    Some(rust) => {
                        let (n, t) = rust.split_once(':').unwrap();
                        (t.trim().to_string(), n.trim().to_string())
                    }
                    // C / GLSL: `type name`
                    None => {
                        let (t, n) = l.rsplit_once(' ').unwrap();
                        (t.trim().to_string(), n.trim().to_string())
                    }
                };
                let ty = match ty.as_str() {
                    "u32" | "unsigned int" | "uint" => "u32".to_string(),
                    "f32" | "float" => "f32".to_string(),
                    "Emitter" | "[Emitter; MAX_EMITTERS]" => "Emitter".to_string(),
                    other => other.to_string(),
                };
                let name = name.replace("[8]", "");
                (ty, name)
            })
            .collect()
    }
    let read = |rel: &str| std::fs::read_to_string(repo::file(rel)).unwrap();
    let rust = fields(&read("dev/src/sim/fluid.rs"), "pub struct Params {");
    let cuda = fields(&read("shaders/fluid.cu"), "struct Params {");
    let glsl = fields(&read("shaders/fluid_common.glsl"), "uniform ParamsBlock {");
    eprintln!("Params: {rust:?}");
    assert_eq!(rust.len(), 9, "{rust:?}");
    assert_eq!(rust, cuda, "fluid.rs and fluid.cu disagree");
    assert_eq!(rust, glsl, "fluid.rs and fluid_common.glsl disagree");
}
