#include "comm/api/work.hpp"

#include <cstdio>
#include <exception>

namespace strata::comm {

Work& Work::operator=(Work&& o) noexcept {
  if (this != &o) {
    finish_quietly();
    state_ = std::move(o.state_);
  }
  return *this;
}

Work::~Work() { finish_quietly(); }

void Work::wait() {
  if (!state_) return;
  auto s = std::move(state_);  // a handle is waited once; afterwards it is finished
  s->wait();
}

bool Work::test() { return !state_ || state_->test(); }

void Work::finish_quietly() noexcept {
  if (!state_) return;
  try {
    state_->wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: error in a collective nobody waited for: %s\n", e.what());
  }
  state_.reset();
}

}  // namespace strata::comm
