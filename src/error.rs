//! The crate's one error type: each variant names the rule that failed, with its numbers.

use ash::vk;

use crate::layout::LayoutError;
use crate::Uuid;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `cuvk`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Vulkan loader library could not be loaded.
    #[error("Vulkan loader not available: {0}")]
    VulkanLoader(String),
    /// A Vulkan call returned an error code.
    #[error("{call} failed: {result}")]
    Vulkan {
        /// The Vulkan function.
        call: &'static str,
        /// What it returned.
        result: vk::Result,
    },
    /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) is not on this machine.
    #[error("CUDA driver library not found on this machine (libcuda.so / nvcuda.dll)")]
    CudaUnavailable,
    /// A CUDA driver call returned an error code.
    #[error("{call} failed: {source}")]
    Cuda {
        /// The CUDA driver function.
        call: &'static str,
        /// What it returned.
        source: cudarc::driver::DriverError,
    },
    /// NVRTC could not compile a kernel.
    #[error("NVRTC failed to compile {name}: {message}")]
    Nvrtc {
        /// Name of the program.
        name: String,
        /// Compiler log or error.
        message: String,
    },
    /// A range, alignment or granularity rule was broken (checked before the driver call).
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// No CUDA device has the requested UUID.
    #[error("no CUDA device has UUID {uuid}; CUDA devices: [{available}]")]
    NoCudaDevice {
        /// The UUID asked for.
        uuid: Uuid,
        /// The UUIDs that exist, comma-separated.
        available: String,
    },
    /// No Vulkan physical device matches the request (UUID or CUDA device).
    #[error("no Vulkan physical device {wanted}; Vulkan devices: [{available}]")]
    NoVulkanDevice {
        /// What was asked for.
        wanted: String,
        /// The devices that exist, with their UUIDs.
        available: String,
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
    },
    /// A Vulkan extension the operation needs is not supported or not enabled.
    #[error("Vulkan extension {extension} is {state}; it is needed for {needed_for}")]
    MissingExtension {
        /// Extension name.
        extension: String,
        /// "not supported by the device" or "not enabled on the device".
        state: &'static str,
        /// What needs it.
        needed_for: &'static str,
    },
    /// The Vulkan API version is too old.
    #[error("Vulkan API version {found} is below the required {required}")]
    ApiVersion {
        /// Version string found.
        found: String,
        /// Version string required.
        required: String,
    },
    /// The device or driver lacks a capability the operation needs.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The validation layer was required but is not installed.
    #[error(
        "Vulkan validation layer VK_LAYER_KHRONOS_validation was required but is not installed"
    )]
    ValidationLayerMissing,
    /// The object was not created exportable, so it cannot be shared.
    #[error("{what} was not created exportable (no {handle_type:?} in its external handle types)")]
    NotExportable {
        /// Which object.
        what: &'static str,
        /// The handle type that was needed.
        handle_type: vk::ExternalMemoryHandleTypeFlags,
    },
    /// No memory type fits the request.
    #[error(
        "no memory type with properties {required:?} in type bits {type_bits:#x}{}",
        if *.exportable { " that can be exported" } else { "" }
    )]
    NoMemoryType {
        /// `memoryTypeBits` that were allowed.
        type_bits: u32,
        /// Property flags that were required.
        required: vk::MemoryPropertyFlags,
        /// Whether the type also had to be exportable.
        exportable: bool,
    },
    /// No queue family of the device can do what is needed.
    #[error("no queue family with {0:?}")]
    NoQueueFamily(vk::QueueFlags),
    /// An OS handle (file descriptor) is not open, e.g. because it was already imported.
    #[error("handle {handle} is not an open file descriptor ({reason}); a descriptor passes to CUDA on a successful import and cannot be imported again")]
    HandleNotOpen {
        /// The raw descriptor.
        handle: i64,
        /// What the OS said.
        reason: String,
    },
    /// A buffer and memory, or two objects that must share a device, do not.
    #[error("{0}")]
    WrongDevice(&'static str),
    /// A dedicated allocation holds exactly one buffer.
    #[error("a dedicated allocation holds exactly one buffer (the one it was allocated for)")]
    DedicatedHoldsOneBuffer,
    /// A timeline signal value does not exceed the last value scheduled for that semaphore.
    #[error("timeline value {value} does not increase: {last} was already scheduled (values must strictly increase)")]
    TimelineNotIncreasing {
        /// The value asked for.
        value: u64,
        /// The highest value already scheduled.
        last: u64,
    },
    /// A host wait on the GPU timed out.
    #[error("timed out after {timeout_ns} ns waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The timeout that elapsed.
        timeout_ns: u64,
    },
    /// An argument broke a documented rule not covered by [`LayoutError`].
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An OS call failed.
    #[error("{call} failed: {source}")]
    Io {
        /// The OS call.
        call: &'static str,
        /// What it returned.
        source: std::io::Error,
    },
}

/// Attaches the Vulkan function's name to a `vk::Result`.
pub(crate) trait VkResultExt<T> {
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

impl Error {
    /// Whether this error means "this machine or device cannot do it" rather than a bug or bad
    /// input: tests use it to skip with a printed reason.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::CudaUnavailable
                | Error::VulkanLoader(_)
                | Error::Unsupported(_)
                | Error::NoVulkanDevice { .. }
                | Error::NoCudaDevice { .. }
                | Error::MissingExtension {
                    state: "not supported by the device",
                    ..
                }
        ) || matches!(
            self,
            Error::Cuda { source, .. }
                if source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE
        )
    }
}
