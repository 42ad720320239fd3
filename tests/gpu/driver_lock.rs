//! NVIDIA's driver 580 deadlocks when `vkCreateDevice` of a device with the NVX extensions runs
//! on one thread while `vkCreateCuModuleNVX` runs on another (a lock-order inversion between
//! its Vulkan and CUDA parts, seen in `cuda-gdb` backtraces of a hung `test-wgpu`). cuvk takes
//! one process-wide lock around both (`cuvk::vulkan::driver_lock`): threads that open devices
//! and load kernels at once, round after round, must all finish. A negative control makes the
//! same calls raw, without the lock, in a child process (it may hang: it is killed after a
//! minute), and reports what happened.

use cuvk_dev::testing as common;

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cuvk::ash::vk;
use cuvk::vulkan::{CuModule, VulkanConfig, VulkanContext};

/// Threads that open and close devices, and as many that load and unload modules.
const THREADS: usize = 3;
const ROUNDS: usize = 25;
/// Far more than the whole test takes (seconds): past it the process is declared hung.
const LIMIT: Duration = Duration::from_secs(240);

use crate::inline::inline_ptx as setup;

/// Aborts the process with a message if not disarmed within `limit`: a deadlocked test must
/// fail, not hang the suite.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn arm(test: &'static str, limit: Duration) -> Self {
        let disarmed = Arc::new(AtomicBool::new(false));
        let flag = disarmed.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < limit {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("FAIL {test}: still running after {limit:?}: deadlocked; aborting");
            std::process::abort();
        });
        Self(disarmed)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn devices_and_nvx_modules_made_on_many_threads_at_once_do_not_deadlock() {
    let _serial = common::serial();
    let test = "devices_and_nvx_modules_made_on_many_threads_at_once_do_not_deadlock";
    let Some((bridge, ptx)) = setup(test) else {
        return;
    };
    let _watchdog = Watchdog::arm(test, LIMIT);
    let start = Instant::now();
    let ctx = bridge.vulkan().clone();
    let ptx = Arc::new(ptx);
    let go = Arc::new(Barrier::new(2 * THREADS));
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        let start_devices = go.clone();
        threads.push(std::thread::spawn(move || {
            start_devices.wait();
            for _ in 0..ROUNDS {
                // A device with the NVX extensions (cuvk enables them where offered).
                let device = VulkanContext::new(VulkanConfig::default()).unwrap();
                assert!(device.info().capabilities.cuda_kernels);
                drop(device);
            }
        }));
        let (go, ctx, ptx) = (go.clone(), ctx.clone(), ptx.clone());
        threads.push(std::thread::spawn(move || {
            go.wait();
            for _ in 0..ROUNDS {
                let module = CuModule::from_ptx(&ctx, &ptx).unwrap();
                let stamp = module.function("stamp").unwrap();
                drop((stamp, module));
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    eprintln!(
        "{test}: {THREADS}+{THREADS} threads x {ROUNDS} rounds in {:?}",
        start.elapsed()
    );
}

/// The environment variable that makes [`raw_calls_child`] run.
const RAW_CHILD: &str = "CUVK_TEST_RAW_DRIVER_CALLS";

/// The negative control's child: the same calls made raw through ash, without cuvk's lock.
#[test]
#[ignore = "run as a child process by without_the_lock_raw_calls_are_reported"]
fn raw_calls_child() {
    if std::env::var_os(RAW_CHILD).is_none() {
        return;
    }
    let Some((bridge, ptx)) = setup("raw_calls_child") else {
        std::process::exit(3);
    };
    let ctx = bridge.vulkan().clone();
    let ptx = Arc::new(CString::new(ptx).unwrap());
    let go = Arc::new(Barrier::new(2 * THREADS));
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        let (start_devices, c) = (go.clone(), ctx.clone());
        threads.push(std::thread::spawn(move || {
            start_devices.wait();
            let names = [
                cuvk::ash::nvx::binary_import::NAME.as_ptr(),
                cuvk::ash::nvx::image_view_handle::NAME.as_ptr(),
            ];
            let priorities = [1.0f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(c.queue_family_index())
                .queue_priorities(&priorities)];
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .enabled_extension_names(&names);
            for _ in 0..ROUNDS {
                // SAFETY: the bridge's instance and physical device, which support both
                // extensions; the device is destroyed at once, unused.
                unsafe {
                    let d = c
                        .instance()
                        .create_device(c.physical_device(), &info, None)
                        .unwrap();
                    d.destroy_device(None);
                }
            }
        }));
        let (go, c, ptx) = (go.clone(), ctx.clone(), ptx.clone());
        threads.push(std::thread::spawn(move || {
            go.wait();
            let nvx = cuvk::ash::nvx::binary_import::Device::new(c.instance(), c.device());
            let bytes = ptx.as_bytes_with_nul();
            let info = vk::CuModuleCreateInfoNVX {
                data_size: bytes.len(),
                p_data: bytes.as_ptr().cast(),
                ..Default::default()
            };
            for _ in 0..ROUNDS {
                let mut module = vk::CuModuleNVX::null();
                // SAFETY: the bridge's device has the extension; the info points at live
                // PTX text; the module is destroyed at once, unused.
                unsafe {
                    (nvx.fp().create_cu_module_nvx)(
                        c.device().handle(),
                        &info,
                        std::ptr::null(),
                        &mut module,
                    )
                    .result()
                    .unwrap();
                    (nvx.fp().destroy_cu_module_nvx)(c.device().handle(), module, std::ptr::null());
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    println!("CHILD raw calls finished");
}

/// The negative control: reported, not asserted (a race need not lose every time).
#[test]
fn without_the_lock_raw_calls_are_reported() {
    let _serial = common::serial();
    let test = "without_the_lock_raw_calls_are_reported";
    if setup(test).is_none() {
        return;
    }
    let mut child = common::child_test("driver_lock::raw_calls_child", RAW_CHILD, "1")
        .arg("--ignored")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let limit = Duration::from_secs(60);
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            eprintln!(
                "NEGATIVE CONTROL {test}: raw calls without the lock finished ({status}) in {:?}",
                start.elapsed()
            );
            return;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            eprintln!(
                "NEGATIVE CONTROL {test}: raw calls without the lock HUNG (killed after {limit:?})"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
