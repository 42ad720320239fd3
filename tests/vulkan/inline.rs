//! CUDA kernels in Vulkan queues where the device cannot run them (lavapipe in CI, other
//! vendors, older drivers): the capability check says `Unsupported` and why, and loading a
//! module is refused the same way before any driver call.

use cuvk_dev::assert_err;
use cuvk_dev::testing as common;

use cuvk::vulkan::{cuda_kernels_supported, CuModule};
use cuvk::{Error, ErrorKind, ExtensionState};

const PTX: &str = include_str!("../../shaders/ptx/inline.ptx");

#[test]
fn without_the_extension_the_reason_is_given() {
    let _shared = common::shared();
    let Some(ctx) = common::vulkan("without_the_extension_the_reason_is_given") else {
        return;
    };
    if ctx.info().capabilities.cuda_kernels {
        eprintln!(
            "SKIP: {} runs CUDA kernels in Vulkan queues (tests/gpu/inline.rs)",
            ctx.info().name
        );
        return;
    }
    let e = assert_err!(
        cuda_kernels_supported(&ctx),
        Error::MissingExtension {
            state: ExtensionState::NotSupported,
            ..
        }
    );
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.is_unavailable());
    assert!(e.to_string().contains("VK_NVX_binary_import"), "{e}");
    let e = assert_err!(
        CuModule::from_ptx(&ctx, PTX),
        Error::MissingExtension { .. }
    );
    assert!(e.to_string().contains("NVIDIA"), "{e}");
    common::assert_clean(&ctx);
}
