// The CPU emulation's race check (tests/cuda/cuda_emulator_race_check.h
// RaceCheckScope) on small kernels written here, each racing or not by
// construction: what it must report, and what it must not.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda/cuda_emulator.h"

namespace strata::cuda_emulation_test {
namespace {
using namespace strata::cuda_emulation;

int counted = 0;
float read_back[2] = {0.0f, 0.0f};

// Every thread adds 1 to one shared counter with a plain read, add and
// write: on a device updates are lost; here each thread runs to its next
// barrier, so the sum is right and only the race check can tell.
void count_plainly() {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  total += 1;
  __syncthreads();
  if (threadIdx.x == 0) counted = total;
}

// The same with atomicAdd.
void count_atomically() {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  atomicAdd(&total, 1);
  __syncthreads();
  if (threadIdx.x == 0) counted = total;
}

// Each thread in turn writes one slot, a block barrier after each turn.
void take_turns() {
  __shared__ int slot;
  for (unsigned turn = 0; turn < blockDim.x; ++turn) {
    if (threadIdx.x == turn) slot = static_cast<int>(turn) + 1;
    __syncthreads();
  }
  if (threadIdx.x == 0) counted = slot;
}

// Threads 0 and `second` write one slot with a __syncwarp() between:
// ordered when both are lanes of one warp, a race when not.
unsigned second = 1;
void write_around_a_warp_barrier() {
  __shared__ int slot;
  if (threadIdx.x == 0) slot = 0x01010101;
  __syncwarp();
  if (threadIdx.x == second) slot = 0x02020202;
  __syncthreads();
  if (threadIdx.x == 0) counted = slot;
}

// Thread 0 of every block writes the block's shared slot: blocks have
// shared memory of their own, so no race.
void one_write_a_block() {
  __shared__ int slot;
  if (threadIdx.x == 0) slot = static_cast<int>(blockIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) counted += slot;
}

// Reads a shared value the block never writes (a bug: undefined on a
// device); block 0 writes it, block 1 only reads it.
void read_unwritten() {
  __shared__ float value;
  if (blockIdx.x == 0 && threadIdx.x == 0) value = 2.0f;
  __syncthreads();
  if (threadIdx.x == 0) read_back[blockIdx.x] = value;
}

TEST(CudaEmulatorRaceCheck, ReportsPlainAddsToOneSharedCounter) {
  RaceCheckScope check;
  launch(1, 64, [] { count_plainly(); });
  EXPECT_EQ(counted, 64);  // right here, lost on a device
  // Threads 1..63 each rewrite the 4 bytes thread 0, 1, ... wrote (those
  // that change: 0 -> 1 changes one byte, ..., 63 -> 64 one).
  EXPECT_GT(check.races(), 0u);
  ASSERT_FALSE(check.reports().empty());
  const std::string& first = check.reports()[0];
  // (Thread 63, the last at the first barrier, adds first: it goes on past
  // the barrier it completes.)
  EXPECT_NE(first.find("block 0: threads 63 and 0 both wrote shared memory bytes ["),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("cuda_emulator_race_check_test.cc:"), std::string::npos) << first;
  EXPECT_LE(check.reports().size(), RaceCheck::kMaxReports);
  EXPECT_EQ(check.described().find(std::to_string(check.races()) +
                                   " bytes of shared memory written racing; the first:\n" + first),
            0u)
      << check.described();
}

TEST(CudaEmulatorRaceCheck, AtomicAddsDoNotRace) {
  RaceCheckScope check;
  launch(1, 64, [] { count_atomically(); });
  EXPECT_EQ(counted, 64);
  EXPECT_EQ(check.races(), 0u) << check.described();
}

TEST(CudaEmulatorRaceCheck, BlockBarriersOrderWrites) {
  RaceCheckScope check;
  launch(1, 96, [] { take_turns(); });
  EXPECT_EQ(counted, 96);
  EXPECT_EQ(check.races(), 0u) << check.described();
}

TEST(CudaEmulatorRaceCheck, AWarpBarrierOrdersOnlyItsOwnLanes) {
  {
    RaceCheckScope check;
    second = 31;  // the last lane of warp 0
    launch(1, 64, [] { write_around_a_warp_barrier(); });
    EXPECT_EQ(counted, 0x02020202);
    EXPECT_EQ(check.races(), 0u) << check.described();
  }
  RaceCheckScope check;
  second = 32;  // the first lane of warp 1: nothing orders it after thread 0
  launch(1, 64, [] { write_around_a_warp_barrier(); });
  EXPECT_EQ(check.races(), 4u);  // the int's 4 bytes, in one report
  ASSERT_EQ(check.reports().size(), 1u);
  EXPECT_NE(check.reports()[0].find("threads 0 and 32 both wrote shared memory bytes ["),
            std::string::npos)
      << check.described();
  EXPECT_NE(check.reports()[0].find(") with no barrier between (thread 0 stopping next at "
                                    "cuda_emulator_race_check_test.cc:"),
            std::string::npos)
      << check.described();
}

TEST(CudaEmulatorRaceCheck, BlocksHaveSharedMemoryOfTheirOwn) {
  RaceCheckScope check;
  counted = 0;
  launch(5, 32, [] { one_write_a_block(); });
  EXPECT_EQ(counted, 0 + 1 + 2 + 3 + 4);
  EXPECT_EQ(check.races(), 0u) << check.described();
}

TEST(CudaEmulatorRaceCheck, SharedMemoryABlockNeverWroteReadsAsNaN) {
  {
    RaceCheckScope check;
    launch(2, 32, [] { read_unwritten(); });
    EXPECT_EQ(read_back[0], 2.0f);
    EXPECT_TRUE(std::isnan(read_back[1])) << read_back[1];
  }
  // Without the check, shared memory is what the block before left (why
  // the check fills it).
  launch(2, 32, [] { read_unwritten(); });
  EXPECT_EQ(read_back[1], 2.0f);
}

TEST(CudaEmulatorRaceCheck, AScopeStartsWithNoReports) {
  {
    RaceCheckScope check;
    launch(1, 64, [] { count_plainly(); });
    EXPECT_GT(check.races(), 0u);
  }
  // Off: nothing is looked at.
  launch(1, 64, [] { count_plainly(); });
  RaceCheckScope check;
  EXPECT_EQ(check.races(), 0u);
  EXPECT_TRUE(check.reports().empty());
  EXPECT_EQ(check.described(), "");
  launch(1, 64, [] { count_atomically(); });
  EXPECT_EQ(check.races(), 0u);
}

}  // namespace
}  // namespace strata::cuda_emulation_test
