// The decode-graph policy: which batch buckets exist, which bucket a batch pads to, and
// which steps may replay a graph (one new token per sequence, no penalty history).
#include "microllm/infer/decode_graphs.h"

#include <gtest/gtest.h>

#include "core/expect_error.h"

using namespace microllm::infer;
using microllm::testing::throws_error;

TEST(DecodeGraphs, BucketsArePowersOfTwoUpToTheLargestBatch) {
  EXPECT_EQ(decode_buckets(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(decode_buckets(2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(decode_buckets(64), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(decode_buckets(256), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  // A largest batch that is no power of two is a bucket of its own.
  EXPECT_EQ(decode_buckets(48), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 48}));
  EXPECT_TRUE(
      throws_error([] { decode_buckets(0); }, "decode graphs", {"max_num_seqs must be >= 1"}));
}

TEST(DecodeGraphs, ABatchPadsToTheSmallestBucketHoldingIt) {
  const std::vector<int64_t> buckets = decode_buckets(48);
  EXPECT_EQ(bucket_for(buckets, 1), 1);
  EXPECT_EQ(bucket_for(buckets, 3), 4);
  EXPECT_EQ(bucket_for(buckets, 8), 8);
  EXPECT_EQ(bucket_for(buckets, 33), 48);
  EXPECT_EQ(bucket_for(buckets, 48), 48);
  EXPECT_EQ(bucket_for(buckets, 49), 0);  // no bucket: the step runs eagerly
  EXPECT_EQ(bucket_for({}, 1), 0);        // no graphs at all (CPU, --no-cuda-graphs)
}

TEST(DecodeGraphs, OnlyOneTokenPerSequenceWithoutHistoryReplaysAGraph) {
  EXPECT_TRUE(graphable_step(4, 4, 0));
  EXPECT_FALSE(graphable_step(5, 4, 0));   // a prefill chunk in the step
  EXPECT_FALSE(graphable_step(4, 4, 17));  // a row with a repetition penalty
  EXPECT_FALSE(graphable_step(0, 0, 0));
}
