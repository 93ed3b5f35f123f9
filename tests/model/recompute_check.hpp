#pragma once
// Activation recomputation must not change a bit: losses, logits, gradients (accumulated over
// two micro-batches with different scales), an evaluation in between, and the unit walk, at 1
// and 3 threads (3 take uneven row shares). Shared by each family's test: `Problem` is that
// test's harness (B, T, config, layout, params, tokens, targets, run(), zero_grads()).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "model/model.hpp"
#include "model/recording_access.hpp"

namespace strata::model::test {

template <class Family, class Problem>
void expect_recomputation_changes_no_bit(Problem& pb, Problem& other) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    omp_set_num_threads(threads);
    Family kept(pb.config, Problem::B, pb.T), again(pb.config, Problem::B, pb.T, true);
    EXPECT_FALSE(kept.recompute());
    EXPECT_TRUE(again.recompute());
    auto gk = pb.zero_grads(), ga = pb.zero_grads();
    EXPECT_EQ(pb.run(kept, gk), pb.run(again, ga));
    EXPECT_EQ(0, std::memcmp(kept.logits(), again.logits(),
                             sizeof(float) * Problem::B * pb.T * pb.config.padded_vocab_size));
    ArenaAccess eval_k(pb.layout, other.params.data(), nullptr), eval_a(pb.layout, other.params.data(), nullptr);
    EXPECT_EQ(kept.forward(eval_k, other.tokens.data(), other.targets.data()),
              again.forward(eval_a, other.tokens.data(), other.targets.data()));
    EXPECT_EQ(pb.run(kept, gk, 0.5f), pb.run(again, ga, 0.5f));
    EXPECT_EQ(0, std::memcmp(gk.data(), ga.data(), gk.size() * sizeof(float)));

    RecordingAccess rec(pb.layout, pb.params.data());
    again.forward_backward(rec, pb.tokens.data(), pb.targets.data(), 1.f);
    EXPECT_EQ(rec.events, unit_event_order(pb.config));
  }
  omp_set_num_threads(saved);
  // What each reports allocating is what the one formula (model.hpp) says.
  EXPECT_EQ(Family(pb.config, Problem::B, pb.T).activation_bytes(),
            activation_bytes(pb.config, Problem::B, pb.T, false));
  EXPECT_EQ(Family(pb.config, Problem::B, pb.T, true).activation_bytes(),
            activation_bytes(pb.config, Problem::B, pb.T, true));
}

}  // namespace strata::model::test
