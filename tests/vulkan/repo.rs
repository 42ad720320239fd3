//! Files of the repository (the header, the shader sources, ...), found at run time, not at the
//! path the test was compiled in: release test binaries are staged to another machine and run
//! there from a copy of the repository at a different path.

use std::path::PathBuf;

/// The repository root: `$CUVK_REPO_DIR` when set, else the current directory (cargo runs
/// tests from the package root; staged binaries are run from the repository root).
pub fn root() -> PathBuf {
    match std::env::var_os("CUVK_REPO_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::current_dir().expect("current directory"),
    }
}

/// `rel` (a path relative to the repository root) under [`root`]; panics with what it looked
/// for when it is not there, rather than letting a test pass or skip without the file.
pub fn file(rel: &str) -> PathBuf {
    let root = root();
    let path = root.join(rel);
    assert!(
        path.exists(),
        "{rel} not found under {}: run the tests from the repository root, or set CUVK_REPO_DIR \
         to the repository (current directory {:?}, CUVK_REPO_DIR {:?})",
        root.display(),
        std::env::current_dir().ok(),
        std::env::var_os("CUVK_REPO_DIR"),
    );
    path
}
