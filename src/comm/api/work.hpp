#pragma once
// A handle on a collective that may still be running. wait() blocks until it finished and
// rethrows any error it raised; test() polls. A handle that is dropped without wait()
// waits in its destructor, so a buffer can never be released while a collective uses it.
#include <memory>

namespace strata::comm {

class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual void wait() = 0;  // rethrows the collective's error, if any
  virtual bool test() = 0;  // true once finished (wait() then returns at once)
};

class Work {
 public:
  Work() = default;  // an already-finished handle
  explicit Work(std::shared_ptr<WorkState> s) : state_(std::move(s)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& o) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  void wait();
  bool test();

 private:
  void finish_quietly() noexcept;
  std::shared_ptr<WorkState> state_;
};

}  // namespace strata::comm
