//! Helpers shared by the integration tests (`tests/vulkan`, `tests/gpu`, `tests/demos`,
//! `tests/wgpu`): device acquisition that skips with a printed reason where the machine lacks
//! the device (and fails where REQUIRE_GPU / REQUIRE_VULKAN say it must have one), the
//! validation check, leak accounting and the lock that keeps leak counts exact; the shared-image
//! render pass ([`render`]), the particle frames' check ([`particles`]) and the Xvfb runner
//! ([`xvfb`]).

pub mod particles;
pub mod render;
pub mod xvfb;

use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cuvk::vulkan::{Validation, VulkanConfig, VulkanContext};
use cuvk::{Bridge, BridgeConfig};

fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// A Vulkan context under the validation layer, or `None` (printed) where there is no
/// Vulkan device. REQUIRE_VULKAN=1 or REQUIRE_GPU=1 turn "none" into a failure.
pub fn vulkan(test: &str) -> Option<Arc<VulkanContext>> {
    match VulkanContext::new(VulkanConfig {
        validation: Validation::Required,
        ..Default::default()
    }) {
        Ok(ctx) => Some(ctx),
        Err(e) if e.is_unavailable() && !required("REQUIRE_VULKAN") && !required("REQUIRE_GPU") => {
            eprintln!("SKIP {test}: no usable Vulkan device: {e}");
            None
        }
        Err(e) => panic!("{test}: Vulkan device required but not usable: {e}"),
    }
}

/// A bridge (CUDA + Vulkan on the same GPU, validation layer on), or `None` (printed) where
/// there is no CUDA device. REQUIRE_GPU=1 turns "none" into a failure.
pub fn bridge(test: &str) -> Option<Bridge> {
    match Bridge::new(BridgeConfig {
        validation: Validation::Required,
        ..Default::default()
    }) {
        Ok(b) => Some(b),
        Err(e) if e.is_unavailable() && !required("REQUIRE_GPU") => {
            eprintln!("SKIP {test}: no CUDA + Vulkan GPU: {e}");
            None
        }
        Err(e) => panic!("{test}: GPU required but not usable: {e}"),
    }
}

/// The CUDA context of a second GPU beside `bridge`'s, or `None` (printed) where the machine
/// has one GPU. REQUIRE_GPUS=N (N >= 2) turns "none" into a failure.
pub fn peer_gpu(test: &str, bridge: &Bridge) -> Option<Arc<cuvk::cudarc::driver::CudaContext>> {
    let wanted: usize = std::env::var("REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let count = cuvk::cuda::devices().map(|d| d.len()).unwrap_or(0);
    if count < 2 {
        assert!(
            wanted < 2,
            "{test}: REQUIRE_GPUS={wanted} but this machine has {count} CUDA GPU(s)"
        );
        eprintln!("SKIP {test}: needs 2 CUDA GPUs, this machine has {count}");
        return None;
    }
    let other = usize::from(bridge.cuda().ordinal() == 0);
    Some(cuvk::cuda::context(other).expect("second GPU's context"))
}

/// Copies a whole buffer to the host with a Vulkan copy and returns its u32 words.
pub fn read_via_vulkan(ctx: &Arc<VulkanContext>, buf: &dyn cuvk::vulkan::AsVkBuffer) -> Vec<u32> {
    let size = buf.vk_size();
    let mut host =
        cuvk::vulkan::HostBuffer::new(ctx, size, cuvk::ash::vk::BufferUsageFlags::empty())
            .expect("host buffer");
    ctx.copy_buffer(buf, 0, &mut host, 0, size)
        .expect("Vulkan copy");
    host.read().expect("read back")
}

/// Fails if the validation layer said anything.
pub fn assert_clean(ctx: &VulkanContext) {
    let msgs = ctx.validation_messages();
    assert!(ctx.validation_enabled(), "validation layer not active");
    assert!(msgs.is_empty(), "validation messages:\n{}", msgs.join("\n"));
}

static LOCK: RwLock<()> = RwLock::new(());

/// Runs a test alone in its binary (the harness runs tests on parallel threads): the tests that
/// count process-wide resources (descriptors, GPU memory), and those that want the device to
/// themselves, hold it. One binary holds the tests of a whole area, so every other test of a
/// binary that has such tests holds [`shared`]: nothing then runs beside them (on lavapipe even
/// creating exportable memory opens a descriptor, which another test's count would see).
pub fn serial() -> RwLockWriteGuard<'static, ()> {
    LOCK.write().unwrap_or_else(|p| p.into_inner())
}

/// Runs a test beside the other [`shared`] tests but never beside a [`serial`] one.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    LOCK.read().unwrap_or_else(|p| p.into_inner())
}

/// Drivers open device files lazily and tie some to live allocations (NVIDIA opened 9 on the
/// first allocation and closed 8 when the last one was freed): run one full export/copy
/// cycle and keep what it made alive across the test (hold the returned value), so a
/// descriptor baseline counts only what the code under test holds.
pub fn warm_up(ctx: &Arc<VulkanContext>) -> WarmUp {
    use cuvk::ash::vk;
    use cuvk::vulkan::{BoundBuffer, HostBuffer};
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let bound = BoundBuffer::new_exportable(ctx, 4096, usage, vk::MemoryPropertyFlags::empty())
        .expect("warm-up buffer");
    drop(bound.memory().export().expect("warm-up export"));
    let mut host = HostBuffer::new(ctx, 4096, vk::BufferUsageFlags::empty()).expect("warm-up host");
    ctx.copy_buffer(&bound, 0, &mut host, 0, 4096)
        .expect("warm-up copy");
    WarmUp(bound, host)
}

/// What [`warm_up`] keeps alive (held, never read).
#[allow(dead_code)]
pub struct WarmUp(cuvk::vulkan::BoundBuffer, cuvk::vulkan::HostBuffer);

/// Where each open descriptor points (printed when a leak check fails).
pub fn fd_links() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| format!("{:?}", std::fs::read_link(e.path()).unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Asserts the descriptor count is back to `before`, listing the open descriptors if not.
pub fn assert_fds(before: usize, what: &str) {
    let now = fds();
    assert_eq!(
        now,
        before,
        "{what}: descriptors {before} -> {now}; open now: {:?}",
        fd_links()
    );
}

/// All open file descriptors of this process. Stable on NVIDIA once the CUDA + Vulkan devices
/// are warm (10,000 bridge cycles: 59 -> 59), so the bridge's leak checks count everything.
pub fn fds() -> usize {
    fd_links().len()
}

/// Open file descriptors except the driver's device files and shader cache. Vulkan-only tests
/// use this: NVIDIA's Vulkan driver opens and closes `/dev/nvidia*` files as its internal pools
/// grow and shrink (seen: 35 -> 36 and 44 -> 35 across tests that freed everything they
/// made). Its exported memory descriptors also point to `/dev/nvidiactl`, so on NVIDIA the
/// export test checks exported descriptors by number ([`is_fd_open`]); on lavapipe
/// (CI) exports are memfds and this count sees them. Pipes are not counted either: the crate
/// never makes one, and a full `cargo test` run once saw one of the harness's pipes close
/// mid-test (9 -> 8, the missing entry a `pipe:`).
pub fn non_driver_fds() -> usize {
    fd_links()
        .iter()
        .filter(|l| {
            !(l.contains("/dev/nvidia")
                || l.contains("/dev/dri/")
                || l.contains("/nvidia/GLCache/")
                || l.contains("pipe:["))
        })
        .count()
}

/// This test binary run again as a child process for one test, `test` (a path such as
/// `"ipc::ipc_producer"`), alone and with its output shown, with `var=value` in its
/// environment (the child test does its part only where it finds it). The caller adds
/// arguments (`--ignored`) or redirections and spawns it.
pub fn child_test(test: &str, var: &str, value: &str) -> std::process::Command {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(var, value);
    cmd
}

/// This process's mapped (virtual) and resident memory in bytes, from `/proc/self/statm`
/// ((0, 0) where there is none): a leaked import shows in the first even where nothing touched
/// its pages.
pub fn memory_bytes() -> (u64, u64) {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let mut fields = statm
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0));
    let (size, resident) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
    (size * page, resident * page)
}

/// Asserts the non-driver descriptor count is back to `before`.
pub fn assert_non_driver_fds(before: usize, what: &str) {
    let now = non_driver_fds();
    assert_eq!(
        now,
        before,
        "{what}: descriptors {before} -> {now}; open now: {:?}",
        fd_links()
    );
}

/// Whether two half-open byte ranges share at least one byte.
pub fn overlaps(a: &std::ops::Range<u64>, b: &std::ops::Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Whether `raw` is an open descriptor of this process (`fcntl(F_GETFD)` succeeds). Always true
/// off Unix, where descriptors are not what exports hand out.
#[cfg(unix)]
pub fn is_fd_open(raw: std::os::fd::RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor flags; it is defined for any integer.
    unsafe { libc::fcntl(raw, libc::F_GETFD) != -1 }
}

/// Whether `raw` is an open descriptor of this process. Always true off Unix, where
/// descriptors are not what exports hand out.
#[cfg(not(unix))]
pub fn is_fd_open(_raw: i32) -> bool {
    true
}

/// RGBA pixels of a PNG and its size.
pub fn read_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(path).expect("open png"),
    ));
    let mut reader = dec.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png data");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// Asserts an error matches a pattern, printing it (the printed message is part of the test's
/// record of what users see).
#[macro_export]
macro_rules! assert_err {
    ($e:expr, $pat:pat) => {{
        match $e {
            Err(err) => {
                eprintln!("expected error: {err}");
                assert!(matches!(err, $pat), "wrong error: {err:?}");
                err
            }
            Ok(_) => panic!("expected an error matching {}", stringify!($pat)),
        }
    }};
}
