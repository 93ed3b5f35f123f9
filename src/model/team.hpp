#pragma once
// What the models' per-unit code shares: one OpenMP parallel region per unit, whose
// threads each take a fixed share of the work (kernels.hpp explains why), and the id check.
#include <omp.h>

#include <cstddef>
#include <cstdint>

#include <fmt/format.h>

#include "base/error.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"

namespace strata::model {

inline void check_ids(const std::int32_t* ids, std::size_t n, int vocab, const char* what) {
  for (std::size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error(fmt::format("model: {} id {} at position {} is outside the vocabulary [0, {})", what, ids[i], i,
                              vocab));
}

// One OpenMP parallel region per unit: f(team) runs on every thread, which works on its
// share of rows, columns or (batch, head) pairs.
struct Team {
  int id, size;
  Range share(int n, int align = 1) const { return model::share(n, size, id, align); }
  // When the batch divides evenly, a thread's share of the B*T rows is whole sequences and
  // its share of the (batch, head) pairs is theirs: attention then reads only rows this
  // thread wrote, and the barriers around it can go.
  bool owns_whole_sequences(int B) const { return B % size == 0; }
};
template <class F>
inline void in_parallel(F&& f) {
#pragma omp parallel
  f(Team{omp_get_thread_num(), omp_get_num_threads()});
}
inline void barrier() {
#pragma omp barrier
}

}  // namespace strata::model
