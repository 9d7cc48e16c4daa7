// CUDA runtime wrappers: error checks, device queries, RAII buffers, streams and events.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/device.h"
#include "backend/cuda/device_arena.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_spin.h"
#include "backend/cuda/pinned_arena.h"
#include "common/error.h"
#include "tests_support/error_of.h"

namespace di {
namespace {

using test::error_of;

// These need no device.
TEST(CudaCheckTest, NamesTheErrorTheExpressionAndTheLocation) {
  const std::string msg = error_of([] { DI_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in cudaErrorInvalidValue"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda_runtime_test.cc:"), std::string::npos) << msg;
  EXPECT_NO_THROW(DI_CUDA_CHECK(cudaSuccess));
}

TEST(CudaDeviceTest, CountNeverThrows) {
  int count = -1;
  EXPECT_NO_THROW(count = cuda_device_count());
  EXPECT_GE(count, 0);
  const std::string msg = error_of([] { device_info(cuda_device_count()); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: runtime test skipped";
  }
};

TEST_F(CudaRuntimeTest, DeviceInfo) {
  const DeviceInfo info = device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.sm_major, 7);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.total_mem, size_t{1} << 30);
  std::printf("device 0: %s, sm_%d%d, %d SMs, %zu bytes\n", info.name.c_str(), info.sm_major,
              info.sm_minor, info.sm_count, info.total_mem);
}

TEST_F(CudaRuntimeTest, OutOfMemoryNamesSizeAndTag) {
  const std::string msg = error_of([] { DeviceBuffer huge(size_t{1} << 50, "kv_cache pool"); });
  EXPECT_NE(msg.find("1125899906842624 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'kv_cache pool'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("free of"), std::string::npos) << msg;
  // The failure is cleared: later calls work.
  EXPECT_NO_THROW(DeviceBuffer small(1024, "after oom"));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(CudaRuntimeTest, BufferRoundTripAndMoves) {
  Stream stream;
  std::vector<uint8_t> in(4096);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<uint8_t>(i * 7);
  DeviceBuffer a(in.size(), "a");
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), in.size());
  a.copy_from_host_async(in.data(), in.size(), stream.get());

  DeviceBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.tag(), "a");
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.size(), in.size());

  PinnedHostBuffer pinned(in.size(), "staging");
  c.copy_to_host_async(pinned.data(), in.size(), stream.get());
  stream.synchronize();
  EXPECT_EQ(std::memcmp(pinned.data(), in.data(), in.size()), 0);

  c.fill_async(0xAB, stream.get());
  std::vector<uint8_t> out(16);
  c.copy_to_host_async(out.data(), out.size(), stream.get(), 100);
  stream.synchronize();
  for (uint8_t v : out)
    EXPECT_EQ(v, 0xAB);

  EXPECT_THROW(c.copy_to_host_async(out.data(), 16, stream.get(), in.size() - 8), Error);
  EXPECT_THROW(c.copy_from_host_async(in.data(), in.size() + 1, stream.get()), Error);
  DeviceBuffer empty(0, "empty");
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
}

TEST_F(CudaRuntimeTest, StreamsAndEvents) {
  Stream stream;
  Event start(/*timing=*/true);
  Event stop(/*timing=*/true);
  DeviceBuffer buf(size_t{64} << 20, "memset target");
  start.record(stream.get());
  buf.fill_async(0, stream.get());
  stop.record(stream.get());
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GE(Event::elapsed_ms(start, stop), 0.0f);

  Stream moved(std::move(stream));
  EXPECT_NO_THROW(moved.synchronize());
  EXPECT_THROW((void)stream.get(), Error);  // NOLINT(bugprone-use-after-move)
  Event plain;
  plain.record(moved.get());
  plain.synchronize();
  EXPECT_TRUE(plain.query());
}

// gpu_spin holds the stream: work queued behind it is not done before the spin's time passed,
// and an event pair around it measures at least that time.
TEST_F(CudaRuntimeTest, SpinHoldsTheStream) {
  Stream stream;
  Event start(/*timing=*/true);
  Event stop(/*timing=*/true);
  start.record(stream.get());
  gpu_spin(20000.0, stream.get());
  stop.record(stream.get());
  EXPECT_FALSE(stop.query());  // 20 ms of spin cannot have passed yet
  stop.synchronize();
  EXPECT_GE(Event::elapsed_ms(start, stop), 19.9f);
  EXPECT_THROW(gpu_spin(-1.0, stream.get()), Error);
}

// Pinned upload memory: allocations are aligned, never move while the arena grows (a queued copy
// may still read them), copy to the device asynchronously, and reset() folds the chunks into one.
TEST_F(CudaRuntimeTest, PinnedArenaKeepsAllocationsUntilResetAndFolds) {
  PinnedArena arena("test uploads", 4096);
  EXPECT_EQ(arena.chunks(), 1u);
  std::span<std::byte> a = arena.allocate(1000);
  std::memset(a.data(), 0xAB, a.size());
  std::span<std::byte> b = arena.allocate(3100, 256);  // 1024 + 3100 > 4096: a second chunk
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
  std::memset(b.data(), 0xCD, b.size());
  EXPECT_EQ(arena.chunks(), 2u);
  for (std::byte v : a)
    ASSERT_EQ(v, std::byte{0xAB});  // untouched by the growth
  EXPECT_GE(arena.used_bytes(), 4100u);
  // Both regions reach the device through queued copies.
  Stream stream;
  DeviceBuffer dev(4100, "pinned round trip");
  dev.copy_from_host_async(a.data(), a.size(), stream.get());
  dev.copy_from_host_async(b.data(), b.size(), stream.get(), 1000);
  std::vector<std::byte> back(4100);
  dev.copy_to_host_async(back.data(), back.size(), stream.get());
  stream.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), a.data(), 1000), 0);
  EXPECT_EQ(std::memcmp(back.data() + 1000, b.data(), 3100), 0);
  const size_t capacity = arena.capacity_bytes();
  arena.reset();
  EXPECT_EQ(arena.chunks(), 1u);
  EXPECT_EQ(arena.capacity_bytes(), capacity);
  EXPECT_EQ(arena.used_bytes(), 0u);
  std::span<std::byte> c = arena.allocate(capacity - 64);  // the folded chunk holds the step
  EXPECT_EQ(arena.chunks(), 1u);
  EXPECT_EQ(c.size(), capacity - 64);
  EXPECT_NE(error_of([&] { arena.allocate(8, 3); }).find("alignment 3"), std::string::npos);
  PinnedArena moved(std::move(arena));
  EXPECT_EQ(moved.chunks(), 1u);
}

TEST_F(CudaRuntimeTest, ArenaHandsOutThePlannedBuffers) {
  WorkspacePlan plan;
  plan.add("a", 1000);
  plan.add("b", 4096, 4096);
  DeviceArena arena(plan, "test arena");
  EXPECT_EQ(arena.total_bytes(), plan.total_bytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.data("b")) % 4096, 0u);
  EXPECT_EQ(static_cast<std::byte*>(arena.data("b")) - static_cast<std::byte*>(arena.data("a")),
            4096);
  EXPECT_THROW((void)arena.data("c"), Error);
  // An impossible plan fails at start-up with the buffer list in the message.
  WorkspacePlan huge;
  huge.add("activations", size_t{1} << 50);
  try {
    DeviceArena too_big(huge, "huge arena");
    ADD_FAILURE() << "allocation of 1 PiB succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activations"), std::string::npos) << e.what();
  }
}

TEST_F(CudaRuntimeTest, GraphReplaysCapturedWorkOnNewInputs) {
  Stream stream;
  DeviceBuffer src(1024, "src"), dst(1024, "dst");
  std::vector<uint8_t> host(1024, 7), back(1024, 0);
  CudaGraph graph;
  graph.capture(stream.get(), [&](cudaStream_t s) {
    DI_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, 1024, s));
    DI_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), 512, cudaMemcpyDeviceToDevice, s));
  });
  EXPECT_TRUE(graph.captured());
  EXPECT_EQ(graph.num_nodes(), 2u);
  for (uint8_t value : {uint8_t{7}, uint8_t{42}}) {
    std::fill(host.begin(), host.end(), value);
    src.copy_from_host_async(host.data(), 1024, stream.get());
    graph.replay(stream.get());
    dst.copy_to_host_async(back.data(), 1024, stream.get());
    stream.synchronize();
    EXPECT_EQ(back[0], value);
    EXPECT_EQ(back[511], value);
    EXPECT_EQ(back[512], 0);  // the memset node ran too
  }
  // A throwing capture leaves the stream usable and the graph empty.
  CudaGraph failed;
  EXPECT_THROW(failed.capture(stream.get(), [](cudaStream_t) { throw Error("boom"); }), Error);
  EXPECT_FALSE(failed.captured());
  EXPECT_NO_THROW(stream.synchronize());
  EXPECT_THROW(failed.replay(stream.get()), Error);
}

}  // namespace
}  // namespace di
