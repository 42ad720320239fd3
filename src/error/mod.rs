//! The crate's one error type: each variant names the rule that failed, with its numbers, and
//! [`Error::kind`] sorts it into what a caller (or the C ABI) can act on.

use ash::vk;
use cudarc::driver::sys::CUresult;

use crate::rules::image_format::ImageError;
use crate::rules::layout::LayoutError;
use crate::uuid::Uuid;

mod ipc;
pub(crate) mod numbers;
mod peer;
mod refusal;
mod rule;
pub(crate) mod table;
// Compiled without the feature too: its table's rules are `Rule`'s with every feature (the
// enum and the code matching it are the feature's only).
mod wgpu;

pub use ipc::IpcError;
pub use peer::PeerError;
pub use refusal::{
    Capability, DeviceObject, DeviceOwner, Exportable, FrameStep, InlineKernelsMissing,
    LaunchError, MemoryError, SyncError,
};
pub use rule::Rule;
#[cfg(feature = "wgpu")]
pub use wgpu::{NotTextureReason, WgpuError, WgpuObject};

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is: match on this, never on message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument broke a rule (range, alignment, size, value, state): fix the call.
    InvalidInput,
    /// The device, driver or platform cannot do this at all.
    Unsupported,
    /// The device could, but the extension or feature was not enabled on it.
    NotEnabled,
    /// A library or device is missing (no CUDA driver, no Vulkan loader, no matching GPU).
    NotFound,
    /// Out of device or host memory, or a request larger than the memory heap.
    OutOfMemory,
    /// Objects of different devices or contexts were mixed.
    WrongDevice,
    /// A driver call failed for another reason.
    Driver,
    /// A host wait timed out.
    Timeout,
    /// An OS call failed.
    Io,
}

/// Whether an extension is missing from the device or only from what was enabled on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtensionState {
    /// The physical device does not offer it.
    NotSupported,
    /// The physical device offers it, but the logical device was created without it.
    NotEnabled,
}

impl std::fmt::Display for ExtensionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExtensionState::NotSupported => "not supported by the device",
            ExtensionState::NotEnabled => "supported by the device but not enabled on it",
        })
    }
}

/// Which API an OS handle was being imported into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Importer {
    /// `cuImportExternalMemory` / `cuImportExternalSemaphore` / `cuMemImportFromShareableHandle`.
    Cuda,
    /// `vkAllocateMemory` with an import info, or `vkImportSemaphore*KHR`.
    Vulkan,
}

impl std::fmt::Display for Importer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Importer::Cuda => "CUDA",
            Importer::Vulkan => "Vulkan",
        })
    }
}

/// A Vulkan API version, shown as `major.minor.patch`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion(pub u32);

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}.{}",
            vk::api_version_major(self.0),
            vk::api_version_minor(self.0),
            vk::api_version_patch(self.0)
        )
    }
}

impl std::fmt::Debug for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiVersion({self})")
    }
}

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows error_rules, path "";
    /// Everything that can go wrong in `cuvk`.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The Vulkan loader library could not be loaded.
        #[error("Vulkan loader not available: {0}")]
        VulkanLoader(String) => _,
        /// A Vulkan call returned an error code.
        #[error("{call} failed: {result}")]
        Vulkan {
            /// The Vulkan function.
            call: &'static str,
            /// What it returned.
            result: vk::Result,
        } => _,
        /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) is not on this machine.
        #[error("CUDA driver library not found on this machine (libcuda.so / nvcuda.dll)")]
        CudaUnavailable => _,
        /// A CUDA driver call returned an error code.
        #[error("{call} failed: {source}")]
        Cuda {
            /// The CUDA driver function.
            call: &'static str,
            /// What it returned.
            source: cudarc::driver::DriverError,
        } => _,
        /// NVRTC could not compile a kernel.
        #[error("NVRTC failed to compile {name}: {message}")]
        Nvrtc {
            /// Name of the program.
            name: String,
            /// Compiler log or error.
            message: String,
        } => _,
        /// A range, alignment or granularity rule was broken (checked before the driver call).
        #[error(transparent)]
        Layout(#[from] LayoutError) => ..,
        /// An image rule was broken: an unsupported format or shape, a level or layer out of
        /// range, a missing usage (checked before any driver call).
        #[error(transparent)]
        Image(#[from] ImageError) => ..,
        /// PTX text could not be read, or has no such kernel.
        #[error(transparent)]
        Ptx(#[from] crate::rules::ptx::PtxError) => ..,
        /// A memory, buffer or allocation rule was broken (checked before the driver call).
        #[error(transparent)]
        Memory(#[from] MemoryError) => ..,
        /// A semaphore, timeline or frame rule was broken.
        #[error(transparent)]
        Sync(#[from] SyncError) => ..,
        /// A kernel launch breaks its PTX signature or CUDA's limits.
        #[error(transparent)]
        Launch(#[from] LaunchError) => ..,
        /// The device, driver or platform lacks a capability the operation needs.
        #[error("unsupported: {0}")]
        Unsupported(#[from] Capability) => ..,
        /// Two objects that must share a device (or context) do not.
        #[error("the {object} belongs to another {owner}")]
        WrongDevice {
            /// The object that belongs elsewhere.
            object: DeviceObject,
            /// What it should have belonged to.
            owner: DeviceOwner,
        } => {
            /// Objects of different devices (or contexts) were mixed.
            DeviceWrongDevice = 0x0901
        },
        /// A driver call succeeded but returned no handle.
        #[error("{call} succeeded but returned no handle")]
        NoHandleReturned {
            /// The driver function.
            call: &'static str,
        } => _,
        /// No CUDA device has the requested UUID.
        #[error("no CUDA device has UUID {uuid}; CUDA devices: [{available}]")]
        NoCudaDevice {
            /// The UUID asked for.
            uuid: Uuid,
            /// The UUIDs that exist, comma-separated.
            available: String,
        } => {
            /// No CUDA device has the UUID.
            DeviceNoCudaDevice = 0x0902
        },
        /// No Vulkan physical device matches the request (UUID or CUDA device).
        #[error("no Vulkan physical device {wanted}; Vulkan devices: [{available}]")]
        NoVulkanDevice {
            /// What was asked for.
            wanted: String,
            /// The devices that exist, with their UUIDs.
            available: String,
        } => {
            /// No Vulkan physical device matches.
            DeviceNoVulkanDevice = 0x0903
        },
        /// The CUDA device and the Vulkan device are different GPUs.
        #[error(
            "Vulkan device UUID {vulkan} differs from CUDA device UUID {cuda}: they are different GPUs"
        )]
        DeviceMismatch {
            /// The Vulkan `deviceUUID`.
            vulkan: Uuid,
            /// The CUDA `cuDeviceGetUuid`.
            cuda: Uuid,
        } => {
            /// The CUDA and Vulkan devices are different GPUs.
            DeviceMismatch = 0x0904
        },
        /// A Vulkan extension the operation needs is not supported or not enabled.
        #[error("Vulkan extension {extension} is {state}; it is needed for {needed_for}")]
        MissingExtension {
            /// Extension name.
            extension: String,
            /// Missing from the device, or only from the enabled list.
            state: ExtensionState,
            /// What needs it.
            needed_for: &'static str,
        } => {
            /// A device extension that is not supported, or that the engine did not enable.
            DeviceMissingExtension = 0x0905
        },
        /// A Vulkan device feature the operation needs was not enabled.
        #[error(
            "Vulkan feature {feature} is not enabled on the device; it is needed for {needed_for}"
        )]
        FeatureNotEnabled {
            /// The feature's name in the Vulkan spec (e.g. `timelineSemaphore`).
            feature: &'static str,
            /// What needs it.
            needed_for: &'static str,
        } => {
            /// A device feature the engine did not enable.
            DeviceFeatureNotEnabled = 0x0906
        },
        /// A Vulkan entry point the crate calls did not resolve on the given instance or device.
        #[error(
            "Vulkan function {function} does not resolve on this {level}: it was created without \
             {provided_by}, which provides it"
        )]
        MissingFunction {
            /// The function name.
            function: String,
            /// "instance" or "device".
            level: &'static str,
            /// The Vulkan version or extension that provides it.
            provided_by: String,
        } => {
            /// A Vulkan entry point that does not resolve on the engine's instance or device.
            DeviceMissingFunction = 0x0907
        },
        /// The Vulkan API version is too old.
        #[error("Vulkan {what} API version {found} is below the required {required}")]
        ApiVersion {
            /// Which version ("loader", "instance", "physical device").
            what: &'static str,
            /// The version found.
            found: ApiVersion,
            /// The version required.
            required: ApiVersion,
        } => {
            /// A Vulkan API version below the one required.
            DeviceApiVersion = 0x0908
        },
        /// The validation layer was required but is not installed.
        #[error(
            "Vulkan validation layer VK_LAYER_KHRONOS_validation was required but is not installed"
        )]
        ValidationLayerMissing => {
            /// The validation layer was required but is not installed.
            DeviceValidationLayerMissing = 0x0909
        },
        /// No queue family of the device can do what is needed.
        #[error("no queue family with {0:?}")]
        NoQueueFamily(vk::QueueFlags) => {
            /// No queue family can do what is needed.
            DeviceNoQueueFamily = 0x090A
        },
        /// An OS handle (file descriptor) is not open, e.g. because it was already imported.
        #[error(
            "handle {handle} given to a {importer} import is not an open file descriptor ({reason}); \
             a descriptor passes to its importer on a successful import and cannot be imported again"
        )]
        HandleNotOpen {
            /// The raw descriptor.
            handle: i64,
            /// What the OS said.
            reason: String,
            /// The API it was being imported into.
            importer: Importer,
        } => {
            /// An OS handle (file descriptor) that is not open, e.g. already imported.
            OsHandleNotOpen = 0x0A01
        },
        /// Image creation flags with bits that name no flag. Like the refusals below, a raw
        /// argument only a foreign-language front end (the C ABI) can pass: cuvk's Rust types
        /// rule it out.
        #[error(
            "image flags {flags:#x} have unknown bits {:#x}: the known flags are {known:#x}",
            .flags & !.known
        )]
        UnknownImageFlags {
            /// The flags given.
            flags: u32,
            /// Every flag bit there is.
            known: u32,
        } => {
            /// Image creation flags with bits that name no flag.
            ArgumentUnknownImageFlags = 0x0E01
        },
        /// A texture address mode that names no mode (`CUaddress_mode`: 0 to 3).
        #[error("texture address mode {mode} is not 0 (wrap), 1 (clamp), 2 (mirror) or 3 (border)")]
        UnknownAddressMode {
            /// The mode given.
            mode: u32,
        } => {
            /// A texture address mode that names no mode.
            ArgumentUnknownAddressMode = 0x0E02
        },
        /// A texture filter mode that names no mode (`CUfilter_mode`: 0 or 1).
        #[error("texture filter mode {mode} is not 0 (point) or 1 (linear)")]
        UnknownFilterMode {
            /// The mode given.
            mode: u32,
        } => {
            /// A texture filter mode that names no mode.
            ArgumentUnknownFilterMode = 0x0E03
        },
        /// Text that must be UTF-8 and is not.
        #[error("the {what} is not UTF-8: byte {byte:#04x} at {position} starts no valid character")]
        NotUtf8 {
            /// What text.
            what: &'static str,
            /// Where the first invalid byte is.
            position: usize,
            /// That byte.
            byte: u8,
        } => {
            /// Text that must be UTF-8 and is not.
            ArgumentNotUtf8 = 0x0E04
        },
        /// A buffer without a CUDA side (made on a Vulkan-only bridge) where a buffer shared with
        /// CUDA is needed.
        #[error(
            "buffer {buffer:#x} has no CUDA side (it was made on a Vulkan-only bridge): \
             {needed_for} takes buffers shared with CUDA only"
        )]
        BufferNotShared {
            /// The buffer's handle.
            buffer: u64,
            /// What needs a shared buffer.
            needed_for: &'static str,
        } => {
            /// A buffer without a CUDA side where a buffer shared with CUDA is needed.
            ArgumentBufferNotShared = 0x0E05
        },
        /// A yes/no argument that is neither 0 nor 1.
        #[error("the {what} must be 0 or 1, not {value}")]
        NotBoolean {
            /// What argument.
            what: &'static str,
            /// The value given.
            value: u32,
        } => {
            /// A yes/no argument that is neither 0 nor 1.
            ArgumentNotBoolean = 0x0E06
        },
        /// A host wait on the GPU timed out.
        #[error("timed out after {timeout_ns} ns waiting for {what}")]
        Timeout {
            /// What was waited for.
            what: &'static str,
            /// The timeout that elapsed.
            timeout_ns: u64,
        } => _,
        /// The host could not provide memory (an allocation returned null).
        #[error("out of host memory: {what} of {bytes} bytes failed")]
        HostOutOfMemory {
            /// What was being allocated.
            what: &'static str,
            /// How many bytes.
            bytes: u64,
        } => _,
        /// The Vulkan context has no queue of its own: it wraps a device whose queue another
        /// library owns (wgpu's), and cuvk never submits there behind that library's back.
        #[error(
            "this Vulkan context has no queue of its own (it wraps a device whose queue another \
             library submits to, e.g. wgpu); {needed_for} needs one: submit through that library"
        )]
        NoQueue {
            /// What needed a queue.
            needed_for: &'static str,
        } => {
            /// The Vulkan context has no queue of its own.
            DeviceNoQueue = 0x090B
        },
        #![cfg(feature = "wgpu")]
        /// A wgpu rule was broken, or a wgpu call failed.
        #[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
        #[error(transparent)]
        Wgpu(#[from] WgpuError) => ..,
        /// A message between processes refused, or the connection failed (`cuvk::ipc`).
        #[error(transparent)]
        Ipc(#[from] IpcError) => ..,
        /// A rule of several GPUs broken (peer access, NCCL collectives on shared memory).
        #[error(transparent)]
        Peer(#[from] PeerError) => ..,
        /// An NCCL call failed (feature `nccl`).
        #[error("{call} failed: NCCL error {code} ({message})")]
        Nccl {
            /// The NCCL function.
            call: &'static str,
            /// Its `ncclResult_t`.
            code: i32,
            /// `ncclGetErrorString` and `ncclGetLastError`.
            message: String,
        } => _,
        /// An OS call failed.
        #[error("{call} failed: {source}")]
        Io {
            /// The OS call.
            call: &'static str,
            /// What it returned.
            source: std::io::Error,
        } => _,
    }
}

impl Error {
    /// A failed Vulkan call.
    pub(crate) fn vulkan(call: &'static str, result: vk::Result) -> Self {
        Error::Vulkan { call, result }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::VulkanLoader(_)
            | Error::CudaUnavailable
            | Error::NoCudaDevice { .. }
            | Error::NoVulkanDevice { .. }
            | Error::ValidationLayerMissing => K::NotFound,
            Error::Vulkan { result, .. } => match *result {
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                    K::OutOfMemory
                }
                vk::Result::ERROR_EXTENSION_NOT_PRESENT
                | vk::Result::ERROR_FEATURE_NOT_PRESENT
                | vk::Result::ERROR_FORMAT_NOT_SUPPORTED
                | vk::Result::ERROR_INCOMPATIBLE_DRIVER => K::Unsupported,
                _ => K::Driver,
            },
            Error::Cuda { source, .. } => match source.0 {
                CUresult::CUDA_ERROR_OUT_OF_MEMORY => K::OutOfMemory,
                CUresult::CUDA_ERROR_NO_DEVICE | CUresult::CUDA_ERROR_NOT_FOUND => K::NotFound,
                CUresult::CUDA_ERROR_NOT_SUPPORTED => K::Unsupported,
                _ => K::Driver,
            },
            Error::MissingExtension { state, .. } => match state {
                ExtensionState::NotSupported => K::Unsupported,
                ExtensionState::NotEnabled => K::NotEnabled,
            },
            Error::FeatureNotEnabled { .. } | Error::MissingFunction { .. } => K::NotEnabled,
            Error::Unsupported(Capability::InlineKernels {
                reason:
                    InlineKernelsMissing::BinaryImportNotEnabled
                    | InlineKernelsMissing::ImageViewHandleNotEnabled
                    | InlineKernelsMissing::BufferDeviceAddress,
            }) => K::NotEnabled,
            Error::ApiVersion { .. }
            | Error::Unsupported(_)
            | Error::NoQueueFamily(_)
            | Error::NoQueue { .. }
            | Error::Memory(MemoryError::NoMemoryType { .. }) => K::Unsupported,
            Error::Memory(MemoryError::ExceedsHeap { .. })
            | Error::Memory(MemoryError::BufferExceedsHeaps { .. })
            | Error::HostOutOfMemory { .. } => K::OutOfMemory,
            Error::DeviceMismatch { .. } | Error::WrongDevice { .. } => K::WrongDevice,
            Error::Timeout { .. } => K::Timeout,
            Error::NoHandleReturned { .. } => K::Driver,
            #[cfg(feature = "wgpu")]
            Error::Wgpu(e) => e.kind(),
            Error::Io { .. } => K::Io,
            Error::Peer(e) => e.kind(),
            Error::Ipc(e) => e.kind(),
            Error::Nccl { .. } => K::Driver,
            Error::Image(e) if e.is_unsupported() => K::Unsupported,
            Error::Nvrtc { .. }
            | Error::Image(_)
            | Error::Layout(_)
            | Error::Ptx(_)
            | Error::Memory(_)
            | Error::Sync(_)
            | Error::Launch(_)
            | Error::HandleNotOpen { .. }
            | Error::UnknownImageFlags { .. }
            | Error::UnknownAddressMode { .. }
            | Error::UnknownFilterMode { .. }
            | Error::NotUtf8 { .. }
            | Error::BufferNotShared { .. }
            | Error::NotBoolean { .. } => K::InvalidInput,
        }
    }

    /// The Vulkan valid-usage ID of the broken rule, where the Vulkan spec states one.
    pub fn vuid(&self) -> Option<&'static str> {
        match self {
            Error::Memory(e) => e.vuid(),
            Error::Image(e) => e.vuid(),
            Error::Sync(SyncError::SignalPending { .. }) => {
                Some("VUID-VkSemaphoreSignalInfo-value-03259")
            }
            Error::Sync(SyncError::EmptyWaitStage) => {
                Some("VUID-VkSubmitInfo-pWaitDstStageMask-03937")
            }
            _ => None,
        }
    }

    /// Whether this error means "this machine or device cannot do it" (nothing to fix in the
    /// call): tests use it to skip with a printed reason.
    pub fn is_unavailable(&self) -> bool {
        matches!(self.kind(), ErrorKind::NotFound | ErrorKind::Unsupported)
    }
}

/// Turns an `ash` result into cuvk's [`Error::Vulkan`], naming the Vulkan function: for engine
/// code that calls Vulkan itself beside cuvk (`d.create_fence(..).vk("vkCreateFence")?`).
pub trait VkResultExt<T> {
    /// `Ok` unchanged; an error as [`Error::Vulkan`] with `call`.
    fn vk(self, call: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for std::result::Result<T, vk::Result> {
    fn vk(self, call: &'static str) -> Result<T> {
        self.map_err(|result| Error::Vulkan { call, result })
    }
}

/// Attaches the CUDA function's name to a driver error.
pub(crate) trait CudaResultExt<T> {
    fn cuda(self, call: &'static str) -> Result<T>;
}

impl<T> CudaResultExt<T> for std::result::Result<T, cudarc::driver::DriverError> {
    fn cuda(self, call: &'static str) -> Result<T> {
        self.map_err(|source| Error::Cuda { call, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_sort_errors_for_callers() {
        let not_enabled = Error::MissingExtension {
            extension: "VK_KHR_external_semaphore_fd".into(),
            state: ExtensionState::NotEnabled,
            needed_for: "x",
        };
        assert_eq!(not_enabled.kind(), ErrorKind::NotEnabled);
        assert!(not_enabled.to_string().contains("not enabled"));
        assert!(!not_enabled.is_unavailable());
        let unsupported = Error::MissingExtension {
            extension: "VK_KHR_external_semaphore_fd".into(),
            state: ExtensionState::NotSupported,
            needed_for: "x",
        };
        assert_eq!(unsupported.kind(), ErrorKind::Unsupported);
        assert!(unsupported.is_unavailable());
        let oom = Error::vulkan("vkAllocateMemory", vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        assert_eq!(oom.kind(), ErrorKind::OutOfMemory);
        let heap = Error::from(MemoryError::ExceedsHeap {
            size: 10,
            memory_type: 0,
            heap_index: 0,
            heap_size: 5,
        });
        assert_eq!(heap.kind(), ErrorKind::OutOfMemory);
        assert!(heap.to_string().contains("10 bytes") && heap.to_string().contains("5 bytes"));
        let v = Error::ApiVersion {
            what: "instance",
            found: ApiVersion(vk::API_VERSION_1_0),
            required: ApiVersion(vk::API_VERSION_1_2),
        };
        assert_eq!(
            v.to_string(),
            "Vulkan instance API version 1.0.0 is below the required 1.2.0"
        );
        let h = Error::HandleNotOpen {
            handle: 7,
            reason: "bad fd".into(),
            importer: Importer::Vulkan,
        };
        assert!(h.to_string().contains("Vulkan import") && !h.to_string().contains("CUDA"));
        let format = Error::from(ImageError::UnsupportedFormat {
            format: vk::Format::D32_SFLOAT,
            reason: crate::rules::image_format::FormatRefusal::DepthStencil,
        });
        assert_eq!(format.kind(), ErrorKind::Unsupported);
        assert!(format.to_string().contains("D32_SFLOAT"), "{format}");
        let level = Error::from(ImageError::LevelOutOfRange {
            level: 3,
            levels: 2,
        });
        assert_eq!(level.kind(), ErrorKind::InvalidInput);
    }
}
