/* The C ABI used the way an engine plugin uses it: the "engine" (this file) owns the Vulkan
 * instance and device and hands them to cuvk; cuvk creates shared buffers and semaphores; the
 * engine records its own Vulkan commands on them. Every error path is exercised too, and the
 * process must end alive with no validation message.
 *
 * Build (capi/tests/capi.rs does this; `cargo build -p cuvk-capi` makes target/debug/libcuvk.so):
 *   cc -std=c11 -Wall -Wextra -Werror -I capi/include capi/examples/example.c \
 *      -L target/debug -lcuvk -lvulkan -ldl -Wl,-rpath,target/debug -o capi_example
 * Without CUDA it runs the Vulkan-only part and says so; with CUDA (REQUIRE_GPU=1 to insist)
 * a CUDA kernel, loaded from PTX through the driver API, writes a shared buffer that the
 * engine's Vulkan copy then reads, ordered by a cuvk timeline semaphore, and a second kernel
 * writes a shared image through its CUDA surface that the engine reads back the same way.
 *
 * Images follow cuvk's layout protocol: between uses an image is in VK_IMAGE_LAYOUT_GENERAL,
 * owned by VK_QUEUE_FAMILY_EXTERNAL; the engine acquires it before its commands and releases
 * it after (engine_image_read_back). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "cuvk.h"

static int failures;
#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            failures++;                                                     \
        }                                                                   \
    } while (0)
#define EXPECT(call, code)                                                              \
    do {                                                                                \
        CuvkResult r_ = (call);                                                         \
        CHECK(r_ == (code), "%s returned %d, expected %d (%s)", #call, (int)r_, (int)(code), \
              cuvk_last_error());                                                       \
        if (r_ != CUVK_SUCCESS && r_ == (code))                                         \
            printf("  expected error %d, rule %#x: %s\n", (int)r_, (unsigned)cuvk_last_error_rule(), cuvk_last_error()); \
    } while (0)
/* The call fails with `code`, and cuvk_last_error_rule() names the rule it broke. */
#define EXPECT_RULE(call, code, rule)                                                   \
    do {                                                                                \
        EXPECT(call, code);                                                             \
        CHECK(cuvk_last_error_rule() == (rule), "%s: rule %#x, expected %s (%#x)", #call, \
              (unsigned)cuvk_last_error_rule(), #rule, (unsigned)(rule));               \
    } while (0)

static unsigned validation_messages;
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)type;
    (void)user;
    if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        fprintf(stderr, "validation: %s\n", data->pMessage);
        validation_messages++;
    }
    return VK_FALSE;
}

/* ---- the engine's Vulkan objects ---------------------------------------------------------- */

struct Engine {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice physical_device;
    VkDevice device;
    uint32_t queue_family;
    VkQueue queue;
    const char *extensions[4];
    int host_memory;
    uint32_t extension_count;
    int timeline;
    int validation;
    uint32_t api_version; /* the instance's apiVersion, handed to cuvk (>= 1.2 required) */
};

static int has_device_extension(VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL);
    VkExtensionProperties *p = calloc(n, sizeof *p);
    vkEnumerateDeviceExtensionProperties(pd, NULL, &n, p);
    int found = 0;
    for (uint32_t i = 0; i < n; i++) found |= strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

static int engine_create(struct Engine *e) {
    memset(e, 0, sizeof *e);
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, NULL);
    VkLayerProperties *layers = calloc(n ? n : 1, sizeof *layers);
    vkEnumerateInstanceLayerProperties(&n, layers);
    for (uint32_t i = 0; i < n; i++) e->validation |= strcmp(layers[i].layerName, "VK_LAYER_KHRONOS_validation") == 0;
    free(layers);
    const char *req = getenv("REQUIRE_VULKAN");
    if (!e->validation && req && strcmp(req, "1") == 0) {
        fprintf(stderr, "the validation layer is required\n");
        return 0;
    }
    const char *layer = "VK_LAYER_KHRONOS_validation";
    const char *inst_ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    e->api_version = VK_API_VERSION_1_2;
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "engine", .apiVersion = e->api_version};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                                .enabledLayerCount = e->validation ? 1 : 0, .ppEnabledLayerNames = &layer,
                                .enabledExtensionCount = e->validation ? 1 : 0, .ppEnabledExtensionNames = &inst_ext};
    if (vkCreateInstance(&ici, NULL, &e->instance) != VK_SUCCESS) return 0;
    if (e->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(e->instance, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mci = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
            .pfnUserCallback = on_message};
        create(e->instance, &mci, NULL, &e->messenger);
    }
    uint32_t count = 1;
    if (vkEnumeratePhysicalDevices(e->instance, &count, &e->physical_device) < 0 || count == 0) return 0;
    uint32_t qn = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(e->physical_device, &qn, NULL);
    VkQueueFamilyProperties *q = calloc(qn, sizeof *q);
    vkGetPhysicalDeviceQueueFamilyProperties(e->physical_device, &qn, q);
    for (e->queue_family = 0; e->queue_family < qn; e->queue_family++)
        if (q[e->queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
    free(q);
    e->extensions[e->extension_count++] = VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
    if (has_device_extension(e->physical_device, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME))
        e->extensions[e->extension_count++] = VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME;
    /* Needed for cuvk's staging buffers (pinned memory imported as a Vulkan buffer). */
    e->host_memory = has_device_extension(e->physical_device, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    if (e->host_memory) e->extensions[e->extension_count++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(e->physical_device, &f2);
    e->timeline = f12.timelineSemaphore;
    VkPhysicalDeviceVulkan12Features enable12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                                 .timelineSemaphore = f12.timelineSemaphore};
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = e->queue_family,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &enable12, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci, .enabledExtensionCount = e->extension_count,
                              .ppEnabledExtensionNames = e->extensions};
    if (vkCreateDevice(e->physical_device, &dci, NULL, &e->device) != VK_SUCCESS) return 0;
    vkGetDeviceQueue(e->device, e->queue_family, 0, &e->queue);
    return 1;
}

static void engine_destroy(struct Engine *e) {
    vkDeviceWaitIdle(e->device);
    vkDestroyDevice(e->device, NULL);
    if (e->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(e->instance, "vkDestroyDebugUtilsMessengerEXT");
        destroy(e->instance, e->messenger, NULL);
    }
    vkDestroyInstance(e->instance, NULL);
}

/* The engine reads a cuvk buffer: optional fill, then a copy into host-visible memory, the
 * submission optionally waiting for a timeline value; returns the first word and checks all. */
static int engine_read_back(struct Engine *e, VkBuffer src, VkDeviceSize size, int fill, uint32_t fill_value,
                            VkSemaphore wait_sem, uint64_t wait_value, uint32_t expect) {
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size, .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT};
    VkBuffer dst;
    vkCreateBuffer(e->device, &bci, NULL, &dst);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(e->device, dst, &req);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(e->physical_device, &mp);
    uint32_t type = 0;
    VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (; type < mp.memoryTypeCount; type++)
        if ((req.memoryTypeBits & (1u << type)) && (mp.memoryTypes[type].propertyFlags & want) == want) break;
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
    VkDeviceMemory mem;
    vkAllocateMemory(e->device, &mai, NULL, &mem);
    vkBindBufferMemory(e->device, dst, mem, 0);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = e->queue_family};
    VkCommandPool pool;
    vkCreateCommandPool(e->device, &pci, NULL, &pool);
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cmd;
    vkAllocateCommandBuffers(e->device, &cai, &cmd);
    VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cmd, &begin);
    if (fill) {
        vkCmdFillBuffer(cmd, src, 0, size, fill_value);
        VkMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                             .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT};
        vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &b, 0, NULL, 0, NULL);
    }
    VkBufferCopy region = {0, 0, size};
    vkCmdCopyBuffer(cmd, src, dst, 1, &region);
    VkMemoryBarrier to_host = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, NULL, 0, NULL);
    vkEndCommandBuffer(cmd);
    VkTimelineSemaphoreSubmitInfo ts = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = 1, .pWaitSemaphoreValues = &wait_value};
    VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = wait_sem ? &ts : NULL,
                       .waitSemaphoreCount = wait_sem ? 1 : 0, .pWaitSemaphores = &wait_sem, .pWaitDstStageMask = &stage,
                       .commandBufferCount = 1, .pCommandBuffers = &cmd};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    vkCreateFence(e->device, &fci, NULL, &fence);
    vkQueueSubmit(e->queue, 1, &si, fence);
    vkWaitForFences(e->device, 1, &fence, VK_TRUE, UINT64_MAX);
    uint32_t *words;
    vkMapMemory(e->device, mem, 0, size, 0, (void **)&words);
    size_t bad = 0;
    for (size_t i = 0; i < size / 4; i++) bad += words[i] != expect;
    vkUnmapMemory(e->device, mem);
    vkDestroyFence(e->device, fence, NULL);
    vkDestroyCommandPool(e->device, pool, NULL);
    vkDestroyBuffer(e->device, dst, NULL);
    vkFreeMemory(e->device, mem, NULL);
    CHECK(bad == 0, "%zu of %zu words differ from %#x", bad, (size_t)(size / 4), expect);
    return bad == 0;
}

/* The engine reads a cuvk image of 32-bit texels: acquire it from VK_QUEUE_FAMILY_EXTERNAL
 * (GENERAL -> TRANSFER_DST), optionally clear it to `clear_value`, copy it into host-visible
 * memory, release it (TRANSFER_SRC -> GENERAL, to VK_QUEUE_FAMILY_EXTERNAL); the submission
 * optionally waits for a timeline value. Checks every word. */
static int engine_image_read_back(struct Engine *e, VkImage image, uint32_t w, uint32_t h, int clear, uint32_t clear_value,
                                  VkSemaphore wait_sem, uint64_t wait_value, uint32_t expect) {
    VkDeviceSize size = 4ull * w * h;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size, .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT};
    VkBuffer dst;
    vkCreateBuffer(e->device, &bci, NULL, &dst);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(e->device, dst, &req);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(e->physical_device, &mp);
    uint32_t type = 0;
    VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (; type < mp.memoryTypeCount; type++)
        if ((req.memoryTypeBits & (1u << type)) && (mp.memoryTypes[type].propertyFlags & want) == want) break;
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = type};
    VkDeviceMemory mem;
    vkAllocateMemory(e->device, &mai, NULL, &mem);
    vkBindBufferMemory(e->device, dst, mem, 0);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = e->queue_family};
    VkCommandPool pool;
    vkCreateCommandPool(e->device, &pci, NULL, &pool);
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cmd;
    vkAllocateCommandBuffers(e->device, &cai, &cmd);
    VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cmd, &begin);
    VkImageSubresourceRange range = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1};
    /* Acquire: ownership from CUDA's side, GENERAL -> TRANSFER_DST. Source stage ALL_COMMANDS
     * so the transition follows the semaphore wait. */
    VkImageMemoryBarrier acquire = {.sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER, .srcAccessMask = 0,
                                    .dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT,
                                    .oldLayout = VK_IMAGE_LAYOUT_GENERAL, .newLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                                    .srcQueueFamilyIndex = VK_QUEUE_FAMILY_EXTERNAL, .dstQueueFamilyIndex = e->queue_family,
                                    .image = image, .subresourceRange = range};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, NULL, 0, NULL, 1, &acquire);
    if (clear) {
        VkClearColorValue color = {.uint32 = {clear_value, clear_value, clear_value, clear_value}};
        vkCmdClearColorImage(cmd, image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, &color, 1, &range);
    }
    VkImageMemoryBarrier to_src = acquire;
    to_src.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    to_src.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    to_src.oldLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
    to_src.newLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    to_src.srcQueueFamilyIndex = to_src.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, NULL, 0, NULL, 1, &to_src);
    VkBufferImageCopy region = {.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1}, .imageExtent = {w, h, 1}};
    vkCmdCopyImageToBuffer(cmd, image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, dst, 1, &region);
    /* Release: TRANSFER_SRC -> GENERAL, ownership back to CUDA's side. */
    VkImageMemoryBarrier release = {.sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER, .srcAccessMask = 0, .dstAccessMask = 0,
                                    .oldLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, .newLayout = VK_IMAGE_LAYOUT_GENERAL,
                                    .srcQueueFamilyIndex = e->queue_family, .dstQueueFamilyIndex = VK_QUEUE_FAMILY_EXTERNAL,
                                    .image = image, .subresourceRange = range};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, 0, 0, NULL, 0, NULL, 1, &release);
    VkMemoryBarrier to_host = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, NULL, 0, NULL);
    vkEndCommandBuffer(cmd);
    VkTimelineSemaphoreSubmitInfo ts = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = 1, .pWaitSemaphoreValues = &wait_value};
    VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = wait_sem ? &ts : NULL,
                       .waitSemaphoreCount = wait_sem ? 1 : 0, .pWaitSemaphores = &wait_sem, .pWaitDstStageMask = &stage,
                       .commandBufferCount = 1, .pCommandBuffers = &cmd};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    vkCreateFence(e->device, &fci, NULL, &fence);
    vkQueueSubmit(e->queue, 1, &si, fence);
    vkWaitForFences(e->device, 1, &fence, VK_TRUE, UINT64_MAX);
    uint32_t *words;
    vkMapMemory(e->device, mem, 0, size, 0, (void **)&words);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)w * h; i++) bad += words[i] != expect;
    vkUnmapMemory(e->device, mem);
    vkDestroyFence(e->device, fence, NULL);
    vkDestroyCommandPool(e->device, pool, NULL);
    vkDestroyBuffer(e->device, dst, NULL);
    vkFreeMemory(e->device, mem, NULL);
    CHECK(bad == 0, "%zu of %zu texels differ from %#x", bad, (size_t)w * h, expect);
    return bad == 0;
}

/* ---- CUDA, through the driver API loaded at run time (as an engine plugin would) ---------- */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static const char FILL_PTX[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry fill(.param .u64 ptr, .param .u32 n, .param .u32 value)\n{\n"
    " .reg .pred %p;\n .reg .b32 %r<6>;\n .reg .b64 %rd<4>;\n"
    " ld.param.u64 %rd1, [ptr];\n ld.param.u32 %r1, [n];\n ld.param.u32 %r2, [value];\n"
    " mov.u32 %r3, %ctaid.x;\n mov.u32 %r4, %ntid.x;\n mov.u32 %r5, %tid.x;\n"
    " mad.lo.s32 %r3, %r3, %r4, %r5;\n setp.ge.u32 %p, %r3, %r1;\n @%p bra DONE;\n"
    " cvta.to.global.u64 %rd2, %rd1;\n mul.wide.u32 %rd3, %r3, 4;\n add.s64 %rd2, %rd2, %rd3;\n"
    " st.global.u32 [%rd2], %r2;\nDONE:\n ret;\n}\n";

/* Writes `value` into every texel of a w-texel-wide 2D surface of 32-bit texels (grid y = rows). */
static const char SURFACE_PTX[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry fill_surface(.param .u64 surf, .param .u32 w, .param .u32 value)\n{\n"
    " .reg .pred %p;\n .reg .b32 %r<8>;\n .reg .b64 %rd<2>;\n"
    " ld.param.u64 %rd1, [surf];\n ld.param.u32 %r1, [w];\n ld.param.u32 %r2, [value];\n"
    " mov.u32 %r3, %ctaid.x;\n mov.u32 %r4, %ntid.x;\n mov.u32 %r5, %tid.x;\n"
    " mad.lo.s32 %r3, %r3, %r4, %r5;\n setp.ge.u32 %p, %r3, %r1;\n @%p bra DONE;\n"
    " mov.u32 %r6, %ctaid.y;\n shl.b32 %r7, %r3, 2;\n"
    " sust.b.2d.b32.trap [%rd1, {%r7, %r6}], {%r2};\nDONE:\n ret;\n}\n";

/* A viewer of a publisher in another process (`particles --publish NAME`), where
 * CUVK_EXAMPLE_PUBLISHER names one: the slots as the engine's VkBuffers, 100 frames held and
 * their (empty) reads submitted through cuvk, each waited for; frame numbers only grow. */
static void subscriber_path(CuvkBridge bridge) {
    const char *name = getenv("CUVK_EXAMPLE_PUBLISHER");
    if (name == NULL) {
        printf("no publisher named (CUVK_EXAMPLE_PUBLISHER): subscriber happy path skipped\n");
        return;
    }
    CuvkSubscriber sub = 0;
    EXPECT(cuvk_subscriber_attach(bridge, name, 0, 30000000000ull, &sub), CUVK_SUCCESS);
    if (sub == 0) return;
    uint32_t k = 0;
    EXPECT(cuvk_subscriber_slot_count(sub, &k), CUVK_SUCCESS);
    CHECK(k >= 3, "a publisher has at least 3 slots, not %u", k);
    for (uint32_t i = 0; i < k; i++) {
        uint64_t vk_buffer = 0, bytes = 0;
        CuvkElementFormat el = {0};
        EXPECT(cuvk_subscriber_slot(sub, i, &vk_buffer, &bytes, &el), CUVK_SUCCESS);
        CHECK(vk_buffer != 0 && bytes > 0 && el.code == 2 && el.bits == 32 && el.columns == 4,
              "slot %u: a VkBuffer of float4 rows (code %u, bits %u, columns %u)", i, el.code, el.bits, el.columns);
    }
    uint64_t vk_buffer = 0, bytes = 0;
    CuvkElementFormat el = {0};
    EXPECT(cuvk_subscriber_slot(sub, k, &vk_buffer, &bytes, &el), CUVK_ERROR_INVALID_ARGUMENT);
    uint64_t last = 0;
    unsigned held = 0;
    for (int i = 0; i < 100; i++) {
        CuvkHeldFrame f = {0};
        CuvkResult r = cuvk_subscriber_hold(sub, 5000000000ull, &f);
        CHECK(r == CUVK_SUCCESS, "hold %d: %d (%s)", i, (int)r, cuvk_last_error());
        if (r != CUVK_SUCCESS) break;
        CHECK(f.number > last && f.slot < k, "frame %llu after %llu, slot %u", (unsigned long long)f.number,
              (unsigned long long)last, f.slot);
        /* One at a time: a second hold before the submit is refused. */
        if (i == 0) {
            CuvkHeldFrame again = {0};
            EXPECT(cuvk_subscriber_hold(sub, 0, &again), CUVK_ERROR_INVALID_ARGUMENT);
            EXPECT_RULE(cuvk_subscriber_submit_read(sub, f.number + 1, NULL, 0, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT),
                        CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_SYNC_WRONG_FRAME);
        }
        EXPECT(cuvk_subscriber_submit_read(sub, f.number, NULL, 0, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT), CUVK_SUCCESS);
        EXPECT(cuvk_subscriber_wait_read(sub, f.number, 5000000000ull), CUVK_SUCCESS);
        last = f.number;
        held++;
    }
    printf("subscriber: held %u frames of '%s', the last %llu\n", held, name, (unsigned long long)last);
    EXPECT(cuvk_subscriber_destroy(sub), CUVK_SUCCESS);
    EXPECT(cuvk_subscriber_destroy(sub), CUVK_ERROR_STALE_HANDLE);
}

static void cuda_path(struct Engine *e, const CuvkVulkanDevice *d) {
    CuvkBridge bridge = 0;
    CuvkResult r = cuvk_bridge_create(d, NULL, 0, &bridge);
    const char *need = getenv("REQUIRE_GPU");
    if (r == CUVK_ERROR_UNAVAILABLE) {
        printf("no CUDA device: skipping the CUDA path (%s)\n", cuvk_last_error());
        CHECK(!(need && strcmp(need, "1") == 0), "REQUIRE_GPU=1 but no CUDA device");
        return;
    }
    CHECK(r == CUVK_SUCCESS, "cuvk_bridge_create with CUDA: %d %s", (int)r, cuvk_last_error());
    if (r != CUVK_SUCCESS) return;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(lib != NULL, "dlopen libcuda.so.1");
    if (!lib) return;
    /* Function pointers of the driver API; argument types as in cuda.h. */
    CUresult (*cuInit)(unsigned) = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
    CUresult (*cuDeviceGet)(int *, int) = (CUresult(*)(int *, int))dlsym(lib, "cuDeviceGet");
    CUresult (*cuDevicePrimaryCtxRetain)(void **, int) = (CUresult(*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
    CUresult (*cuDevicePrimaryCtxRelease)(int) = (CUresult(*)(int))dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
    CUresult (*cuCtxSetCurrent)(void *) = (CUresult(*)(void *))dlsym(lib, "cuCtxSetCurrent");
    CUresult (*cuModuleLoadData)(void **, const void *) = (CUresult(*)(void **, const void *))dlsym(lib, "cuModuleLoadData");
    CUresult (*cuModuleUnload)(void *) = (CUresult(*)(void *))dlsym(lib, "cuModuleUnload");
    CUresult (*cuModuleGetFunction)(void **, void *, const char *) =
        (CUresult(*)(void **, void *, const char *))dlsym(lib, "cuModuleGetFunction");
    CUresult (*cuStreamCreate)(void **, unsigned) = (CUresult(*)(void **, unsigned))dlsym(lib, "cuStreamCreate");
    CUresult (*cuStreamDestroy)(void *) = (CUresult(*)(void *))dlsym(lib, "cuStreamDestroy_v2");
    CUresult (*cuStreamSynchronize)(void *) = (CUresult(*)(void *))dlsym(lib, "cuStreamSynchronize");
    CUresult (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                               void **) = (CUresult(*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                       unsigned, void *, void **, void **))dlsym(lib, "cuLaunchKernel");
    int dev = 0;
    void *ctx = NULL, *module = NULL, *fill = NULL, *stream = NULL;
    CHECK(cuInit(0) == 0 && cuDeviceGet(&dev, 0) == 0 && cuDevicePrimaryCtxRetain(&ctx, dev) == 0 && cuCtxSetCurrent(ctx) == 0,
          "CUDA context");
    CHECK(cuModuleLoadData(&module, FILL_PTX) == 0 && cuModuleGetFunction(&fill, module, "fill") == 0, "load the PTX kernel");
    CHECK(cuStreamCreate(&stream, 1) == 0, "cuStreamCreate");

    const uint32_t n = 1u << 20;
    CuvkBuffer buffer = 0;
    EXPECT(cuvk_buffer_create(bridge, 4ull * n, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &buffer), CUVK_SUCCESS);
    CuvkBufferInfo info = {.struct_size = sizeof info};
    EXPECT(cuvk_buffer_info(buffer, &info), CUVK_SUCCESS);
    CHECK(info.cuda_ptr != 0 && info.vk_buffer != 0, "the shared buffer has both a VkBuffer and a CUDA pointer");
    /* The buffer published for a producer process; none attaches here. */
    CuvkFrameServer fs = 0;
    if (cuvk_frame_server_create(bridge, "capi-example-cuda", 1, &fs) == CUVK_SUCCESS) {
        uint32_t id = 99;
        const CuvkElementFormat f32 = {.code = 2, .bits = 32, .lanes = 1, .columns = 1};
        EXPECT(cuvk_frame_server_publish_buffer(fs, buffer, f32, &id), CUVK_SUCCESS);
        const CuvkElementFormat bad = {.code = 2, .bits = 12, .lanes = 1, .columns = 1};
        EXPECT_RULE(cuvk_frame_server_publish_buffer(fs, buffer, bad, &id), CUVK_ERROR_INVALID_ARGUMENT,
                    CUVK_RULE_LAYOUT_ELEMENT_FORMAT);
        EXPECT(cuvk_frame_server_publish_buffer(fs, bridge, f32, &id), CUVK_ERROR_WRONG_HANDLE_KIND);
        EXPECT_RULE(cuvk_frame_server_publish_buffer(fs, buffer, f32, &id), CUVK_ERROR_INVALID_ARGUMENT,
                    CUVK_RULE_SYNC_SLOT_COUNT); /* one buffer per frame in flight (K = 1) */
        EXPECT_RULE(cuvk_frame_server_accept(fs, 1000000), CUVK_ERROR_TIMEOUT, CUVK_RULE_NONE);
        EXPECT(cuvk_frame_server_wait_idle(fs, 1000000), CUVK_SUCCESS); /* nothing drawn: at once */
        CuvkFrame frame = {0};
        EXPECT_RULE(cuvk_frame_server_submit_drawn(fs, 1, NULL, 0, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT),
                    CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_SYNC_WRONG_FRAME); /* no frame handed out */
        EXPECT(cuvk_frame_server_next_frame(fs, 1000000, &frame), CUVK_ERROR_TIMEOUT);
        EXPECT(cuvk_frame_server_destroy(fs), CUVK_SUCCESS);
    } else {
        printf("frame server unavailable (%s)\n", cuvk_last_error());
    }
    subscriber_path(bridge);
    CuvkSemaphore sem = 0;
    EXPECT(cuvk_semaphore_create(bridge, 0, &sem), CUVK_SUCCESS);
    uint64_t vk_sem = 0;
    EXPECT(cuvk_semaphore_vk(sem, &vk_sem), CUVK_SUCCESS);

    /* CUDA writes 0xC0FFEE into every word, then signals 1; the engine's Vulkan copy waits for 1. */
    uint32_t value = 0xC0FFEE;
    CUdeviceptr ptr = info.cuda_ptr;
    void *args[] = {&ptr, (void *)&n, &value};
    CHECK(cuLaunchKernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args, NULL) == 0, "cuLaunchKernel");
    EXPECT(cuvk_semaphore_cuda_signal(sem, stream, 1), CUVK_SUCCESS);
    CHECK(engine_read_back(e, (VkBuffer)(uintptr_t)info.vk_buffer, 4ull * n, 0, 0, (VkSemaphore)(uintptr_t)vk_sem, 1, value),
          "Vulkan read what CUDA wrote");
    EXPECT_RULE(cuvk_semaphore_cuda_signal(sem, stream, 1), CUVK_ERROR_INVALID_ARGUMENT, /* not increasing */
                CUVK_RULE_SYNC_TIMELINE_NOT_INCREASING);
    CHECK(cuStreamSynchronize(stream) == 0, "cuStreamSynchronize");

    /* A pool buffer: the kernel writes through block pointer + offset, the engine's Vulkan
     * copy reads through the VkBuffer bound at that offset. */
    CuvkPoolDesc pdesc = {.struct_size = sizeof pdesc, .vk_usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    CuvkPool pool = 0;
    EXPECT(cuvk_pool_create(bridge, &pdesc, &pool), CUVK_SUCCESS);
    CuvkBuffer first = 0, second = 0;
    EXPECT(cuvk_pool_buffer_create(pool, 4096, &first), CUVK_SUCCESS);
    EXPECT(cuvk_pool_buffer_create(pool, 4ull * n, &second), CUVK_SUCCESS);
    CuvkBufferInfo pinfo = {.struct_size = sizeof pinfo};
    EXPECT(cuvk_buffer_info(second, &pinfo), CUVK_SUCCESS);
    CHECK(pinfo.cuda_ptr != 0 && pinfo.cuda_ptr % 16 == 0, "pool buffer CUDA pointer %#llx", (unsigned long long)pinfo.cuda_ptr);
    uint32_t pool_value = 0xB10C;
    CUdeviceptr pool_ptr = pinfo.cuda_ptr;
    void *pool_args[] = {&pool_ptr, (void *)&n, &pool_value};
    CHECK(cuLaunchKernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, pool_args, NULL) == 0, "cuLaunchKernel (pool)");
    CHECK(cuStreamSynchronize(stream) == 0, "cuStreamSynchronize");
    CHECK(engine_read_back(e, (VkBuffer)(uintptr_t)pinfo.vk_buffer, pinfo.size, 0, 0, VK_NULL_HANDLE, 0, pool_value),
          "Vulkan read what CUDA wrote into a pool buffer");
    EXPECT(cuvk_buffer_destroy(first), CUVK_SUCCESS);
    EXPECT(cuvk_pool_destroy(pool), CUVK_SUCCESS);
    EXPECT(cuvk_buffer_destroy(second), CUVK_SUCCESS);

    CuvkStaging staging = 0;
    if (!e->host_memory) {
        EXPECT(cuvk_staging_create(bridge, 1 << 20, &staging), CUVK_ERROR_UNSUPPORTED);
    } else {
        EXPECT(cuvk_staging_create(bridge, 1 << 20, &staging), CUVK_SUCCESS);
        CuvkStagingInfo sinfo = {.struct_size = sizeof sinfo};
        EXPECT(cuvk_staging_info(staging, &sinfo), CUVK_SUCCESS);
        CHECK(sinfo.host_ptr != NULL && sinfo.vk_buffer != 0 && sinfo.size >= (1 << 20), "staging info");
        /* The host writes the pinned bytes; the engine's Vulkan copy reads them through the VkBuffer. */
        memset(sinfo.host_ptr, 0x5a, sinfo.size);
        CHECK(engine_read_back(e, (VkBuffer)(uintptr_t)sinfo.vk_buffer, sinfo.size, 0, 0, VK_NULL_HANDLE, 0, 0x5a5a5a5au),
              "Vulkan read the pinned staging bytes the host wrote");
        EXPECT(cuvk_staging_destroy(staging), CUVK_SUCCESS);
    }

    /* A shared image: CUDA writes it through its surface, signals 2; the engine acquires it,
     * copies it out (waiting for 2), releases it. */
    void *surface_module = NULL, *fill_surface = NULL;
    CHECK(cuModuleLoadData(&surface_module, SURFACE_PTX) == 0 && cuModuleGetFunction(&fill_surface, surface_module, "fill_surface") == 0,
          "load the surface PTX kernel");
    const uint32_t iw = 300, ih = 70;
    CuvkImageDesc idesc = {.struct_size = sizeof idesc, .image_type = VK_IMAGE_TYPE_2D, .format = VK_FORMAT_R32_UINT, .width = iw,
                           .height = ih, .depth = 1, .array_layers = 1, .mip_levels = 1,
                           .usage = VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_SAMPLED_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT |
                                    VK_IMAGE_USAGE_TRANSFER_DST_BIT};
    CuvkImage image = 0;
    EXPECT(cuvk_image_create(bridge, &idesc, &image), CUVK_SUCCESS);
    CuvkImageInfo iinfo = {.struct_size = sizeof iinfo};
    EXPECT(cuvk_image_info(image, &iinfo), CUVK_SUCCESS);
    CHECK(iinfo.vk_image != 0 && iinfo.cuda_mipmapped_array != 0 && iinfo.cuda_channels == 1, "the shared image has both sides");
    uint64_t surf = 0, surf_again = 0, level0 = 0;
    EXPECT(cuvk_image_surface(image, 0, &surf), CUVK_SUCCESS);
    EXPECT(cuvk_image_surface(image, 0, &surf_again), CUVK_SUCCESS);
    CHECK(surf != 0 && surf == surf_again, "one surface per level, owned by the image");
    EXPECT(cuvk_image_surface(image, 1, &surf_again), CUVK_ERROR_INVALID_ARGUMENT); /* one level only */
    EXPECT(cuvk_image_cuda_array(image, 0, &level0), CUVK_SUCCESS);
    CHECK(level0 != 0, "level 0 array");
    uint32_t ivalue = 0xBEEF01;
    void *iargs[] = {&surf, (void *)&iw, &ivalue};
    CHECK(cuLaunchKernel(fill_surface, (iw + 255) / 256, ih, 1, 256, 1, 1, 0, stream, iargs, NULL) == 0, "cuLaunchKernel (surface)");
    EXPECT(cuvk_semaphore_cuda_signal(sem, stream, 2), CUVK_SUCCESS);
    CHECK(engine_image_read_back(e, (VkImage)(uintptr_t)iinfo.vk_image, iw, ih, 0, 0, (VkSemaphore)(uintptr_t)vk_sem, 2, ivalue),
          "Vulkan read the image CUDA wrote through its surface");
    CuvkTextureDesc tdesc = {.struct_size = sizeof tdesc, .level = 0, .address_mode = 4, .filter = 0};
    CuvkTexture texture = 0;
    uint64_t tex_object = 0, tex_again = 0;
    EXPECT_RULE(cuvk_texture_create(image, &tdesc, &texture, &tex_object), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_UNKNOWN_ADDRESS_MODE);
    CHECK(texture == 0 && tex_object == 0, "no texture for an unknown address mode");
    tdesc.address_mode = 1; /* the next valid call works */
    EXPECT(cuvk_texture_create(image, &tdesc, &texture, &tex_object), CUVK_SUCCESS);
    EXPECT(cuvk_texture_object(texture, &tex_again), CUVK_SUCCESS);
    CHECK(tex_object != 0 && tex_object == tex_again, "texture object");
    tdesc.filter = 1; /* linear filtering of an integer format */
    CuvkTexture bad_texture = 0;
    EXPECT(cuvk_texture_create(image, &tdesc, &bad_texture, &tex_again), CUVK_ERROR_INVALID_ARGUMENT);
    CHECK(cuStreamSynchronize(stream) == 0, "cuStreamSynchronize");
    EXPECT(cuvk_image_destroy(image), CUVK_SUCCESS);
    EXPECT(cuvk_texture_destroy(texture), CUVK_SUCCESS); /* the texture outlived its image handle */
    cuModuleUnload(surface_module);

    EXPECT(cuvk_semaphore_destroy(sem), CUVK_SUCCESS);
    EXPECT(cuvk_buffer_destroy(buffer), CUVK_SUCCESS);
    EXPECT(cuvk_bridge_destroy(bridge), CUVK_SUCCESS);
    cuStreamDestroy(stream);
    cuModuleUnload(module);
    cuDevicePrimaryCtxRelease(dev);
    printf("CUDA path: CUDA kernels wrote %u buffer words and a %ux%u image (through its surface) that the engine's "
           "Vulkan copies read, ordered by a cuvk semaphore\n", n, iw, ih);
}

int main(void) {
    printf("cuvk ABI version %u\n", cuvk_abi_version());
    CHECK(cuvk_abi_version() == CUVK_ABI_VERSION, "ABI version mismatch");
    struct Engine e;
    if (!engine_create(&e)) {
        fprintf(stderr, "no Vulkan device for the engine\n");
        return 1;
    }
    CuvkVulkanDevice d = {
        .struct_size = sizeof d, .instance = e.instance, .physical_device = e.physical_device, .device = e.device,
        .queue_family_index = e.queue_family, .queue = e.queue, .get_instance_proc_addr = (const void *)vkGetInstanceProcAddr,
        .enabled_extensions = e.extensions, .enabled_extension_count = e.extension_count, .timeline_semaphore_enabled = e.timeline,
        .api_version = e.api_version};

    /* Null pointers and a struct too small for this library. */
    CuvkBridge vb = 0;
    EXPECT_RULE(cuvk_bridge_create(NULL, NULL, CUVK_BRIDGE_VULKAN_ONLY, &vb), CUVK_ERROR_NULL_POINTER, CUVK_RULE_NONE);
    EXPECT(cuvk_bridge_create(&d, NULL, CUVK_BRIDGE_VULKAN_ONLY, NULL), CUVK_ERROR_NULL_POINTER);
    CuvkVulkanDevice small = d;
    small.struct_size = 8;
    EXPECT(cuvk_bridge_create(&small, NULL, CUVK_BRIDGE_VULKAN_ONLY, &vb), CUVK_ERROR_STRUCT_SIZE);
    /* What the engine did not enable (the device offers it): the extension, the timeline
     * feature; and an instance older than Vulkan 1.2. */
    CuvkVulkanDevice no_ext = d;
    no_ext.enabled_extension_count = 0;
    EXPECT_RULE(cuvk_bridge_create(&no_ext, NULL, CUVK_BRIDGE_VULKAN_ONLY, &vb), CUVK_ERROR_NOT_ENABLED,
                CUVK_RULE_DEVICE_MISSING_EXTENSION);
    CuvkVulkanDevice no_timeline = d;
    no_timeline.timeline_semaphore_enabled = 0;
    EXPECT_RULE(cuvk_bridge_create(&no_timeline, NULL, CUVK_BRIDGE_VULKAN_ONLY, &vb), CUVK_ERROR_NOT_ENABLED,
                CUVK_RULE_DEVICE_FEATURE_NOT_ENABLED);
    CuvkVulkanDevice old_api = d;
    old_api.api_version = VK_API_VERSION_1_1;
    EXPECT_RULE(cuvk_bridge_create(&old_api, NULL, CUVK_BRIDGE_VULKAN_ONLY, &vb), CUVK_ERROR_UNSUPPORTED, CUVK_RULE_DEVICE_API_VERSION);
    CHECK(strstr(cuvk_last_error(), "API version 1.1.0") != NULL && vb == 0, "the refusal names the version: %s",
          cuvk_last_error());

    /* The Vulkan-only bridge over the engine's device. */
    EXPECT(cuvk_bridge_create(&d, NULL, CUVK_BRIDGE_VULKAN_ONLY, &vb), CUVK_SUCCESS);
    CuvkBuffer buf = 0;
    EXPECT(cuvk_buffer_create(vb, 1 << 20, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &buf), CUVK_SUCCESS);
    CuvkBuffer empty = 0;
    EXPECT_RULE(cuvk_buffer_create(vb, 0, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &empty), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_LAYOUT_ZERO_SIZE);
    CuvkBufferInfo info = {.struct_size = sizeof info};
    EXPECT(cuvk_buffer_info(buf, &info), CUVK_SUCCESS);
    CHECK(info.vk_buffer != 0 && info.size == (1 << 20) && info.cuda_ptr == 0, "Vulkan-only buffer info");
    CHECK(engine_read_back(&e, (VkBuffer)(uintptr_t)info.vk_buffer, info.size, 1, 0xABCD1234u, VK_NULL_HANDLE, 0, 0xABCD1234u),
          "the engine filled and read the cuvk buffer");
    CuvkBufferInfo tiny = {.struct_size = 4};
    EXPECT(cuvk_buffer_info(buf, &tiny), CUVK_ERROR_STRUCT_SIZE);
    EXPECT(cuvk_buffer_info(buf, NULL), CUVK_ERROR_NULL_POINTER);

    /* A pool: buffers sub-allocated from exportable blocks, ordinary CuvkBuffers to the engine. */
    CuvkPoolDesc pdesc = {.struct_size = sizeof pdesc, .vk_usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                          .block_size = 1 << 20, .keep_empty_blocks = 1};
    CuvkPool pool = 0;
    EXPECT(cuvk_pool_create(vb, &pdesc, &pool), CUVK_SUCCESS);
    CuvkBuffer pooled[3] = {0, 0, 0};
    for (uint32_t i = 0; i < 3; i++) {
        EXPECT(cuvk_pool_buffer_create(pool, 4096ull * (i + 1), &pooled[i]), CUVK_SUCCESS);
    }
    for (uint32_t i = 0; i < 3; i++) {
        CuvkBufferInfo pi = {.struct_size = sizeof pi};
        EXPECT(cuvk_buffer_info(pooled[i], &pi), CUVK_SUCCESS);
        CHECK(pi.vk_buffer != 0 && pi.size == 4096ull * (i + 1) && pi.cuda_ptr == 0, "pool buffer %u info", i);
        CHECK(engine_read_back(&e, (VkBuffer)(uintptr_t)pi.vk_buffer, pi.size, 1, 0x9000u + i, VK_NULL_HANDLE, 0, 0x9000u + i),
              "the engine filled and read pool buffer %u", i);
    }
    CuvkPoolStats ps = {.struct_size = sizeof ps};
    EXPECT(cuvk_pool_stats(pool, &ps), CUVK_SUCCESS);
    printf("pool: %llu blocks, %llu own allocations, %llu buffers, %llu of %llu bytes used\n",
           (unsigned long long)ps.blocks, (unsigned long long)ps.own_allocations, (unsigned long long)ps.buffers,
           (unsigned long long)ps.used_bytes, (unsigned long long)ps.reserved_bytes);
    CHECK(ps.buffers == 3 && ps.requested_bytes == 6 * 4096 && ps.used_bytes >= ps.requested_bytes &&
              ps.reserved_bytes == ps.used_bytes + ps.free_bytes,
          "pool stats");
    CuvkBuffer refused = 0;
    EXPECT(cuvk_pool_buffer_create(pool, 0, &refused), CUVK_ERROR_INVALID_ARGUMENT);
    EXPECT(cuvk_pool_buffer_create(pool, 64, NULL), CUVK_ERROR_NULL_POINTER);
    CuvkPoolDesc bad_desc = pdesc;
    bad_desc.dedicated_threshold = 2 << 20; /* above the block size */
    EXPECT_RULE(cuvk_pool_create(vb, &bad_desc, &refused), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_MEMORY_POOL_THRESHOLD);
    EXPECT(cuvk_pool_create(vb, NULL, &refused), CUVK_ERROR_NULL_POINTER);
    CuvkPoolStats tiny_stats = {.struct_size = 4};
    EXPECT(cuvk_pool_stats(pool, &tiny_stats), CUVK_ERROR_STRUCT_SIZE);
    EXPECT(cuvk_pool_stats(pooled[0], &ps), CUVK_ERROR_WRONG_HANDLE_KIND);
    /* The pool goes first: its buffers stay valid, each keeping its block. */
    EXPECT(cuvk_pool_destroy(pool), CUVK_SUCCESS);
    EXPECT(cuvk_pool_stats(pool, &ps), CUVK_ERROR_STALE_HANDLE);
    CuvkBufferInfo last = {.struct_size = sizeof last};
    EXPECT(cuvk_buffer_info(pooled[2], &last), CUVK_SUCCESS);
    CHECK(engine_read_back(&e, (VkBuffer)(uintptr_t)last.vk_buffer, last.size, 1, 0xA11CEu, VK_NULL_HANDLE, 0, 0xA11CEu),
          "a pool buffer outlives its pool");
    for (uint32_t i = 0; i < 3; i++) EXPECT(cuvk_buffer_destroy(pooled[i]), CUVK_SUCCESS);

    /* Timeline semaphores are required, so the bridge above exists only with them enabled. */
    CuvkSemaphore sem = 0;
    EXPECT(cuvk_semaphore_create(vb, 3, &sem), CUVK_SUCCESS);
    EXPECT(cuvk_semaphore_signal_host(sem, 5), CUVK_SUCCESS);
    EXPECT(cuvk_semaphore_wait_host(sem, 5, 0), CUVK_SUCCESS);
    EXPECT_RULE(cuvk_semaphore_wait_host(sem, 6, 1000000), CUVK_ERROR_TIMEOUT, CUVK_RULE_NONE);
    EXPECT_RULE(cuvk_semaphore_signal_host(sem, 5), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_SYNC_TIMELINE_NOT_INCREASING);
    /* A success clears the rule. */
    EXPECT(cuvk_semaphore_wait_host(sem, 5, 0), CUVK_SUCCESS);
    CHECK(cuvk_last_error_rule() == CUVK_RULE_NONE && cuvk_last_error()[0] == 0, "a success clears the error");
    EXPECT(cuvk_semaphore_cuda_signal(sem, NULL, 6), CUVK_ERROR_UNSUPPORTED);
    /* A frame server (a simulation in another process writes, the engine draws): refusals first. */
    CuvkFrameServer fs = 0;
    EXPECT(cuvk_frame_server_create(vb, NULL, 3, &fs), CUVK_ERROR_NULL_POINTER);
    EXPECT_RULE(cuvk_frame_server_create(vb, "capi-example-\xff", 3, &fs), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_NOT_UTF8);
    CHECK(fs == 0 && strstr(cuvk_last_error(), "0xff at 13") != NULL, "the refusal names the byte: %s",
          cuvk_last_error());
    EXPECT_RULE(cuvk_frame_server_create(vb, "capi-example", 0, &fs), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_SYNC_FRAMES_IN_FLIGHT);
    if (cuvk_frame_server_create(vb, "capi-example", 3, &fs) == CUVK_SUCCESS) {
        /* One buffer per frame in flight must be published before a producer is taken. */
        EXPECT_RULE(cuvk_frame_server_accept(fs, 1000000), CUVK_ERROR_INVALID_ARGUMENT,
                    CUVK_RULE_SYNC_SLOT_COUNT);
        EXPECT(cuvk_frame_server_destroy(fs), CUVK_SUCCESS);
        EXPECT(cuvk_frame_server_destroy(fs), CUVK_ERROR_STALE_HANDLE);
    } else {
        printf("frame server unavailable here (%s)\n", cuvk_last_error()); /* lavapipe: no semaphore export */
    }
    /* A subscriber: refusals before any connection. */
    CuvkSubscriber sub = 0;
    EXPECT(cuvk_subscriber_attach(vb, NULL, 0, 1000000, &sub), CUVK_ERROR_NULL_POINTER);
    EXPECT_RULE(cuvk_subscriber_attach(vb, "capi-example-\xff", 0, 1000000, &sub), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_NOT_UTF8);
    EXPECT_RULE(cuvk_subscriber_attach(vb, "capi-example", 2, 1000000, &sub), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_NOT_BOOLEAN);
    EXPECT(cuvk_subscriber_attach(vb, "capi-example-no-publisher", 0, 1000000, &sub), CUVK_ERROR_TIMEOUT);
    CHECK(sub == 0, "a refused attach makes no handle");
    uint32_t slots = 0;
    EXPECT(cuvk_subscriber_slot_count(0, &slots), CUVK_ERROR_INVALID_HANDLE);
    EXPECT(cuvk_subscriber_slot_count(vb, &slots), CUVK_ERROR_WRONG_HANDLE_KIND);
    EXPECT(cuvk_subscriber_destroy(vb), CUVK_ERROR_WRONG_HANDLE_KIND);
    /* A buffer of the Vulkan-only bridge has no CUDA side: no frame server publishes it. The
     * buffer is refused before the server handle is looked at, so this runs where no frame
     * server could be made too (fs is destroyed, or was never made). */
    uint32_t id = 99;
    const CuvkElementFormat u8 = {.code = 1, .bits = 8, .lanes = 1, .columns = 1};
    EXPECT_RULE(cuvk_frame_server_publish_buffer(fs, buf, u8, &id), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_BUFFER_NOT_SHARED);
    CHECK(id == 99 && strstr(cuvk_last_error(), "Vulkan-only") != NULL, "the refusal names the buffer: %s",
          cuvk_last_error());
    EXPECT(cuvk_buffer_info(buf, &info), CUVK_SUCCESS); /* the buffer is untouched */
    CuvkStaging st = 0;
    EXPECT(cuvk_staging_create(vb, 4096, &st), CUVK_ERROR_UNSUPPORTED);

    /* An image on the Vulkan-only bridge: the engine clears and reads it through the protocol. */
    const uint32_t iw = 64, ih = 48;
    CuvkImageDesc idesc = {.struct_size = sizeof idesc, .image_type = VK_IMAGE_TYPE_2D, .format = VK_FORMAT_R32_UINT, .width = iw,
                           .height = ih, .depth = 1, .array_layers = 1, .mip_levels = 1,
                           .usage = VK_IMAGE_USAGE_SAMPLED_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT};
    CuvkImage image = 0;
    EXPECT(cuvk_image_create(vb, &idesc, &image), CUVK_SUCCESS);
    CuvkImageInfo iinfo = {.struct_size = sizeof iinfo};
    EXPECT(cuvk_image_info(image, &iinfo), CUVK_SUCCESS);
    CHECK(iinfo.vk_image != 0 && iinfo.vk_layout == VK_IMAGE_LAYOUT_GENERAL && iinfo.external && iinfo.cuda_mipmapped_array == 0,
          "Vulkan-only image info");
    CHECK(engine_image_read_back(&e, (VkImage)(uintptr_t)iinfo.vk_image, iw, ih, 1, 0x12345678u, VK_NULL_HANDLE, 0, 0x12345678u),
          "the engine cleared and read the cuvk image");
    CHECK(engine_image_read_back(&e, (VkImage)(uintptr_t)iinfo.vk_image, iw, ih, 1, 0x9abcdefu, VK_NULL_HANDLE, 0, 0x9abcdefu),
          "and again: the image was back in the protocol's state");
    uint64_t none = 0;
    EXPECT(cuvk_image_surface(image, 0, &none), CUVK_ERROR_UNSUPPORTED);
    EXPECT(cuvk_image_cuda_array(image, 0, &none), CUVK_ERROR_UNSUPPORTED);
    CuvkTextureDesc tdesc = {.struct_size = sizeof tdesc};
    CuvkTexture texture = 0;
    EXPECT(cuvk_texture_create(image, &tdesc, &texture, &none), CUVK_ERROR_UNSUPPORTED);
    /* Modes no CUaddress_mode / CUfilter_mode names, refused at the boundary with their rules
     * (before the image is looked at, so a Vulkan-only image shows them too). */
    tdesc.address_mode = 9;
    EXPECT_RULE(cuvk_texture_create(image, &tdesc, &texture, &none), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_UNKNOWN_ADDRESS_MODE);
    CHECK(strstr(cuvk_last_error(), "address mode 9") != NULL, "the refusal names the mode: %s", cuvk_last_error());
    tdesc.address_mode = 1;
    tdesc.filter = 7;
    EXPECT_RULE(cuvk_texture_create(image, &tdesc, &texture, &none), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_UNKNOWN_FILTER_MODE);
    CHECK(strstr(cuvk_last_error(), "filter mode 7") != NULL, "the refusal names the mode: %s", cuvk_last_error());
    tdesc.filter = 0;
    CHECK(texture == 0 && none == 0, "no texture was issued for unknown modes");
    EXPECT(cuvk_image_info(image, &iinfo), CUVK_SUCCESS); /* the next valid call works */
    /* Bad image descriptions, each refused before anything is created. */
    CuvkImage bad_image = 0;
    CuvkImageDesc bad = idesc;
    bad.format = VK_FORMAT_R8G8B8_UNORM; /* 3 channels: not in the table */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_UNSUPPORTED, CUVK_RULE_IMAGE_UNSUPPORTED_FORMAT);
    bad = idesc;
    bad.format = VK_FORMAT_D32_SFLOAT;
    EXPECT(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_UNSUPPORTED);
    bad = idesc;
    bad.width = 0;
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_IMAGE_ZERO_EXTENT);
    bad = idesc;
    bad.width = 1u << 20; /* over the device's limit */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_IMAGE_OVER_LIMIT);
    bad = idesc;
    bad.image_type = VK_IMAGE_TYPE_3D;
    bad.depth = 4;
    bad.array_layers = 2; /* 3D with layers */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_IMAGE_LAYERS_ON3D);
    bad = idesc;
    bad.flags = CUVK_IMAGE_CUBE;
    bad.array_layers = 6; /* a cube that is not square */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_IMAGE_CUBE_NOT_SQUARE);
    bad.width = bad.height;
    bad.array_layers = 4; /* a cube of 4 layers */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_IMAGE_CUBE_LAYERS);
    bad = idesc;
    bad.mip_levels = 12; /* more than the full chain of 64x48 (7) */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT, CUVK_RULE_IMAGE_MIP_LEVELS);
    bad = idesc;
    bad.flags = 0x80 | CUVK_IMAGE_DEDICATED; /* a bit no flag names: only C can pass it */
    EXPECT_RULE(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_INVALID_ARGUMENT,
                CUVK_RULE_ARGUMENT_UNKNOWN_IMAGE_FLAGS);
    CHECK(strstr(cuvk_last_error(), "0x82") != NULL && strstr(cuvk_last_error(), "unknown bits 0x80") != NULL,
          "the refusal names the flags: %s", cuvk_last_error());
    /* Nothing was made, and the next valid call works. */
    CHECK(bad_image == 0, "no image handle was issued for unknown flags");
    CuvkImage good_image = 0;
    EXPECT(cuvk_image_create(vb, &idesc, &good_image), CUVK_SUCCESS);
    CHECK(good_image != 0 && cuvk_last_error_rule() == CUVK_RULE_NONE, "a valid image after the refusal");
    EXPECT(cuvk_image_destroy(good_image), CUVK_SUCCESS);
    bad = idesc;
    bad.struct_size = 8;
    EXPECT(cuvk_image_create(vb, &bad, &bad_image), CUVK_ERROR_STRUCT_SIZE);
    EXPECT(cuvk_image_create(vb, NULL, &bad_image), CUVK_ERROR_NULL_POINTER);
    CHECK(bad_image == 0, "no image handle was issued for a refused description");
    EXPECT(cuvk_image_info(buf, &iinfo), CUVK_ERROR_WRONG_HANDLE_KIND);
    EXPECT(cuvk_image_destroy(image), CUVK_SUCCESS);
    EXPECT(cuvk_image_destroy(image), CUVK_ERROR_STALE_HANDLE);
    EXPECT(cuvk_image_info(image, &iinfo), CUVK_ERROR_STALE_HANDLE);

    /* Wrong kinds, never-issued and stale handles, double destroy, calls after destroy. */
    EXPECT(cuvk_buffer_info(vb, &info), CUVK_ERROR_WRONG_HANDLE_KIND);
    EXPECT(cuvk_bridge_destroy(buf), CUVK_ERROR_WRONG_HANDLE_KIND);
    if (sem) EXPECT(cuvk_buffer_destroy(sem), CUVK_ERROR_WRONG_HANDLE_KIND);
    EXPECT(cuvk_buffer_destroy(0), CUVK_ERROR_INVALID_HANDLE);
    EXPECT(cuvk_buffer_destroy(0x0200000100abcdefull), CUVK_ERROR_INVALID_HANDLE);
    EXPECT(cuvk_buffer_destroy(buf), CUVK_SUCCESS);
    EXPECT(cuvk_buffer_destroy(buf), CUVK_ERROR_STALE_HANDLE);
    EXPECT(cuvk_buffer_info(buf, &info), CUVK_ERROR_STALE_HANDLE);
    if (sem) {
        EXPECT(cuvk_semaphore_destroy(sem), CUVK_SUCCESS);
        EXPECT(cuvk_semaphore_wait_host(sem, 1, 0), CUVK_ERROR_STALE_HANDLE);
    }
    EXPECT(cuvk_bridge_destroy(vb), CUVK_SUCCESS);
    EXPECT(cuvk_bridge_destroy(vb), CUVK_ERROR_STALE_HANDLE);
    EXPECT(cuvk_buffer_create(vb, 64, 0, &buf), CUVK_ERROR_STALE_HANDLE);
    printf("Vulkan-only path and every error path: done\n");

    cuda_path(&e, &d);

    engine_destroy(&e);
    CHECK(validation_messages == 0, "%u validation messages", validation_messages);
    printf("capi example: %s (%d failures, validation %s)\n", failures ? "FAILED" : "OK", failures,
           e.validation ? "on" : "off");
    return failures ? 1 : 0;
}
