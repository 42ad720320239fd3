//! A headless Bevy app for tests (no window, no log subscriber), driven update by update.

use std::sync::{Mutex, MutexGuard};

use bevy::app::PluginsState;
use bevy::log::LogPlugin;
use bevy::prelude::*;
use bevy::render::pipelined_rendering::PipelinedRenderingPlugin;
use bevy::render::RenderPlugin;
use bevy::window::ExitCondition;
use bevy::winit::WinitPlugin;
use bevy_cuvk::cuvk::ash::{self, vk};
use bevy_cuvk::CuvkPlugin;

/// One Bevy app at a time (they share the CPU device and the global task pools).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a Vulkan device is there; without one the test skips (or fails where
/// `REQUIRE_VULKAN=1`).
pub fn vulkan_present() -> bool {
    let count = (|| {
        // SAFETY: loading the system Vulkan loader runs its initialisers only.
        let entry = unsafe { ash::Entry::load() }.ok()?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let info = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: a valid create info; the instance is destroyed below.
        let instance = unsafe { entry.create_instance(&info, None) }.ok()?;
        // SAFETY: a live instance.
        let n = unsafe { instance.enumerate_physical_devices() }.map_or(0, |d| d.len());
        // SAFETY: nothing made from the instance is alive.
        unsafe { instance.destroy_instance(None) };
        Some(n)
    })()
    .unwrap_or(0);
    if count == 0 {
        assert_ne!(
            std::env::var("REQUIRE_VULKAN").as_deref(),
            Ok("1"),
            "no Vulkan device (lavapipe: Debian mesa-vulkan-drivers)"
        );
        eprintln!("SKIP: no Vulkan device");
        return false;
    }
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // SAFETY: set before any thread of the test reads the environment (Bevy not started).
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", "/tmp") };
    }
    true
}

/// Where the plugin goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Before RenderPlugin (right).
    Before,
    /// After all of DefaultPlugins (wrong: the device already exists).
    After,
}

/// DefaultPlugins without a window, winit, log subscriber or pipelined rendering, with
/// `cuvk` placed as `order` says.
pub fn headless_app(cuvk: CuvkPlugin, order: Order) -> App {
    let mut app = App::new();
    let plugins = DefaultPlugins
        .build()
        .set(WindowPlugin {
            primary_window: None,
            exit_condition: ExitCondition::DontExit,
            ..default()
        })
        .disable::<WinitPlugin>()
        .disable::<LogPlugin>()
        .disable::<PipelinedRenderingPlugin>();
    match order {
        Order::Before => {
            app.add_plugins(plugins.add_before::<RenderPlugin>(cuvk));
        }
        Order::After => {
            app.add_plugins(plugins);
            app.add_plugins(cuvk);
        }
    }
    app
}

/// Finishes plugin setup (the renderer is created asynchronously).
pub fn start(app: &mut App) {
    while app.plugins_state() == PluginsState::Adding {
        bevy::tasks::tick_global_task_pools_on_main_thread();
        std::thread::yield_now();
    }
    app.finish();
    app.cleanup();
}

/// Runs updates until `done` says so (at most `max`); returns how many ran.
pub fn update_until(app: &mut App, max: u32, mut done: impl FnMut(&mut App) -> bool) -> u32 {
    for n in 1..=max {
        app.update();
        if done(app) {
            return n;
        }
    }
    panic!("condition not reached in {max} updates");
}

/// wgpu's warnings and errors (the validation layer's messages among them), recorded through
/// `log` (the tests run without Bevy's log subscriber).
struct Recorder;

static RECORDED: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn && metadata.target().starts_with("wgpu")
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = format!("{} {}: {}", record.level(), record.target(), record.args());
            RECORDED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(line);
        }
    }
    fn flush(&self) {}
}

/// Starts recording (once per process) and forgets what was recorded so far.
pub fn record_wgpu_messages() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        if log::set_logger(&Recorder).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    });
    RECORDED.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The validation layer's (and wgpu's) warnings and errors since [`record_wgpu_messages`].
pub fn wgpu_messages() -> Vec<String> {
    RECORDED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Fails on any recorded wgpu warning or error (validation layer messages included).
pub fn assert_silent(what: &str) {
    let messages = wgpu_messages();
    assert!(
        messages.is_empty(),
        "{what}: wgpu / validation layer said:\n{}",
        messages.join("\n")
    );
}
